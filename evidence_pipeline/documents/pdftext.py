"""Text in PDF content streams, glyph by glyph, for removing some of it (pikepdf parses and writes the streams).

A walk over a content stream yields every glyph a text-showing operator draws: its text (from the font's ToUnicode
map, else its single-byte encoding), its box in default user space, and where it sits in the operator's operands.
``rewrite`` then drops chosen glyphs from the operators and puts a kerning adjustment of their width in their place,
so the text that stays does not move. Form XObjects are walked with their matrix. A glyph whose font does not say
what it spells (no ToUnicode map nor a glyph name: a Type3 font's code outside its /Differences) is walked as
U+FFFD; a glyph name is read as poppler reads it (``glyph_text``); either way what it shows is read from the
rendered page too, where the redactor finds it and burns it in (redact.py). A composite
font's codes are split as its CMap says (Identity-H/V, one embedded, or one of Adobe's predefined CMaps as
poppler-data installs them); a CMap none of these is cannot even be split into glyphs: REDACTION_UNSUPPORTED_CONTENT.

Over 400 lines because the walk and the rewrite share the glyph positions the walk records; apart, each would
re-derive the other's arithmetic."""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pikepdf
from pypdf._codecs import adobe_glyphs
from reportlab.pdfbase import pdfmetrics

from evidence_pipeline.documents import budgets
from evidence_pipeline.documents.matching import name_str
from evidence_pipeline.errors import EvidenceError, ReasonCode

Matrix = tuple[float, float, float, float, float, float]
IDENTITY: Matrix = (1.0, 0.0, 0.0, 1.0, 0.0, 0.0)
SHOW = {"Tj", "TJ", "'", '"'}  # the text-showing operators
_LINE = {"Td", "TD", "T*", "Tm", "'", '"', "BT"}
_MAX_FORM_DEPTH = 8
_STANDARD_14 = frozenset(pdfmetrics.standardFonts)


def multiply(a: Matrix, b: Matrix) -> Matrix:
    """a then b, as PDF composes matrices (row vector times matrix)."""
    return (
        a[0] * b[0] + a[1] * b[2],
        a[0] * b[1] + a[1] * b[3],
        a[2] * b[0] + a[3] * b[2],
        a[2] * b[1] + a[3] * b[3],
        a[4] * b[0] + a[5] * b[2] + b[4],
        a[4] * b[1] + a[5] * b[3] + b[5],
    )


def _advanced(tm: Matrix, tx: float) -> Matrix:
    """The text matrix moved ``tx`` along its baseline: translate(tx, 0) then ``tm``, without a full product."""
    return (tm[0], tm[1], tm[2], tm[3], tm[4] + tx * tm[0], tm[5] + tx * tm[1])


def box(m: Matrix, x0: float, y0: float, x1: float, y1: float) -> tuple[float, float, float, float]:
    """The bounding box of a rectangle mapped through ``m``."""
    points = [(x * m[0] + y * m[2] + m[4], x * m[1] + y * m[3] + m[5]) for x in (x0, x1) for y in (y0, y1)]
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    return min(xs), min(ys), max(xs), max(ys)


@dataclass(slots=True)
class Glyph:
    text: str
    stream: int  # which walked stream (page content or a form XObject)
    op: int  # the instruction's index in that stream
    element: int  # the string's index among the operator's string operands
    start: int  # the code's byte range in that string
    end: int
    advance: float  # in thousandths of text space, for the kerning that replaces it
    tm: Matrix  # text matrix, CTM, size, rise and width: the box, computed only for glyphs that need one
    ctm: Matrix
    size: float
    rise: float
    width: float

    @property
    def box(self) -> tuple[float, float, float, float]:
        """Where the glyph is drawn, in default user space (descender to a little above the cap height)."""
        trm = multiply(self.tm, self.ctm)
        return box(trm, 0, self.rise - 0.22 * self.size, self.width, self.rise + 0.9 * self.size)


