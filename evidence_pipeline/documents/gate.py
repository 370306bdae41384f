"""The worker-side document gate: admission is distrusted, every input is checked again before any processor.

Re-sniff the bytes, refuse polyglots (a file another format's reader accepts too) and data after the last %%EOF,
parse strictly under tightened pypdf limits (and with pyHanko's reader, pdf_reader.open_pdf), refuse documents encrypted
with a password (one only an empty user password opens is read and marked: operations that write refuse it), malformed
ones, page-tree loops, decompression bombs and anything over the budgets of ``budgets.py`` (which the processors'
own walk keeps too), and find active content (JavaScript, Launch actions, embedded files, XFA). Each refusal has
its own terminal reason code. Every object of the file is loaded and every stream decoded, within budgets, so a
bomb hidden in an unreferenced object or an object stream is found here and not later by a processor.

Over 400 lines because every refusal is a step of the one walk over the file's objects (``_Scan``) and of the two
strict readers' opening: split apart, the gate would walk untrusted bytes more than once.
"""

from __future__ import annotations

import io
import itertools
import re
import zipfile
import zlib
from dataclasses import dataclass
from typing import BinaryIO

from PIL import Image, UnidentifiedImageError
from pyhanko.pdf_utils.misc import PdfError
from pypdf import Configuration, PdfReader, apply_configuration
from pypdf.errors import DependencyError, LimitReachedError, PyPdfError
from pypdf.generic import ArrayObject, DictionaryObject, IndirectObject, NameObject, StreamObject

from evidence_pipeline.documents import budgets
from evidence_pipeline.documents.budgets import MAX_DECODED_BYTES, MAX_OBJECTS, MAX_PAGES, exceeded
from evidence_pipeline.documents.pdftext import _to_unicode
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.monthly.validate import REPORT_LIMITS, read_at, xref_points_at_objects
from evidence_pipeline.signing.pdf_reader import open_pdf

