"""The second pass of a redaction: the written derivative, read back and searched by code that shares nothing with
the redactor's reading and removal (which use pikepdf and its own content-stream walk); only the rules' matcher and
its normalization (matching.py), the OCR engine with pdfium's rendering (ocr.py), the judgement of what a content
stream carries (``content_holds``, which the first pass's sweep asks too) and what a glyph name spells in a font
without a ToUnicode map, as poppler reads it (``pdftext.differences``) are common.

Everything is searched for the values the first pass removed and for every rule of the template, after the same
normalization: every page as a reader sees it, and every view a reader can bring up (reader_views.py: every
layer, printing, an annotation's other appearances, the media box; tinted and coloured areas read by their
contrast), rendered by pdfium with its annotations and form appearances, all
it shows that its trusted text layer does not explain read by OCR at any angle (ocr.shown_pages), its lines read
apart and joined; page text extracted by pypdf and by pdfium (pypdfium2), and by pdfium again from a copy whose
fonts that name their glyphs without a ToUnicode map are given one saying what poppler reads the names as (a name
neither reads, pdftotext shows: ``_glyph_names_mapped``); the OCR text of every image, decoded by
pypdf, or where pypdf cannot, by pdfium where a page draws it (one neither decodes is a finding); and every object
of the file as pypdf loads it, each by what it can show or carry, not by its syntax:

- each string; each name but those the PDF specification defines as a key or value (pdfsyntax.SPEC_NAMES, from
  the Arlington PDF model): a name the file coins (a resource name, a custom key, a font's name) counts;
- a content stream (page contents, form XObjects, tiling patterns, Type3 glyph procedures, appearance streams) and
  a CMap by their string operands (text shown, marked-content properties), the names they use (tags, resource
  and property names) and their comments, never their numbers (coordinates, MCIDs) or other bytes;
- a font program and an ICC profile by the text they carry (names, notices, descriptions: pdfsyntax), for the
  values only (a rule on a font maker's notice finds the maker's words), never their glyph data or curves;
- any other stream (XMP, JavaScript, what is unknown, a stream used two ways or that its kind's parser cannot
  read) by its decoded bytes, binary data for the values only.

No embedded file may remain. Any finding fails the job with REDACTION_VERIFICATION_FAILED; the message counts
findings by place, never the values. A page OCR cannot read with confidence, unless a region rule covers it, is
REDACTION_UNSUPPORTED_CONTENT.

Over 400 lines because it is the second pass whole: every place a reader can reach, judged in one module that
shares no reading or removal with the first pass (its helpers for views and object syntax are reader_views.py and
pdfsyntax.py).
"""

from __future__ import annotations

import ctypes
import io
from collections import Counter, defaultdict
from typing import BinaryIO

import pikepdf
import pypdfium2
import pypdfium2.raw as pdfium_c
from pypdf import PdfReader, apply_configuration
from pypdf.errors import PyPdfError
from pypdf.generic import (
    ArrayObject,
    ByteStringObject,
    ContentStream,
    DecodedStreamObject,
    DictionaryObject,
    IndirectObject,
    NameObject,
    StreamObject,
    TextStringObject,
)

from evidence_pipeline.documents import budgets, ocr, pdfsyntax, pdftext, reader_views
from evidence_pipeline.documents.gate import LIMITS, _every_object
from evidence_pipeline.documents.matching import Rules, Search, decodings, name_text
from evidence_pipeline.documents.registry import ProcessorResult
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.monthly.validate import PDFIUM_LOCK, pdfium_text

_BOUNCE = 0.8  # of a character's loose box (about 1.15 of its font size): lines set 1.0 apart are further
_BINARY = ("/FontFile", "/FontFile2", "/FontFile3", "/Length1", "/Length2", "/Length3", "/N", "/FunctionType")
# pdfium's FPDFText_GetTextObject answering the object's address, not a ctypes pointer built for each of a page's
# thousands of characters (that building cost a typed page more than pdfium's own work)
_text_object = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)(
    ctypes.cast(pdfium_c.FPDFText_GetTextObject, ctypes.c_void_p).value
)