@dataclass
class _Font:
    codes: int  # bytes per code
    unicode: dict[int, str]
    widths: dict[int, float]
    default_width: float
    single_byte: bool
    cmap: _CMap | None = None  # a composite font's CMap other than Identity: codes of its codespace, CIDs by code

    def split(self, data: bytes) -> list[tuple[int, int, int]]:
        """(code, start, end) of each code in a string: as the font's CMap's codespace says, else fixed."""
        if self.cmap is not None:
            return self.cmap.split(data)
        step = self.codes
        return [(int.from_bytes(data[i : i + step], "big"), i, i + step) for i in range(0, len(data) - step + 1, step)]

    def width(self, code: int) -> float:
        """The code's width, in thousandths of text space: a composite font's widths are by CID."""
        cid = code if self.cmap is None else self.cmap.cids.get(code, 0)
        return self.widths.get(cid, self.default_width)

    def spell(self, code: int, data: bytes) -> str:
        """What the code (its bytes ``data``) spells: its ToUnicode map's or its encoding's; in a Unicode CMap, the
        character whose UTF-16 it is; else U+FFFD (read from the rendered page)."""
        if code in self.unicode:
            return self.unicode[code]
        return data.decode("utf-16-be", errors="replace") if self.cmap is not None and self.cmap.unicode else "\ufffd"


@dataclass
class Page:
    """What a walk found on one page: glyphs in drawing order, the text with line breaks, images drawn."""

    glyphs: list[Glyph] = field(default_factory=list)
    text: str = ""
    offsets: list[int] = field(default_factory=list)  # glyph index -> offset of its text in ``text``
    images: list[tuple[pikepdf.Object | pikepdf.PdfInlineImage, Matrix]] = field(default_factory=list)
    properties: list[tuple[int, int, pikepdf.Dictionary]] = field(default_factory=list)  # (stream, op, inline dict)
    streams: list[tuple[pikepdf.Page | pikepdf.Stream, list]] = field(default_factory=list)  # (owner, instructions)


def walk_page(page: pikepdf.Page) -> Page:
    return _walked(page, page.obj.get("/Resources", pikepdf.Dictionary()), IDENTITY)


def walk_form(form: pikepdf.Stream) -> Page:
    """A form XObject no page content draws (an annotation's appearance), in its own space."""
    matrix = tuple(float(v) for v in form.get("/Matrix", IDENTITY))
    return _walked(form, form.get("/Resources", pikepdf.Dictionary()), matrix)


def _walked(owner, resources, ctm: Matrix) -> Page:
    found = Page()
    pieces: list[str] = []
    try:
        _walk(found, pieces, owner, resources, ctm, depth=0, seen=set())
    except (pikepdf.PdfError, TypeError, ValueError, IndexError, KeyError, AttributeError) as error:
        # operands of the wrong type or number, broken resources: what cannot be read cannot be promised removed
        raise EvidenceError(
            ReasonCode.REDACTION_UNSUPPORTED_CONTENT, f"page content the redactor cannot read ({type(error).__name__})"
        ) from None
    found.text = "".join(pieces)
    starts = list(itertools.accumulate((len(piece) for piece in pieces), initial=0))
    found.offsets = [starts[piece] for piece in found.offsets]
    return found