# The report gate's limits, tightened for documents from outside and extended to every decoder pypdf has.
LIMITS = REPORT_LIMITS | dict(
    maximum_declared_stream_length=budgets.MAX_STREAM_BYTES,
    zlib_maximum_output_length=budgets.MAX_STREAM_BYTES,
    lzw_maximum_output_length=budgets.MAX_STREAM_BYTES,
    run_length_maximum_output_length=budgets.MAX_STREAM_BYTES,
    array_based_stream_maximum_output_length=budgets.MAX_STREAM_BYTES,
    brotli_maximum_output_length=budgets.MAX_STREAM_BYTES,
    jbig2_maximum_output_length=budgets.MAX_STREAM_BYTES,
    array_maximum_element_count=budgets.MAX_ARRAY_ENTRIES,
    dictionary_maximum_element_count=budgets.MAX_DICTIONARY_ENTRIES,
    page_tree_maximum_page_entries=MAX_PAGES * 16,
    form_fields_maximum_depth=16,
)
# Active content, in the order a refusal names it.
ACTIVE_CONTENT = (
    ReasonCode.DOCUMENT_JAVASCRIPT,
    ReasonCode.DOCUMENT_LAUNCH_ACTION,
    ReasonCode.DOCUMENT_EMBEDDED_FILES,
    ReasonCode.DOCUMENT_XFA,
)
# Every refusal the gate can answer: decisions about the input, recorded on the job as its outcome.
GATE_CODES = frozenset(
    {
        ReasonCode.DOCUMENT_NOT_PDF,
        ReasonCode.DOCUMENT_MALFORMED,
        ReasonCode.DOCUMENT_ENCRYPTED,
        ReasonCode.DOCUMENT_PERMISSIONS_ONLY,
        ReasonCode.DOCUMENT_PAGE_TREE_LOOP,
        ReasonCode.DOCUMENT_LIMIT_EXCEEDED,
        ReasonCode.DOCUMENT_POLYGLOT,
        ReasonCode.DOCUMENT_UNSUPPORTED,
        *ACTIVE_CONTENT,
    }
)
MAX_FONTS = 200
# What pypdf and pyHanko raise on a document they cannot parse (pyHanko's inflate raises zlib's own error)
PARSE_ERRORS = (
    PyPdfError,
    PdfError,
    zlib.error,
    ValueError,
    KeyError,
    TypeError,
    AttributeError,
    IndexError,
    AssertionError,
)
_WHITESPACE = b"\0\t\n\f\r "  # PDF's white-space characters: all that may follow the last %%EOF
# Where content sniffers look for markup anywhere (Internet Explorer's FindMimeFromData reads 256 bytes; WHATWG's
# algorithm only at the very start): wider, and rich-text annotations (XHTML, /RC) early in a small PDF are refused.
_HEADER_WINDOW = 256
# Tags a browser's sniffer takes for HTML; not <?xml, which an XMP packet placed early may legitimately begin with.
_MARKUP = re.compile(rb"<(?:!doctype|html|head|body|script|iframe|svg)", re.IGNORECASE)
# Stream data, where any bytes are legitimate; other formats' records anywhere else make the file a polyglot.
_STREAM_START = re.compile(rb">>\s*stream\r?\n")
_FOREIGN = {
    b"PK\x03\x04": "a ZIP local file header",
    b"PK\x01\x02": "a ZIP central directory",
    b"PK\x05\x06": "a ZIP end record",
    b"\x7fELF": "an ELF executable",
    b"PE\0\0": "a PE executable",
}
# Content-stream lexing for the budgets, linear in the bytes: strings and comments are not operators. Inline image
# data is left in (the spec keeps it under 4 KB; pdftext counts again after parsing). A string runs to its first
# unescaped ")" (a nested one included: more text counted, never less) or to the end, so it never fails: one that
# could fail (at a nested "(" or no ")") was scanned again from every escaped "(" inside it, quadratically (40 KB
# of "\(" took 64 s in the gate meant to bound the work).
_NOT_OPERATORS = re.compile(rb"\((?:[^\\)]|\\.)*(?:\)|\Z)|<[^<>]*>|%[^\r\n]*", re.DOTALL)
_OPERATOR = re.compile(rb"(?<![^\s\[\]<>(){}%])[A-Za-z'\"*][^\s()<>\[\]{}/%]*")
_READ_BY_PILLOW = {"/DCTDecode", "/JPXDecode"}  # encodings whose own header states the pixels Pillow will decode
# What a sender can do: every refusal names the defect or the limit, then one of these (or budgets.SPLIT)
RESAVE = "re-save it with a PDF writer (qpdf, or a viewer's Save As or Print to PDF) and send that copy"
DECRYPT = "send a copy without encryption (or with permission restrictions only: an empty open password)"
SEND_PDF = "send the PDF itself (other formats converted to PDF first)"
REMOVE_ACTIVE = "send a copy without it (Print to PDF drops scripts, attachments and XFA forms)"
REENCODE = "re-save its images with another compression (JPEG, CCITT or Flate; ocrmypdf or Acrobat convert JBIG2)"
SENDER_ACTIONS = (RESAVE, DECRYPT, SEND_PDF, REMOVE_ACTIVE, REENCODE, budgets.SPLIT)
# The parsers' words for a defect (their messages hold offsets and values from the file, never repeated), and ours
_DEFECTS = (
    ("Multiple definitions in dictionary", "a dictionary repeats a key (readers disagree on which value holds)"),
    ("object stream", "an object stream does not hold the objects it lists"),
    ("Circular reference in form tree", "the form's field tree refers back to itself"),
    ("encryption dictionary", "the encryption dictionary is malformed"),
    ("/Encrypt", "the encryption dictionary is malformed"),
    ("endstream", "a stream does not end where its length says"),
    ("decompressing", "a stream's compressed data is damaged"),
    ("padding", "an encrypted stream's data is damaged"),
    ("block length", "an encrypted stream's data is damaged"),
    ("EOF marker", "no %%EOF marker (truncated?)"),
    ("header", "the PDF header is malformed"),
    ("xref", "the cross-reference table (the index of the file's objects) is broken"),
    ("object ID", "the cross-reference table (the index of the file's objects) is broken"),
    ("find object", "the cross-reference table (the index of the file's objects) is broken"),
    ("/Prev", "the cross-reference table (the index of the file's objects) is broken"),
    ("indirect object reference", "an object reference is malformed"),
)