def verify_derivative(written: dict[str, BinaryIO], result: ProcessorResult) -> dict:
    """Check the written derivative against the values the first pass removed and every rule, reading in the
    OCR languages the first pass read in (the pinned template's); the verification record."""
    with ocr.reading_in(result.secret["languages"]):
        return _verified(written, result.secret)


def _verified(written: dict[str, BinaryIO], secret: dict) -> dict:
    file = written[secret["derivative"]]
    file.seek(0)
    data = file.read()
    search = Search(secret["rules"], secret["values"])
    found: Counter = Counter()
    texts = {"pypdf": _pypdf_text(data), **_pdfium_texts(data)}
    if (named := _glyph_names_mapped(data)) is not None:
        texts |= {f"{extractor}_glyph_names": pages for extractor, pages in _pdfium_texts(named).items()}
    for extractor, pages in texts.items():
        found[f"{extractor}_text"] = sum(search.holds(page) for page in pages)
    shown, _ = reader_views.every_view(data)  # every layer, state and box a reader can bring up, pages appended
    found["rendered_page"], tinted = _rendered_holding(shown, search, secret["rules"], secret["painted"])
    found["rendered_contrast"] = reader_views.contrast_holding(shown, search, tinted)
    scanned = _scan_objects(data, search, found)
    if +found:
        raise EvidenceError(
            ReasonCode.REDACTION_VERIFICATION_FAILED,
            "the derivative still holds removed content: " + ", ".join(f"{k} {v}" for k, v in sorted((+found).items())),
        )
    return {
        "passed": True,
        "values_checked": len(secret["values"]),
        "rules_checked": len(secret["rules"].patterns),
        "extractors": sorted(texts),
        "pages": len(texts["pypdf"]),
        "objects_scanned": scanned["objects"],
        "images_read": scanned["images"],
    }


def _rendered_holding(
    data: bytes, search: Search, rules: Rules, painted: dict[int, list]
) -> tuple[int, dict[int, tuple[int, int]]]:
    """Pages whose rendering, read by OCR, holds a value or a rule's match in any of its views, and each page's
    tinted area (reader_views.tinted_area, by index); a page OCR cannot read with confidence, unless a region rule
    covers it, is refused, as the first pass refuses it. Only the boxes the first pass recorded painting black are
    excused as dark areas, never dark pixels as such (a document's own dark panel may hold a value)."""
    holding, tinted = 0, {}
    for index, shown in ocr.shown_pages(data, painted):
        if shown.ink is not None and (area := reader_views.tinted_area(shown.ink)):
            tinted[index] = area
        number = index + 1
        reading = shown.reading
        if not reading.legible and number not in rules.regions:
            raise EvidenceError(
                ReasonCode.REDACTION_UNSUPPORTED_CONTENT,
                f"page {number} as rendered cannot be read with confidence by OCR; only a region rule can redact it",
            )
        holding += any(search.holds(view) for view in reading.views)
    return holding, tinted


def _pdfium_texts(data: bytes) -> dict[str, list[str]]:
    return {"pdfium": pdfium_text(data), **_pdfium_orders(data)}