def _walk(found: Page, pieces: list[str], owner, resources, ctm: Matrix, *, depth: int, seen: set) -> None:
    instructions = list(pikepdf.parse_content_stream(owner))
    if len(instructions) > budgets.MAX_OPERATORS:  # the gate refused these; a processor never trusts that alone
        raise budgets.exceeded(f"a content stream of more than {budgets.MAX_OPERATORS:,} operators")
    stream, shown = len(found.streams), 0
    found.streams.append((owner, instructions))
    fonts: dict[str, _Font] = {}
    stack: list[Matrix] = []
    tm = tlm = IDENTITY
    font, size, tc, tw, th, tl, rise = None, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0
    for index, (operands, operator) in enumerate(instructions):
        if isinstance(operands, pikepdf.PdfInlineImage) or str(operator) == "INLINE IMAGE":
            found.images.append((operands[0] if isinstance(operands, list) else operands, ctm))
            continue
        op = str(operator)
        if op in ("BDC", "DP") and len(operands) == 2 and isinstance(operands[1], pikepdf.Dictionary):
            found.properties.append((stream, index, operands[1]))  # inline /ActualText, /Alt, /E ...
        if op == "q":
            stack.append(ctm)
        elif op == "Q" and stack:
            ctm = stack.pop()
        elif op == "cm":
            ctm = multiply(tuple(float(v) for v in operands), ctm)
        elif op == "BT":
            tm = tlm = IDENTITY
        elif op == "Tf":
            font = _font(fonts, resources, str(operands[0]))
            size = float(operands[1])
        elif op == "Tc":
            tc = float(operands[0])
        elif op == "Tw":
            tw = float(operands[0])
        elif op == "Tz":
            th = float(operands[0]) / 100
        elif op == "TL":
            tl = float(operands[0])
        elif op == "Ts":
            rise = float(operands[0])
        elif op in ("Td", "TD"):
            if op == "TD":
                tl = -float(operands[1])
            tm = tlm = multiply((1, 0, 0, 1, float(operands[0]), float(operands[1])), tlm)
        elif op == "Tm":
            tm = tlm = tuple(float(v) for v in operands)
        elif op in ("T*", "'", '"'):
            tm = tlm = multiply((1, 0, 0, 1, 0, -tl), tlm)
        elif op == "Do":
            _draw(found, pieces, resources, str(operands[0]), ctm, depth=depth, seen=seen)
        if op in _LINE and pieces and pieces[-1] != "\n":
            pieces.append("\n")
        if op not in SHOW:
            continue
        if font is None:
            raise EvidenceError(ReasonCode.REDACTION_UNSUPPORTED_CONTENT, "text is shown without a font")
        if op == '"':
            tw, tc = float(operands[0]), float(operands[1])
        elements = operands[0] if op == "TJ" else [operands[-1]]
        strings = -1
        for element in elements:
            if not isinstance(element, pikepdf.String):
                tm = _advanced(tm, -float(element) / 1000 * size * th)
                continue
            strings += 1
            data = bytes(element)
            shown += len(data)
            if shown > budgets.MAX_TEXT_BYTES:  # one Glyph per code: bound them before making any
                raise budgets.exceeded(f"a content stream showing more than {budgets.MAX_TEXT_BYTES:,} bytes of text")
            for code, start, end in font.split(data):
                w0 = font.width(code) / 1000
                spacing = tc + (tw if font.single_byte and code == 32 else 0.0)
                advance = (w0 * size + spacing) * th
                found.offsets.append(len(pieces))  # a piece index until walk_page makes it an offset
                text = font.spell(code, data[start:end])
                pieces.append(text)
                found.glyphs.append(
                    Glyph(
                        text,
                        stream,
                        index,
                        strings,
                        start,
                        end,
                        advance * 1000 / (size * th) if size and th else 0.0,
                        tm,
                        ctm,
                        size,
                        rise,
                        advance,
                    )
                )
                tm = _advanced(tm, advance)


def _draw(found: Page, pieces: list[str], resources, name: str, ctm: Matrix, *, depth: int, seen: set) -> None:
    xobject = resources.get("/XObject", {}).get(name)
    if xobject is None:
        return
    if xobject.get("/Subtype") == "/Image":
        found.images.append((xobject, ctm))
        return
    if xobject.get("/Subtype") != "/Form" or xobject.objgen in seen:
        return
    if depth >= _MAX_FORM_DEPTH:
        raise EvidenceError(ReasonCode.REDACTION_UNSUPPORTED_CONTENT, "form XObjects nest too deeply")
    seen.add(xobject.objgen)  # a form drawn twice is rewritten once (its glyphs are boxed where first drawn)
    matrix = tuple(float(v) for v in xobject.get("/Matrix", IDENTITY))
    _walk(
        found, pieces, xobject, xobject.get("/Resources", resources), multiply(matrix, ctm), depth=depth + 1, seen=seen
    )