@dataclass(frozen=True)
class GatedDocument:
    """What the gate learned about a document that passed it."""

    pages: int
    pdf_version: str
    producer: str | None
    signatures_present: bool
    fonts: tuple[str, ...]
    active_content: tuple[str, ...]  # reason codes of the active content found (when the policy flags it)
    # encrypted with an empty user password (permissions only): read-only operations read it, writing ones refuse
    permissions_only: bool = False


def gate(file: BinaryIO, active_content: str = "refuse") -> GatedDocument:
    """Check one document; ``active_content`` is ``refuse`` (its reason code) or ``flag`` (listed in the result)."""
    size = file.seek(0, io.SEEK_END)
    if read_at(file, 0, 5) != b"%PDF-":  # no allowance for bytes before the header: that is where polyglots begin
        raise EvidenceError(ReasonCode.DOCUMENT_NOT_PDF, f"the bytes do not begin with a PDF header; {SEND_PDF}")
    _refuse_polyglots(read_at(file, 0, size))
    try:
        with apply_configuration(**LIMITS):
            return _inspect(file, active_content)
    except LimitReachedError as error:
        raise exceeded(*_parser_limit(str(error))) from None
    except DependencyError as error:  # what is not decoded cannot be checked
        # A stated choice: JBIG2 is not decoded (pypdf would run the jbig2dec binary, which the image does not ship)
        what = (
            "a JBIG2 image (the service does not decode JBIG2)"
            if "jbig2" in str(error).lower()
            else ("an encoding the service has no decoder for")
        )
        raise EvidenceError(ReasonCode.DOCUMENT_UNSUPPORTED, f"a stream uses {what}; {REENCODE}") from None
    except RecursionError:
        raise exceeded("objects nested too deeply for the parser", RESAVE) from None
    except PARSE_ERRORS as error:
        raise malformed(error) from None


def malformed(error: Exception, reader: str = "") -> EvidenceError:
    """DOCUMENT_MALFORMED for what a parser raised: the defect in our words (by the parser's), and what to do."""
    said = str(error)
    defect = next(
        (ours for words, ours in _DEFECTS if words in said),
        "the document does not follow PDF's syntax where a strict reader requires it",
    )
    return EvidenceError(ReasonCode.DOCUMENT_MALFORMED, f"{defect} ({reader}{type(error).__name__}); {RESAVE}")


_PYPDF = Configuration().with_overwrites(**LIMITS)  # every pypdf limit in effect in the gate, ours or its own
# pypdf's refusals by what its message says (its own words hold values from the file, never repeated): the limit,
# and what to do (a defect that only looks like size is re-saved); the first whose words the message holds
_PARSER_LIMITS = (
    ("array element count", f"an array of more than {budgets.MAX_ARRAY_ENTRIES:,} entries", budgets.SPLIT),
    ("dictionary entries", f"a dictionary of more than {budgets.MAX_DICTIONARY_ENTRIES:,} entries", budgets.SPLIT),
    (
        "Recovery limit",
        f"a damaged compressed stream of more than {_PYPDF.zlib_maximum_recovery_input_length:,} bytes to recover",
        RESAVE,
    ),
    ("decompressing", f"a stream decoding to more than {budgets.MAX_STREAM_BYTES:,} bytes", budgets.SPLIT),
    ("filter count", f"a stream with more than {_PYPDF.stream_filters_maximum_length} filters", RESAVE),
    (
        "decoding work",
        f"a stream or XFA form taking more than {_PYPDF.stream_decoding_work_maximum_length:,} bytes of decoding work",
        budgets.SPLIT,
    ),
    ("page tree depth", f"a page tree deeper than {_PYPDF.page_tree_maximum_depth} levels", RESAVE),
    ("page tree entry", f"a page tree of more than {_PYPDF.page_tree_maximum_entries:,} nodes", RESAVE),
    ("page tree page entry", f"a page tree of more than {_PYPDF.page_tree_maximum_page_entries:,} pages", RESAVE),
    ("outline depth", f"an outline deeper than {_PYPDF.outline_maximum_depth} levels", RESAVE),
    ("outline entry", f"an outline of more than {_PYPDF.outline_maximum_entries:,} entries", RESAVE),
    ("form field depth", f"form fields nested deeper than {_PYPDF.form_fields_maximum_depth} levels", RESAVE),
    ("number of fields", f"more than {_PYPDF.form_fields_maximum_entries:,} form fields", budgets.SPLIT),
    (
        "named destination depth",
        f"a tree of named destinations deeper than {_PYPDF.named_destinations_maximum_depth} levels",
        RESAVE,
    ),
    (
        "named destination entry",
        f"more than {_PYPDF.named_destinations_maximum_entries:,} named destinations",
        budgets.SPLIT,
    ),
    ("XMP metadata exceeds", f"XMP metadata of more than {_PYPDF.xmp_maximum_element_count:,} elements", RESAVE),
    ("XMP stream size", f"XMP metadata of more than {_PYPDF.xmp_maximum_input_length:,} bytes", RESAVE),
    ("XRef", "a cross-reference stream with more entries than the document has objects", RESAVE),
    ("Root object recovery", "a document catalog that cannot be found without searching the whole file", RESAVE),
    ("CID width", "a composite font's widths (/W) wider than the parser's limit", RESAVE),
    ("character widths", "a font with more character widths than the parser's limit", RESAVE),
    ("cycle in /Pages", "a page tree that refers back to itself", RESAVE),
    ("cycle in /Parent", "a form field whose parents refer back to it", RESAVE),
    ("Declared size", f"a stream declaring more than {budgets.MAX_STREAM_BYTES:,} bytes", budgets.SPLIT),
    ("Row length", "a predictor row longer than the parser's limit (pypdf's flate_maximum_row_length)", RESAVE),
    ("columns", "a predictor with more columns than the parser's limit (pypdf's flate_maximum_columns)", RESAVE),
    ("Color value", "a predictor with more than 16 colour components", RESAVE),
    ("loop", "an object that refers to itself", RESAVE),
    ("cyclic", "an outline or article that loops", RESAVE),
    ("/N", "an object stream claiming more objects than the document names", RESAVE),
)