def _glyph_names_mapped(data: bytes) -> bytes | None:
    """The derivative with a ToUnicode map given to each simple font that names its glyphs (/Differences) and has
    none, saying what poppler (pdftotext) reads each name as (``pdftext.differences``, the first pass's reading):
    pdfium reads a Type3 font's names not at all, and neither it nor pypdf a name outside the glyph list (/3,
    /three.alt, /three_nine), which pdftotext shows as text, nor a .notdef as nothing (pdfium reads its code); a
    code poppler cannot read keeps pdfium's reading. None when no font needs a map."""
    with pikepdf.open(io.BytesIO(data)) as pdf:
        mapped = 0
        for font in _fonts_naming_glyphs(pdf):
            # nothing (.notdef) as a zero-width space, which the matcher drops: pdfium reads a map to nothing as none
            named = {code: text or "\u200b" for code, text in pdftext.differences(font).items() if text != "\ufffd"}
            if named:
                font.ToUnicode = pdf.make_stream(_bfchar_cmap(named))
                mapped += 1
        if not mapped:
            return None
        out = io.BytesIO()
        pdf.save(out)
        return out.getvalue()


def _fonts_naming_glyphs(pdf: pikepdf.Pdf):
    """Every simple font the file can draw with that has a /Differences array and no ToUnicode map."""
    for font in ocr.fonts(pdf):
        encoding = font.get("/Encoding")
        if (
            font.get("/Subtype") in _SIMPLE_FONTS
            and "/ToUnicode" not in font
            and isinstance(encoding, pikepdf.Dictionary)
            and "/Differences" in encoding
        ):
            yield font


_SIMPLE_FONTS = ("/Type1", "/MMType1", "/TrueType", "/Type3")


def _bfchar_cmap(named: dict[int, str]) -> bytes:
    """A ToUnicode CMap of one-byte codes mapped to their text, a hundred codes a block (the specification's most)."""
    pairs = [f"<{code:02X}> <{text.encode('utf-16-be').hex().upper()}>" for code, text in sorted(named.items())]
    blocks = "".join(
        f"{len(chunk)} beginbfchar\n" + "\n".join(chunk) + "\nendbfchar\n"
        for chunk in (pairs[i : i + 100] for i in range(0, len(pairs), 100))
    )
    return (
        "/CIDInit /ProcSet findresource begin 12 dict begin begincmap /CMapName /Glyph-Names def\n"
        "1 begincodespacerange <00> <FF> endcodespacerange\n" + blocks + "endcmap\n"
        "CMapName currentdict /CMap defineresource pop end end\n"
    ).encode()


def _pdfium_orders(data: bytes) -> dict[str, list[str]]:
    """Each page's characters as pdfium boxes them, in three orders of their own (the first pass orders its own
    glyph model, redact.py): ``pdfium_reading_order``, as a reader reads them whatever order the content drew them
    in (lines by baseline, top to bottom, each left to right, a space where the gap is one);
    ``pdfium_bouncing_line``, the same with glyphs up to _BOUNCE of their height above or below the line's first
    on it (a line whose glyphs bounce, drawn out of order: a reader reads one line; lines set solid stay apart); and
    ``pdfium_drawing_order``, in the order the content draws them, a character that starts where the one before it
    ends on its line continuing its word, as pdftotext reads (content may start a line at every glyph, and draw
    another word over or among it). The rendered page's OCR skips text in fonts it trusts (ocr.py), so this is
    where a value drawn glyph by glyph out of order, or among another word's glyphs, in such a font is read
    whole."""
    orders: dict[str, list[str]] = {"pdfium_reading_order": [], "pdfium_bouncing_line": [], "pdfium_drawing_order": []}
    with PDFIUM_LOCK:
        document = pypdfium2.PdfDocument(data)
        try:
            for page in document:
                try:
                    boxes = _page_boxes(page)
                finally:
                    page.close()
                orders["pdfium_reading_order"].append(_in_reading_order(boxes))
                orders["pdfium_bouncing_line"].append(_in_reading_order(boxes, _BOUNCE))
                orders["pdfium_drawing_order"].append(_in_drawing_order(boxes))
        finally:
            document.close()
    return orders