def _font(cache: dict[str, _Font], resources, name: str) -> _Font:
    if name not in cache:
        font = resources.get("/Font", {}).get(name)
        if font is None:
            raise EvidenceError(ReasonCode.REDACTION_UNSUPPORTED_CONTENT, "a text operator names a missing font")
        cache[name] = _decode_font(font)
    return cache[name]


def _decode_font(font) -> _Font:
    subtype = font.get("/Subtype")
    unicode = _to_unicode(font["/ToUnicode"].read_bytes()) if "/ToUnicode" in font else None
    if subtype == "/Type0":
        if not font.get("/DescendantFonts"):
            raise EvidenceError(ReasonCode.REDACTION_UNSUPPORTED_CONTENT, "a composite font without a descendant font")
        descendant = font["/DescendantFonts"][0]
        widths = _cid_widths(descendant.get("/W", []))
        encoding = font.get("/Encoding")
        if encoding in ("/Identity-H", "/Identity-V"):
            return _Font(2, unicode or {}, widths, float(descendant.get("/DW", 1000)), False)
        return _Font(2, unicode or {}, widths, float(descendant.get("/DW", 1000)), False, _composite_cmap(encoding))
    if unicode is None:
        unicode = _single_byte_encoding(font)
    widths: dict[int, float] = {}
    if "/Widths" in font:
        first = int(font.get("/FirstChar", 0))
        # In thousandths of text space; a Type3 font's are in its glyph space, which its /FontMatrix scales
        scale = float(font.get("/FontMatrix", [0.001])[0]) * 1000 if subtype == "/Type3" else 1.0
        widths = {first + i: float(w) * scale for i, w in enumerate(font["/Widths"])}
    else:
        base = str(font.get("/BaseFont", ""))[1:]
        if base in _STANDARD_14:
            widths = dict(enumerate(pdfmetrics.getFont(base).widths))
    return _Font(1, unicode, widths, 500.0, True)


def _single_byte_encoding(font) -> dict[int, str]:
    """A simple font's codes as its encoding names them: WinAnsi (cp1252) by default (a Type3 font has no default:
    its codes spell nothing), /Differences by what each glyph name spells (``differences``)."""
    unknown = font.get("/Subtype") == "/Type3"
    unicode = {code: "\ufffd" if unknown else bytes([code]).decode("cp1252", errors="replace") for code in range(256)}
    return unicode | differences(font)


def differences(font) -> dict[int, str]:
    """What each code a simple font's /Encoding /Differences names spells, as poppler reads the name where the font
    has no ToUnicode map (``glyph_text``); the second pass reads the page so too (redaction_check.py)."""
    encoding = font.get("/Encoding")
    named: dict[int, str] = {}
    if isinstance(encoding, pikepdf.Dictionary):
        code = 0
        for item in encoding.get("/Differences", []):
            if isinstance(item, pikepdf.Name):
                if 0 <= code < 256:
                    named[code] = glyph_text(name_str(item)[1:], code)
                code += 1
            else:
                code = int(item)
    return named


_UNI = re.compile(r"uni((?:[0-9A-F]{4})+)")
_U = re.compile(r"u([0-9A-F]{4,6})")


def glyph_text(name: str, code: int) -> str:
    """What a glyph name spells where the font has no ToUnicode map, as poppler (pdftotext) reads it: a one-character
    name as that character (/3 is "3"), else the Adobe glyph naming convention (a variant's suffix dropped, a
    ligature's components joined, each from the Adobe glyph list, uniXXXX or uXXXX[XX]), else the code's own
    character (poppler's pass-through: a Type3 font's /33 at code 33 reads "!"); nothing for .notdef (test_3362.pdf's
    narrow .notdef glyphs sit among a word's letters: poppler reads none, or, in a font with a name it does not
    know, passes its code through, there a whitespace control code, which pdftotext drops); U+FFFD for a code that
    is no printable character. What the glyph shows is read from the rendered page besides (redact.py)."""
    if len(name) == 1:  # "." and "_" too, which the split below would lose
        return name
    if name == ".notdef":
        return ""
    main = name.split(".", 1)[0]
    if main:
        parts = [_glyph_component(part) for part in main.split("_") if part]
        if parts and all(part is not None for part in parts):
            return "".join(parts)
    return chr(code) if chr(code).isprintable() else "\ufffd"