def _parser_limit(message: str) -> tuple[str, str]:
    for words, limit, action in _PARSER_LIMITS:
        if words in message:
            return limit, action
    return "a limit of the PDF parser that this service does not name yet (docs: Document limits)", budgets.SPLIT


def _refuse_polyglots(data: bytes) -> None:
    """A PDF that another format's reader also accepts is refused: whatever the service signs must be one PDF."""
    end = data.rfind(b"%%EOF")
    if end < 0:
        raise EvidenceError(ReasonCode.DOCUMENT_MALFORMED, f"no %%EOF marker (truncated?); {RESAVE}")
    if data[end + 5 :].strip(_WHITESPACE):
        raise EvidenceError(ReasonCode.DOCUMENT_POLYGLOT, f"data follows the last %%EOF marker; {RESAVE}")
    if _MARKUP.search(data, 0, _HEADER_WINDOW):
        raise EvidenceError(ReasonCode.DOCUMENT_POLYGLOT, f"HTML markup near the start of the file; {RESAVE}")
    outside = _outside_streams(data)
    for signature, what in _FOREIGN.items():
        if signature in outside:
            raise EvidenceError(ReasonCode.DOCUMENT_POLYGLOT, f"{what} outside the PDF's streams; {RESAVE}")
    if zipfile.is_zipfile(io.BytesIO(data)):  # a ZIP reader finds its end record in the last 64 KiB, streams or not
        raise EvidenceError(ReasonCode.DOCUMENT_POLYGLOT, f"the file also opens as a ZIP archive; {RESAVE}")


def _outside_streams(data: bytes) -> bytes:
    """The file without its streams' data, each ending at the first endstream after it (one pass: a regex with a
    lazy ``.*?endstream`` is quadratic on many stream starts without an end)."""
    pieces, at = [], 0
    while (start := _STREAM_START.search(data, at)) is not None:
        pieces.append(data[at : start.end()])
        end = data.find(b"endstream", start.end())
        at = start.end() if end < 0 else end  # a stream that never ends is no stream: its bytes are looked at
        if end < 0:
            break
    pieces.append(data[at:])
    return b"".join(pieces)