def _page_boxes(page) -> list[tuple]:
    """(left, bottom, right, top, character, drawn) of each character pdfium finds on the page, but whitespace:
    its loose box (the line's ascent and descent) and where the page (forms entered) draws its text object."""
    drawn = {
        ctypes.cast(obj.raw, ctypes.c_void_p).value: n
        for n, obj in enumerate(page.get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_TEXT]))
    }
    textpage = page.get_textpage()
    try:
        count = textpage.count_chars()
        text = textpage.get_text_range(0, count)
        # pdfium's own calls with one rectangle for every character: pypdfium2's wrapper costs more than the call
        raw, rect, unknown, boxes = textpage.raw, pdfium_c.FS_RECTF(), len(drawn), []
        for index, char in enumerate(text[:count]):
            if char.isspace():
                continue
            obj = _text_object(raw, index)
            if not pdfium_c.FPDFText_GetLooseCharBox(raw, index, rect):
                raise pypdfium2.PdfiumError("Failed to get charbox.")  # as the wrapper would
            boxes.append((rect.left, rect.bottom, rect.right, rect.top, char, (drawn.get(obj, unknown), index)))
        return boxes
    finally:
        textpage.close()


def _in_reading_order(boxes: list[tuple], within: float = 0.5) -> str:
    """Lines of characters whose bottoms are ``within`` a character's height of the line's first, top to bottom,
    each left to right."""
    lines: list[list[tuple]] = []
    for box in sorted(boxes, key=lambda box: (-box[1], box[0])):  # top to bottom, then left to right
        _, bottom, _, top, *_ = box
        if lines and abs(lines[-1][0][1] - bottom) < within * max(top - bottom, 1e-6):
            lines[-1].append(box)
        else:
            lines.append([box])
    return "\n".join(_line_text(sorted(line)) for line in lines)


def _line_text(line: list[tuple]) -> str:
    pieces, end = [], None
    for left, bottom, right, top, char, _ in line:
        if end is not None and left - end > 0.2 * (top - bottom):
            pieces.append(" ")
        pieces.append(char)
        end = right
    return "".join(pieces)


def _in_drawing_order(boxes: list[tuple]) -> str:
    """Nothing between two characters drawn one after the other when the second starts where the first ends on
    its line (up to a fifth of the line's height apart, or overlapping it by a third), a space when it starts
    further on along the line, else a line break."""
    pieces, previous = [], None
    for left, bottom, right, top, char, _ in sorted(boxes, key=lambda box: box[5]):
        if previous is not None:
            height = max(previous[3] - previous[1], top - bottom, 1e-6)
            gap = left - previous[2]
            pieces.append(
                "\n"
                if abs(bottom - previous[1]) >= 0.5 * height or gap < -height / 3
                else ""
                if gap <= 0.2 * height
                else " "
            )
        pieces.append(char)
        previous = (left, bottom, right, top)
    return "".join(pieces)


def _pypdf_text(data: bytes) -> list[str]:
    with apply_configuration(**LIMITS):
        return [page.extract_text() or "" for page in PdfReader(io.BytesIO(data)).pages]


def _scan_objects(data: bytes, search: Search, found: Counter) -> dict[str, int]:
    """Every object pypdf finds in the file: strings, names, and streams by what each can show or carry (images
    read by OCR); findings by place."""
    values_only = Search(Rules([], {}, {}), search.values)  # for a font's or profile's own strings, binary data
    names: dict[str, bool] = {}  # name -> whether it holds, once per distinct name (keys and values)

    def holding(name: str) -> bool:
        if name not in names:
            names[name] = search.holds(name_text(name))  # a name the specification defines spells nothing
        return names[name]

    scanned = Counter()
    with apply_configuration(**LIMITS):
        reader = PdfReader(io.BytesIO(data))
        kinds = _stream_kinds(_every_object(reader))
        stack = list(_every_object(reader))
        while stack:
            obj = stack.pop()
            scanned["objects"] += 1
            if isinstance(obj, StreamObject) and obj.get("/Subtype") == "/Image":
                scanned["images"] += 1
                found["image_text"] += _image_holds(obj, search, data)
            elif isinstance(obj, StreamObject):
                kind = kinds.get(obj.indirect_reference.idnum) if obj.indirect_reference else None
                found["streams"] += _stream_holds(obj, kind, search=search, values_only=values_only, holding=holding)
            if isinstance(obj, DictionaryObject):
                found["embedded_files"] += (
                    obj.get("/Type") == "/EmbeddedFile" or "/EmbeddedFiles" in obj or "/EF" in obj
                )
                stack.extend(v for v in obj.values() if not isinstance(v, IndirectObject))
                found["names"] += sum(holding(key) for key in obj)
            elif isinstance(obj, ArrayObject):
                stack.extend(v for v in obj if not isinstance(v, IndirectObject))
            elif isinstance(obj, (TextStringObject, ByteStringObject)):
                found["strings"] += _string_holds(obj, search)
            elif isinstance(obj, NameObject):
                found["names"] += holding(str(obj))
    return scanned