def _glyph_component(name: str) -> str | None:
    if (known := adobe_glyphs.get("/" + name)) is not None:
        return known
    if len(name) == 1:
        return name
    if match := _UNI.fullmatch(name):
        values = [int(match.group(1)[i : i + 4], 16) for i in range(0, len(match.group(1)), 4)]
        return "".join(chr(v) for v in values if not 0xD800 <= v <= 0xDFFF) or None
    if (match := _U.fullmatch(name)) and not 0xD800 <= (value := int(match.group(1), 16)) <= 0xDFFF:
        return chr(value) if value <= 0x10FFFF else None
    return None


_HEX = re.compile(rb"<([0-9A-Fa-f]+)>")
# An array's items are hex strings: it ends at the next bracket of either kind, so no candidate scans past it
_BFRANGE_LINE = re.compile(rb"<([0-9A-Fa-f]+)>\s*<([0-9A-Fa-f]+)>\s*(<[0-9A-Fa-f]+>|\[[^\[\]]*\])")


def _to_unicode(cmap: bytes) -> dict[int, str]:
    """The bfchar and bfrange entries of a ToUnicode CMap."""
    mapping: dict[int, str] = {}
    declared = 0  # every code a range declares counts, overlapping or not: the work is per declared code
    for block in blocks(cmap, b"beginbfchar", b"endbfchar"):
        codes = _HEX.findall(block)
        for src, dst in zip(codes[0::2], codes[1::2]):
            mapping[int(src, 16)] = _utf16(dst)
    for block in blocks(cmap, b"beginbfrange", b"endbfrange"):
        for line in _BFRANGE_LINE.findall(block):
            lo, hi, dst = int(line[0], 16), int(line[1], 16), line[2]
            if hi - lo > 0xFFFF:
                continue
            declared += max(0, hi - lo + 1)
            if declared > budgets.MAX_GLYPH_CODES:
                raise budgets.exceeded(f"a ToUnicode map of more than {budgets.MAX_GLYPH_CODES:,} codes")
            if dst.startswith(b"["):
                for offset, item in enumerate(_HEX.findall(dst)):
                    mapping[lo + offset] = _utf16(item)
            else:
                base = _utf16(dst[1:-1])
                for offset in range(hi - lo + 1):
                    mapping[lo + offset] = base[:-1] + chr(ord(base[-1]) + offset) if base else ""
    return mapping


def blocks(data: bytes, begin: bytes, end: bytes) -> Iterator[bytes]:
    """What lies between each ``begin`` and the first ``end`` after it, in one forward pass: a lazy regex
    (``begin(.*?)end``) scanned from every ``begin`` to the end of the data when no ``end`` follows, quadratic in a
    CMap of repeated ``begin``s (88 KB took 7.5 s, each doubling four times as long)."""
    at = 0
    while (start := data.find(begin, at)) != -1:
        stop = data.find(end, start + len(begin))
        if stop == -1:  # no end after this begin, so after no later one either
            return
        yield data[start + len(begin) : stop]
        at = stop + len(end)


# Adobe's predefined CMaps as poppler-data installs them (one directory per character collection)
PREDEFINED_CMAPS = Path("/usr/share/poppler/cMap")
_CMAP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,63}")
_UNICODE_CMAP = re.compile(r"Uni[A-Za-z]+-(UCS2|UTF16)(-H|-V)?")  # codes: UCS-2 / UTF-16BE of the character
_CIDRANGE = re.compile(rb"<([0-9A-Fa-f]{2,8})>\s*<([0-9A-Fa-f]{2,8})>\s*(\d+)")
_CIDCHAR = re.compile(rb"<([0-9A-Fa-f]{2,8})>\s*(\d+)")
_USECMAP = re.compile(rb"/([A-Za-z0-9-]+)\s+usecmap")