def _inspect(file: BinaryIO, active_content: str) -> GatedDocument:
    try:
        reader = PdfReader(file, strict=True)
    except NotImplementedError:  # pypdf opens only the standard (password) security handler
        raise EvidenceError(
            ReasonCode.DOCUMENT_ENCRYPTED,
            "encrypted documents are not accepted (the document is "
            f"encrypted for certificates, not with a password); {DECRYPT}",
        ) from None
    # Only an empty user password is tried: what it opens, any reader opens silently (restrictions on printing,
    # copying or changing are the author's wish, which only writing operations must respect)
    if reader.is_encrypted and not reader.decrypt(""):
        raise EvidenceError(
            ReasonCode.DOCUMENT_ENCRYPTED, f"documents encrypted with a password are not accepted; {DECRYPT}"
        )
    if not xref_points_at_objects(reader, file):
        raise EvidenceError(
            ReasonCode.DOCUMENT_MALFORMED, f"the cross-reference table does not point at its objects; {RESAVE}"
        )
    _read_by_pyhanko(file, reader.is_encrypted)
    root = reader.trailer["/Root"]
    pages = _count_pages(root["/Pages"])
    _check_trees(root)  # before anything walks them: a processor following a loop never ends
    scan = _Scan({number for entries in reader.xref.values() for number in entries} | set(reader.xref_objStm))
    for obj in _every_object(reader):
        scan.visit(obj)
    for page in pages:  # decoded again, but the scan has bounded what all streams decode to
        _check_contents(page)
    found = tuple(code for code in ACTIVE_CONTENT if code in scan.active)
    if found and active_content == "refuse":
        raise EvidenceError(found[0], f"the document carries active content: {', '.join(found)}; {REMOVE_ACTIVE}")
    producer = (reader.metadata or {}).get("/Producer")
    return GatedDocument(
        pages=len(pages),
        pdf_version=reader.pdf_header.removeprefix("%PDF-")[:8],
        producer=str(producer)[:200] if producer is not None else None,
        signatures_present=scan.signatures,
        fonts=tuple(sorted(scan.fonts))[:MAX_FONTS],
        active_content=found,
        permissions_only=reader.is_encrypted,
    )


def _read_by_pyhanko(file: BinaryIO, encrypted: bool) -> None:
    """The signature check, contract review and the approval signature read the file with pyHanko's reader
    (``open_pdf``): what it cannot read is refused here, so a document the gate accepts is one every operation reads."""
    try:
        reader = open_pdf(file)
        if encrypted:
            reader.decrypt("")
        reader.embedded_signatures
    except PdfError as error:
        raise malformed(error, "pyHanko: ") from None


def _count_pages(root) -> list[DictionaryObject]:
    """Walk the page tree by hand: a node met twice is a loop (pypdf would recurse or count pages twice)."""
    seen: set[int] = set()
    pages, stack = [], [root]
    while stack:
        node = stack.pop()
        ref = node if isinstance(node, IndirectObject) else getattr(node, "indirect_reference", None)
        key = id(node) if ref is None else ref.idnum
        if key in seen:
            raise EvidenceError(ReasonCode.DOCUMENT_PAGE_TREE_LOOP, f"the page tree contains a loop; {RESAVE}")
        seen.add(key)
        node = node.get_object()
        if not isinstance(node, DictionaryObject):
            raise EvidenceError(ReasonCode.DOCUMENT_MALFORMED, f"a page tree node is not a dictionary; {RESAVE}")
        if node.get("/Type") == "/Page":
            pages.append(node)
            if len(pages) > MAX_PAGES:
                raise exceeded(f"more than {MAX_PAGES:,} pages")
            annotations = node["/Annots"] if "/Annots" in node else ()
            if len(annotations) > budgets.MAX_ANNOTATIONS:
                raise exceeded(f"a page has more than {budgets.MAX_ANNOTATIONS:,} annotations")
            continue
        if "/Count" in node and not 0 <= int(node["/Count"]) <= MAX_PAGES:  # readers size work by what it claims
            raise exceeded(f"a page tree node claims more than {MAX_PAGES:,} pages", RESAVE)
        kids = node.get("/Kids")
        if not isinstance(kids, ArrayObject):
            raise EvidenceError(ReasonCode.DOCUMENT_MALFORMED, f"a page tree node has no /Kids array; {RESAVE}")
        stack.extend(kids)
    if not pages:
        raise EvidenceError(ReasonCode.DOCUMENT_MALFORMED, f"the document has no pages; {RESAVE}")
    return pages