def _stream_kinds(objects) -> dict[int, str]:
    """How each stream is used, by object number: drawn as page content (``content``: page contents, form
    XObjects, tiling patterns, Type3 glyph procedures, appearance streams), a font program (``font``), a CMap
    (``cmap``) or an ICC profile (``icc``). A stream also reached as metadata, JavaScript or an XFA part, or used
    two ways, is not listed: its bytes are searched as they are."""
    uses: dict[int, set[str]] = defaultdict(set)

    def use(value, kind: str) -> None:
        resolved = value.get_object() if isinstance(value, IndirectObject) else value
        for ref in resolved if isinstance(resolved, ArrayObject) else [value]:  # page contents may be an array
            if isinstance(ref, IndirectObject):
                uses[ref.idnum].add(kind)

    stack = list(objects)
    while stack:
        obj = stack.pop()
        if isinstance(obj, DictionaryObject):
            if isinstance(obj, StreamObject) and obj.indirect_reference:
                own = _OWN_KIND.get(obj.get("/Subtype")) or _OWN_KIND.get(obj.get("/Type"))
                if own or obj.get("/PatternType") == 1:
                    uses[obj.indirect_reference.idnum].add(own or "content")
            if obj.get("/Type") == "/Page" and "/Contents" in obj:
                use(dict.__getitem__(obj, "/Contents"), "content")
            for holder in ("/CharProcs", "/AP"):
                procs = obj.get(holder)
                for value in dict.values(procs) if isinstance(procs, DictionaryObject) else ():
                    states = value.get_object()  # an appearance is a stream, or a dictionary of them by state
                    use(value, "content")
                    if holder == "/AP" and type(states) is DictionaryObject:  # not a stream
                        for state in dict.values(states):
                            use(state, "content")
            for key, kind in _USED_AS.items():
                if key in obj:
                    use(dict.__getitem__(obj, key), kind)
            stack.extend(v for v in dict.values(obj) if not isinstance(v, IndirectObject))
        elif isinstance(obj, ArrayObject):
            if len(obj) == 2 and obj[0] == "/ICCBased":
                use(list.__getitem__(obj, 1), "icc")
            stack.extend(v for v in obj if not isinstance(v, IndirectObject))
    return {number: next(iter(kind)) for number, kind in uses.items() if len(kind) == 1 and "raw" not in kind}


_OWN_KIND = {"/Form": "content", "/CMap": "cmap", "/XML": "raw", "/Metadata": "raw"}
_USED_AS = {
    "/FontFile": "font",
    "/FontFile2": "font",
    "/FontFile3": "font",
    "/ToUnicode": "cmap",
    "/UseCMap": "cmap",
    "/DestOutputProfile": "icc",
    "/Metadata": "raw",
    "/JS": "raw",
    "/XFA": "raw",
}