@dataclass
class _CMap:
    """A composite font's CMap: its codespace ranges (bytes of each code's lowest and highest, byte by byte) and
    the CID of each code; ``unicode`` when its codes are UTF-16 of the characters they spell."""

    codespace: list[tuple[bytes, bytes]]
    cids: dict[int, int]
    unicode: bool = False

    def split(self, data: bytes) -> list[tuple[int, int, int]]:
        """(code, start, end) of each code: the shortest codespace range the bytes fall in, byte by byte; bytes that
        none holds are one code of the shortest length (.notdef), as readers take them."""
        codes, at = [], 0
        shortest = min(len(low) for low, _ in self.codespace)
        while at < len(data):
            length = next(
                (
                    len(low)
                    for low, high in self.codespace
                    if at + len(low) <= len(data)
                    and all(lo <= byte <= hi for lo, byte, hi in zip(low, data[at : at + len(low)], high))
                ),
                shortest,
            )
            codes.append((int.from_bytes(data[at : at + length], "big"), at, min(at + length, len(data))))
            at += length
        return codes


def _composite_cmap(encoding) -> _CMap:
    """The CMap a composite font names (one of Adobe's predefined, as poppler-data installs them) or embeds."""
    if isinstance(encoding, pikepdf.Stream):
        used = encoding.get("/UseCMap")
        base = _composite_cmap(used) if used is not None else None
        return _cmap(encoding.read_bytes(), base)
    name = name_str(encoding)[1:] if isinstance(encoding, pikepdf.Name) else ""
    cmap = _predefined(name) if _CMAP_NAME.fullmatch(name) else None
    if cmap is None:
        raise EvidenceError(
            ReasonCode.REDACTION_UNSUPPORTED_CONTENT,
            "a composite font whose CMap is neither Identity, embedded nor one of the predefined CMaps installed "
            "(poppler-data)",
        )
    return cmap


@functools.cache
def _predefined(name: str, depth: int = 0) -> _CMap | None:
    """A predefined CMap by name (a name checked to be one), read from PREDEFINED_CMAPS; None if not installed."""
    found = sorted(PREDEFINED_CMAPS.glob(f"*/{name}"))
    if not found or depth > 2:
        return None
    data = found[0].read_bytes()
    used = _USECMAP.search(data)
    base = _predefined(used.group(1).decode(), depth + 1) if used else None
    cmap = _cmap(data, base)
    cmap.unicode = bool(_UNICODE_CMAP.fullmatch(name))
    return cmap


def _cmap(data: bytes, base: _CMap | None) -> _CMap:
    """A CMap's codespace ranges and CIDs (cidrange, cidchar), over those of the CMap it uses (``base``)."""
    codespace = [
        (bytes.fromhex(low.decode()), bytes.fromhex(high.decode()))
        for block in blocks(data, b"begincodespacerange", b"endcodespacerange")
        for low, high in re.findall(rb"<([0-9A-Fa-f]{2,8})>\s*<([0-9A-Fa-f]{2,8})>", block)
        if len(low) == len(high) and len(low) % 2 == 0
    ]
    cids = dict(base.cids) if base else {}
    declared = 0
    for block in blocks(data, b"begincidrange", b"endcidrange"):
        for low, high, cid in _CIDRANGE.findall(block):
            first, last = int(low, 16), int(high, 16)
            declared += max(0, last - first + 1)
            if declared > budgets.MAX_GLYPH_CODES:
                raise budgets.exceeded(f"a CMap of more than {budgets.MAX_GLYPH_CODES:,} codes")
            cids.update(zip(range(first, last + 1), itertools.count(int(cid))))
    for block in blocks(data, b"begincidchar", b"endcidchar"):
        cids.update((int(code, 16), int(cid)) for code, cid in _CIDCHAR.findall(block))
    codespace = codespace or (base.codespace if base else [])
    if not codespace:
        raise EvidenceError(ReasonCode.REDACTION_UNSUPPORTED_CONTENT, "a composite font's CMap has no codespace")
    return _CMap(sorted(codespace, key=lambda r: len(r[0])), cids)


def _utf16(hexdigits: bytes) -> str:
    return bytes.fromhex(hexdigits.decode()).decode("utf-16-be", errors="replace")