def _check_contents(page: DictionaryObject) -> None:
    """A page's content streams, within the content budgets as one stream (processors walk them as one)."""
    contents = page["/Contents"] if "/Contents" in page else ArrayObject()
    parts = contents if isinstance(contents, ArrayObject) else [contents]
    _check_content(b"\n".join(part.get_object().get_data() for part in parts))


def _check_box(box, unit) -> None:
    """A page box no side of which is longer than PDF's own limit, scaled by the page's /UserUnit."""
    scale = float(unit) if unit is not None else 1.0
    x0, y0, x1, y1 = (float(value.get_object()) for value in box)
    if max(abs(x1 - x0), abs(y1 - y0)) * scale > budgets.MAX_PAGE_UNITS:
        raise exceeded(f"a page side longer than {budgets.MAX_PAGE_UNITS:,} units")


def _check_content(data: bytes) -> None:
    """Counted without parsing (that is the expensive step the budget protects): text bytes, operators."""
    stripped = _NOT_OPERATORS.sub(b" ", data)
    if len(data) - len(stripped) > budgets.MAX_TEXT_BYTES:  # strings as written (and comments): an upper bound
        raise exceeded(f"a content stream showing more than {budgets.MAX_TEXT_BYTES:,} bytes of text")
    operators = _OPERATOR.finditer(stripped)
    if next(itertools.islice(operators, budgets.MAX_OPERATORS, None), None) is not None:  # stops at one too many
        raise exceeded(f"a content stream of more than {budgets.MAX_OPERATORS:,} operators")


def _check_glyph_codes(font: DictionaryObject) -> None:
    """The codes a font's widths (/W of a composite font's descendant) and ToUnicode map declare, within budget."""
    for descendant in font.get("/DescendantFonts", ArrayObject()).get_object():
        items, codes, i = list(descendant.get_object().get("/W", ArrayObject()).get_object()), 0, 0
        while i + 1 < len(items):
            if isinstance(items[i + 1].get_object(), ArrayObject):  # c [w1 w2 ...]
                codes, i = codes + len(items[i + 1].get_object()), i + 2
            else:  # c_first c_last w
                first, last = int(items[i].get_object()), int(items[i + 1].get_object())
                codes, i = codes + max(0, last - first + 1), i + 3
            if codes > budgets.MAX_GLYPH_CODES:
                raise exceeded(f"a font's widths declare more than {budgets.MAX_GLYPH_CODES:,} codes")
    cmap = font["/ToUnicode"] if "/ToUnicode" in font else None
    if isinstance(cmap, StreamObject):
        try:
            _to_unicode(cmap.get_data())  # the processors' own reader, which keeps the budget
        except ValueError:  # a map it cannot read is the processor's to refuse; only the budget is the gate's
            pass


def _check_trees(root: DictionaryObject) -> None:
    """Name and number trees and the outline: no deeper than the budget, and no node met twice (a loop)."""
    names = root.get("/Names")
    trees = list(names.get_object().values()) if names is not None else []
    if "/PageLabels" in root:
        trees.append(root.raw_get("/PageLabels"))
    for tree in trees:
        _walk_tree(tree, lambda node: [(kid, 1) for kid in node.get("/Kids", ArrayObject()).get_object()])
    if "/Outlines" in root:  # an item's children are one level down, its /Next sibling on the same level
        _walk_tree(
            root.raw_get("/Outlines"),
            lambda node: [(node.raw_get(key), step) for key, step in (("/First", 1), ("/Next", 0)) if key in node],
        )