def _stream_holds(stream: StreamObject, kind, *, search: Search, values_only: Search, holding) -> bool:
    """A content stream or a CMap by its string operands, the names it uses and its comments; a font program or an
    ICC profile by the text it carries (its names, notices, descriptions), for the values; any other stream by its
    bytes, for the values and rules (binary data for the values only). What cannot be parsed as its kind is
    searched as bytes."""
    data = stream.get_data()
    if kind in ("content", "cmap"):
        holds = content_holds(data, search, holding)
        if holds is not None:
            return holds
    elif kind in ("font", "icc"):
        texts = (pdfsyntax.font_strings if kind == "font" else pdfsyntax.icc_strings)(stream, data)
        if texts is not None:
            return any(values_only.holds(text) for text in texts)
        return values_only.holds_bytes(data)
    binary = any(key in stream for key in _BINARY)
    return (values_only if binary else search).holds_bytes(data) or (
        not binary and _operands_hold(_operands(data) or [], search, lambda name: False)
    )


def content_holds(data: bytes, search: Search, holding) -> bool | None:
    """Whether a content stream or a CMap, its decoded bytes, holds anything by what it can show or carry: its string
    operands (text shown, marked-content properties), the names it uses (``holding`` leaves out those the
    specification defines) and its comments, never its numbers (coordinates, MCIDs) or operators; None for bytes
    that do not parse as content. The first pass judges content streams by this too (redact.py's sweep), so that
    what one pass removes is what the other looks for."""
    operands = _operands(data)
    if operands is None:
        return None
    return _operands_hold(operands, search, holding) or any(map(search.holds_bytes, pdfsyntax.comments(data)))


def _string_holds(string: TextStringObject | ByteStringObject, search: Search) -> bool:
    raw = string.original_bytes if isinstance(string, TextStringObject) else bytes(string)
    return any(search.holds(text) for text in {str(string), *decodings(raw)})


def _operands(data: bytes) -> list | None:
    """A content stream's operands, operators and numbers left out; None for bytes that are not one."""
    stream = DecodedStreamObject()
    stream.set_data(data)
    try:
        operations = ContentStream(stream, None).operations
    except (PyPdfError, ValueError, KeyError, TypeError, IndexError):
        return None
    # an inline image's operand is {"settings": its dictionary, "data": its samples}: only the dictionary is syntax
    return [
        operand.get("settings", {})
        if isinstance(operand, dict) and not isinstance(operand, DictionaryObject)
        else operand
        for operands, _ in operations
        for operand in operands
    ]


def _operands_hold(operands: list, search: Search, holding) -> bool:
    """Whether a content stream's strings (text shown, marked-content properties) or the names it uses (tags,
    resource and property names, dictionary keys: ``holding`` leaves out those the specification defines) hold
    anything; never its numbers (coordinates, MCIDs) or operators."""
    stack = list(operands)
    while stack:
        operand = stack.pop()
        if isinstance(operand, (TextStringObject, ByteStringObject)) and _string_holds(operand, search):
            return True
        if isinstance(operand, NameObject) and holding(str(operand)):
            return True
        if isinstance(operand, dict):
            if any(holding(str(key)) for key in operand):
                return True
            stack.extend(operand.values())
        elif isinstance(operand, list):
            stack.extend(operand)
    return False


def _image_holds(image: StreamObject, search: Search, data: bytes) -> bool:
    """OCR of the image as pypdf decodes it, or, where pypdf cannot, as pdfium decodes it where a page draws it
    (what a reader sees); an image neither decodes is a finding (it cannot be checked)."""
    width, height = int(image.get("/Width", 0)), int(image.get("/Height", 0))
    if width * height > budgets.MAX_IMAGE_PIXELS:
        return True
    try:
        pixels = image.decode_as_image()
    except Exception:  # whatever pypdf or Pillow raise: pdfium's decoding, else unchecked, and an unchecked image fails
        pixels = None
    if pixels is None:
        pixels = ocr.pdfium_decoded(data, image._data)
    return pixels is None or search.holds(ocr.read(pixels).lines)
