"""The worker-side document gate: admission is distrusted, every input is checked again before any processor.

Re-sniff the bytes, parse strictly under tightened pypdf limits, refuse encrypted documents (the empty user password
included), malformed ones, page-tree loops and decompression bombs, and find active content (JavaScript, Launch
actions, embedded files, XFA). Each refusal has its own terminal reason code. Every object of the file is loaded and
every stream decoded, within budgets, so a bomb hidden in an unreferenced object or an object stream is found here
and not later by a processor.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import BinaryIO

from pypdf import PdfReader, apply_configuration
from pypdf.errors import LimitReachedError, PyPdfError
from pypdf.generic import ArrayObject, DictionaryObject, IndirectObject, NameObject, StreamObject

from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.validate import _LIMITS as _REPORT_LIMITS
from evidence_pipeline.validate import _read_at, _xref_points_at_objects

MAX_PAGES = 1_000
MAX_OBJECTS = 50_000
MAX_DECODED_BYTES = 64 * 1024 * 1024  # all streams of the document together, decoded
# The report gate's limits, tightened for documents from outside and extended to every decoder pypdf has.
LIMITS = _REPORT_LIMITS | dict(
    maximum_declared_stream_length=16_000_000,
    zlib_maximum_output_length=16_000_000,
    lzw_maximum_output_length=16_000_000,
    run_length_maximum_output_length=16_000_000,
    array_based_stream_maximum_output_length=16_000_000,
    brotli_maximum_output_length=16_000_000,
    jbig2_maximum_output_length=16_000_000,
    dictionary_maximum_element_count=5_000,
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
        ReasonCode.DOCUMENT_PAGE_TREE_LOOP,
        ReasonCode.DOCUMENT_LIMIT_EXCEEDED,
        *ACTIVE_CONTENT,
    }
)
MAX_FONTS = 200
_PARSE_ERRORS = (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError, AssertionError)


@dataclass(frozen=True)
class GatedDocument:
    """What the gate learned about a document that passed it."""

    pages: int
    pdf_version: str
    producer: str | None
    signatures_present: bool
    fonts: tuple[str, ...]
    active_content: tuple[str, ...]  # reason codes of the active content found (when the policy flags it)


def gate(file: BinaryIO, active_content: str = "refuse") -> GatedDocument:
    """Check one document; ``active_content`` is ``refuse`` (its reason code) or ``flag`` (listed in the result)."""
    size = file.seek(0, io.SEEK_END)
    if _read_at(file, 0, 5) != b"%PDF-":
        raise EvidenceError(ReasonCode.DOCUMENT_NOT_PDF, "the bytes do not begin with a PDF header")
    if b"%%EOF" not in _read_at(file, max(0, size - 1024), 1024):
        raise EvidenceError(ReasonCode.DOCUMENT_MALFORMED, "no %%EOF marker at the end (truncated?)")
    try:
        with apply_configuration(**LIMITS):
            return _inspect(file, active_content)
    except LimitReachedError:
        raise EvidenceError(ReasonCode.DOCUMENT_LIMIT_EXCEEDED, "the document exceeds the parser's limits") from None
    except RecursionError:
        raise EvidenceError(ReasonCode.DOCUMENT_LIMIT_EXCEEDED, "the document nests objects too deeply") from None
    except _PARSE_ERRORS as error:
        raise EvidenceError(
            ReasonCode.DOCUMENT_MALFORMED, f"the document does not parse strictly ({type(error).__name__})"
        ) from None


def _inspect(file: BinaryIO, active_content: str) -> GatedDocument:
    reader = PdfReader(file, strict=True)
    if reader.is_encrypted:  # checked before anything is decrypted: an empty user password opens silently
        raise EvidenceError(ReasonCode.DOCUMENT_ENCRYPTED, "encrypted documents are not accepted")
    if not _xref_points_at_objects(reader, file):
        raise EvidenceError(ReasonCode.DOCUMENT_MALFORMED, "the cross-reference table does not point at its objects")
    pages = _count_pages(reader.trailer["/Root"]["/Pages"])
    scan = _Scan()
    for obj in _every_object(reader):
        scan.visit(obj)
    found = tuple(code for code in ACTIVE_CONTENT if code in scan.active)
    if found and active_content == "refuse":
        raise EvidenceError(found[0], "the document carries active content: " + ", ".join(found))
    producer = (reader.metadata or {}).get("/Producer")
    return GatedDocument(
        pages=pages,
        pdf_version=reader.pdf_header.removeprefix("%PDF-")[:8],
        producer=str(producer)[:200] if producer is not None else None,
        signatures_present=scan.signatures,
        fonts=tuple(sorted(scan.fonts))[:MAX_FONTS],
        active_content=found,
    )


def _count_pages(root) -> int:
    """Walk the page tree by hand: a node met twice is a loop (pypdf would recurse or count pages twice)."""
    seen: set[int] = set()
    pages, stack = 0, [root]
    while stack:
        node = stack.pop()
        ref = node if isinstance(node, IndirectObject) else getattr(node, "indirect_reference", None)
        key = id(node) if ref is None else ref.idnum
        if key in seen:
            raise EvidenceError(ReasonCode.DOCUMENT_PAGE_TREE_LOOP, "the page tree contains a loop")
        seen.add(key)
        node = node.get_object()
        if not isinstance(node, DictionaryObject):
            raise EvidenceError(ReasonCode.DOCUMENT_MALFORMED, "a page tree node is not a dictionary")
        if node.get("/Type") == "/Page":
            pages += 1
            if pages > MAX_PAGES:
                raise EvidenceError(ReasonCode.DOCUMENT_LIMIT_EXCEEDED, f"more than {MAX_PAGES} pages")
            continue
        kids = node.get("/Kids")
        if not isinstance(kids, ArrayObject):
            raise EvidenceError(ReasonCode.DOCUMENT_MALFORMED, "a page tree node has no /Kids array")
        stack.extend(kids)
    if pages == 0:
        raise EvidenceError(ReasonCode.DOCUMENT_MALFORMED, "the document has no pages")
    return pages


def _every_object(reader: PdfReader):
    """Every object the cross-reference names (unreferenced ones too), loaded within the object budget."""
    numbers = {(number, generation) for generation, entries in reader.xref.items() for number in entries}
    numbers |= {(number, 0) for number in reader.xref_objStm}
    if len(numbers) > MAX_OBJECTS:
        raise EvidenceError(ReasonCode.DOCUMENT_LIMIT_EXCEEDED, f"more than {MAX_OBJECTS} objects")
    for number, generation in sorted(numbers):
        yield IndirectObject(number, generation, reader).get_object()


class _Scan:
    """Looks at every dictionary once: active content, signatures, fonts; decodes streams within a total budget."""

    def __init__(self):
        self.active: set[str] = set()
        self.fonts: set[str] = set()
        self.signatures = False
        self.decoded = 0

    def visit(self, obj) -> None:
        if isinstance(obj, StreamObject):
            self.decoded += len(obj.get_data())
            if self.decoded > MAX_DECODED_BYTES:
                raise EvidenceError(
                    ReasonCode.DOCUMENT_LIMIT_EXCEEDED, "the document's streams decode to too many bytes"
                )
        if isinstance(obj, DictionaryObject):
            self._dictionary(obj)
        if isinstance(obj, (DictionaryObject, ArrayObject)):  # direct children; indirect ones are visited on their own
            for child in obj.values() if isinstance(obj, DictionaryObject) else obj:
                if not isinstance(child, IndirectObject):
                    self.visit(child)

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