def _walk_tree(top, children) -> None:
    seen: set[int] = set()
    stack = [(top, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, IndirectObject):  # only references can make a loop
            if node.idnum in seen:
                raise exceeded("a name tree, number tree or outline refers back to itself", RESAVE)
            seen.add(node.idnum)
        if depth > budgets.MAX_TREE_DEPTH:
            raise exceeded(f"a name tree, number tree or outline deeper than {budgets.MAX_TREE_DEPTH} levels", RESAVE)
        node = node.get_object()
        if isinstance(node, DictionaryObject):
            stack.extend((child, depth + step) for child, step in children(node))


def _every_object(reader: PdfReader):
    """Every object the cross-reference names (unreferenced ones too), loaded within the object budget."""
    numbers = {(number, generation) for generation, entries in reader.xref.items() for number in entries}
    numbers |= {(number, 0) for number in reader.xref_objStm}
    if len(numbers) > MAX_OBJECTS:
        raise exceeded(f"more than {MAX_OBJECTS:,} objects")
    for number, generation in sorted(numbers):
        yield IndirectObject(number, generation, reader).get_object()


class _Scan:
    """Looks at every dictionary once: active content, signatures, fonts; decodes streams within a total budget."""

    def __init__(self, defined: set[int]):
        self.defined = defined  # the object numbers the cross-reference names
        self.active: set[str] = set()
        self.fonts: set[str] = set()
        self.signatures = False
        self.decoded = 0

    def visit(self, obj) -> None:
        if isinstance(obj, StreamObject):
            if obj.get("/Subtype") == "/Image":
                _check_pixels(obj["/Width"], obj["/Height"])  # declared: before anything decodes it
            data = obj.get_data()
            self.decoded += len(data)
            if self.decoded > MAX_DECODED_BYTES:
                raise exceeded(f"streams decoding to more than {MAX_DECODED_BYTES:,} bytes")
            if obj.get("/Subtype") == "/Form":
                _check_content(data)
            elif obj.get("/Subtype") == "/Image" and _last_filter(obj) in _READ_BY_PILLOW:
                _check_encoded_pixels(data)
        if isinstance(obj, DictionaryObject):
            self._dictionary(obj)
        if isinstance(obj, (DictionaryObject, ArrayObject)):  # direct children; indirect ones are visited on their own
            for child in obj.values() if isinstance(obj, DictionaryObject) else obj:
                if not isinstance(child, IndirectObject):
                    self.visit(child)
                elif child.idnum not in self.defined:  # pypdf's writer fails on it: split and merge would
                    raise EvidenceError(
                        ReasonCode.DOCUMENT_MALFORMED, f"the document refers to an object it lacks; {RESAVE}"
                    )

    def _dictionary(self, d: DictionaryObject) -> None:
        action = d.get("/S")
        if action == "/JavaScript" or "/JS" in d:
            self.active.add(ReasonCode.DOCUMENT_JAVASCRIPT)
        if action == "/Launch":
            self.active.add(ReasonCode.DOCUMENT_LAUNCH_ACTION)
        if d.get("/Type") == "/EmbeddedFile" or "/EmbeddedFiles" in d or d.get("/Subtype") == "/FileAttachment":
            self.active.add(ReasonCode.DOCUMENT_EMBEDDED_FILES)
        if "/XFA" in d:
            self.active.add(ReasonCode.DOCUMENT_XFA)
        if d.get("/Type") == "/Sig" or d.get("/FT") == "/Sig":
            self.signatures = True
        if d.get("/Type") == "/Font" and isinstance(d.get("/BaseFont"), NameObject):
            self.fonts.add(str(d["/BaseFont"])[1:129])
        if d.get("/Type") == "/Font":
            _check_glyph_codes(d)
        if "/MediaBox" in d:  # on a page or inherited from a page tree node
            _check_box(d["/MediaBox"], d["/UserUnit"] if "/UserUnit" in d else None)


def _check_pixels(width, height) -> None:
    if int(width) * int(height) > budgets.MAX_IMAGE_PIXELS:
        raise exceeded(f"an image of more than {budgets.MAX_IMAGE_PIXELS:,} pixels")


def _last_filter(stream: StreamObject) -> str | None:
    filters = stream.get("/Filter")
    filters = filters.get_object() if filters is not None else None
    return str(filters[-1]) if isinstance(filters, ArrayObject) and filters else filters


def _check_encoded_pixels(data: bytes) -> None:
    """The pixels a JPEG or JPEG 2000 header states (the size Pillow decodes to, whatever /Width says)."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            _check_pixels(*image.size)
    except Image.DecompressionBombError:
        raise exceeded(f"an image of more than {budgets.MAX_IMAGE_PIXELS:,} pixels") from None
    except UnidentifiedImageError:
        raise EvidenceError(ReasonCode.DOCUMENT_UNSUPPORTED, f"an image's data cannot be decoded; {REENCODE}") from None