def _cid_widths(w) -> dict[int, float]:
    widths: dict[int, float] = {}
    items, i, codes = list(w), 0, 0
    while i + 1 < len(items):
        first = int(items[i])
        codes += len(items[i + 1]) if isinstance(items[i + 1], pikepdf.Array) else max(0, int(items[i + 1]) - first + 1)
        if codes > budgets.MAX_GLYPH_CODES:  # checked before the range is filled in
            raise budgets.exceeded(f"a font's widths declare more than {budgets.MAX_GLYPH_CODES:,} codes")
        if isinstance(items[i + 1], pikepdf.Array):
            for offset, width in enumerate(items[i + 1]):
                widths[first + offset] = float(width)
            i += 2
        else:
            for cid in range(first, int(items[i + 1]) + 1):
                widths[cid] = float(items[i + 2])
            i += 3
    return widths


def rewrite(
    found: Page,
    removed: set[int],
    scrubbed: frozenset[tuple[int, int]] = frozenset(),
    replaced: dict[tuple[int, int], list] | None = None,
) -> None:
    """Drop the glyphs whose indices are in ``removed`` from their streams, keeping the rest where it was, and the
    strings of the inline marked-content properties at the (stream, op) positions in ``scrubbed``; the instructions
    at the (stream, op) positions ``replaced`` names become the instructions it gives (none: dropped)."""
    replaced = replaced or {}
    by_op: dict[tuple[int, int], list[Glyph]] = {}
    for index in sorted(removed):
        glyph = found.glyphs[index]
        by_op.setdefault((glyph.stream, glyph.op), []).append(glyph)
    for stream, (owner, instructions) in enumerate(found.streams):
        touched = {op: glyphs for (s, op), glyphs in by_op.items() if s == stream}
        scrub = {op for s, op in scrubbed if s == stream}
        swap = {op: instead for (s, op), instead in replaced.items() if s == stream}
        if not touched and not scrub and not swap:
            continue
        rewritten = []
        for index, (operands, operator) in enumerate(instructions):
            if index in swap:
                rewritten.extend(swap[index])
            elif index in scrub:
                tag, properties = operands
                kept = {k: v for k, v in properties.items() if not isinstance(v, pikepdf.String)}
                rewritten.append(([tag, pikepdf.Dictionary(kept)], operator))
            elif index in touched:
                rewritten.extend(_without(operands, str(operator), touched[index]))
            else:
                rewritten.append((operands, operator))
        data = pikepdf.unparse_content_stream(rewritten)
        if isinstance(owner, pikepdf.Page):  # a page's content array becomes one stream
            owner.contents_coalesce()
            owner.obj.Contents.write(data)
        else:  # a form XObject
            owner.write(data)


def _without(operands, op: str, glyphs: list[Glyph]):
    """The instructions that draw an operator's text minus ``glyphs``: a TJ with their widths as kerning."""
    before = []
    if op == '"':
        before = [([operands[0]], pikepdf.Operator("Tw")), ([operands[1]], pikepdf.Operator("Tc"))]
    if op in ("'", '"'):
        before.append(([], pikepdf.Operator("T*")))
    elements = list(operands[0]) if op == "TJ" else [operands[-1]]
    gone: dict[int, list[Glyph]] = {}
    for glyph in glyphs:
        gone.setdefault(glyph.element, []).append(glyph)
    out, strings = [], -1
    for element in elements:
        if not isinstance(element, pikepdf.String):
            out.append(element)
            continue
        strings += 1
        data, kept, cursor = bytes(element), bytearray(), 0
        for glyph in sorted(gone.get(strings, []), key=lambda g: g.start):
            kept += data[cursor : glyph.start]
            if kept:
                out.append(pikepdf.String(bytes(kept)))
                kept = bytearray()
            out.append(-glyph.advance)
            cursor = glyph.end
        kept += data[cursor:]
        if kept:
            out.append(pikepdf.String(bytes(kept)))
    return [*before, ([pikepdf.Array(out)], pikepdf.Operator("TJ"))]
