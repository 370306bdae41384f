"""The PDF gate: our own reports pass it before anything is signed (and uploads will, later).

Parsing is a shape gate, not an integrity check, so it is one of several: magic and trailer bytes, a strict parse
under tightened pypdf limits, no encryption (an empty user password would otherwise open silently), page-count
bounds, metadata that names the pinned tenant/period/revision, and the report's totals in the extracted text.

The text is extracted by pdfium (C), ~15x cheaper than pypdf's extractor (Python), which cost as much as rendering.
pypdf still decodes every stream first, under the same limits, so a stream that would exceed them is refused before
pdfium decodes it; and both parsers must count the same pages.
"""

from __future__ import annotations

import io
import re
import threading
from typing import BinaryIO

import pypdfium2
from pypdf import PdfReader, apply_configuration
from pypdf.errors import LimitReachedError, PyPdfError
from pypdf.generic import IndirectObject, StreamObject

from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.models import SourceRevision
from evidence_pipeline.monthly.render import report_subject
from evidence_pipeline.store import readable

MAX_PAGES = 2_000
MAX_BYTES = 200 * 1024 * 1024
REPORT_LIMITS = dict(
    maximum_declared_stream_length=20_000_000,
    zlib_maximum_output_length=20_000_000,
    array_maximum_element_count=20_000,
    dictionary_maximum_element_count=10_000,
    stream_filters_maximum_length=4,
    page_tree_maximum_depth=32,
    page_tree_maximum_page_entries=MAX_PAGES * 16,  # dictionary entries over all pages (~8 a page), not pages
    outline_maximum_depth=16,
)


def open_pdf(pdf: bytes | BinaryIO, code: str = ReasonCode.REPORT_INVALID) -> PdfReader:
    """Shape checks every PDF we accept must pass; ``code`` is the rejection reason. A file is read in place."""

    def reject(why: str) -> EvidenceError:
        return EvidenceError(code, why)

    file = readable(pdf)
    size = file.seek(0, io.SEEK_END)
    if size > MAX_BYTES:
        raise reject(f"PDF larger than {MAX_BYTES} bytes")
    if not read_at(file, 0, 5) == b"%PDF-":
        raise reject("missing %PDF- header")
    if b"%%EOF" not in read_at(file, max(0, size - 1024), 1024):
        raise reject("missing %%EOF trailer (truncated?)")
    try:
        with apply_configuration(**REPORT_LIMITS):
            reader = PdfReader(file, strict=True)
            if reader.is_encrypted:
                raise reject("encrypted PDFs are not accepted")
            pages = len(reader.pages)
            if not xref_points_at_objects(reader, file):
                raise reject("cross-reference table does not point at the objects it names")
    except LimitReachedError:
        raise reject("PDF exceeds parser limits") from None
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError) as error:
        raise reject(f"PDF does not parse strictly ({type(error).__name__})") from None
    if not 1 <= pages <= MAX_PAGES:
        raise reject(f"page count {pages} outside 1..{MAX_PAGES}")
    return reader


def read_at(file: BinaryIO, offset: int, length: int) -> bytes:
    file.seek(offset)
    return file.read(length)


def xref_points_at_objects(reader: PdfReader, file: BinaryIO) -> bool:
    """pypdf's strict mode trusts xref offsets; a damaged file can still parse. Check each entry lands on its object."""
    for generation, entries in reader.xref.items():
        for number, offset in entries.items():
            if offset and not re.match(rb"\s*%d\s+%d\s+obj\b" % (number, generation), read_at(file, offset, 40)):
                return False
    return True


def validate_report(pdf: bytes | BinaryIO, revision: SourceRevision, totals: tuple[str, ...]) -> int:
    """Full gate for a report against the revision it claims and the totals recomputed from that revision.

    Returns the page count.
    """
    reader = open_pdf(pdf)
    subject = (reader.metadata or {}).get("/Subject")
    if subject != report_subject(revision):
        raise EvidenceError(
            ReasonCode.REPORT_INVALID, "PDF metadata does not name the pinned tenant, period and revision"
        )
    try:
        with apply_configuration(**REPORT_LIMITS):
            _decode_every_stream(reader)
        pages = pdfium_text(readable(pdf))
    except (PyPdfError, LimitReachedError, ValueError, KeyError, pypdfium2.PdfiumError) as error:
        raise EvidenceError(ReasonCode.REPORT_INVALID, f"text extraction failed ({type(error).__name__})") from None
    if len(pages) != len(reader.pages):
        raise EvidenceError(ReasonCode.REPORT_INVALID, "pdfium and pypdf disagree on the page count")
    text = "\n".join(pages)
    missing = [total for total in totals if total not in text]
    if missing:
        raise EvidenceError(ReasonCode.REPORT_INVALID, f"{len(missing)} report totals missing from the PDF text")
    return len(reader.pages)


def _decode_every_stream(reader: PdfReader) -> None:
    for generation, entries in reader.xref.items():
        for number in entries:
            obj = reader.get_object(IndirectObject(number, generation, reader))
            if isinstance(obj, StreamObject):
                obj.get_data()


PDFIUM_LOCK = threading.Lock()  # pdfium is not thread-safe: one call into it at a time per process


def pdfium_text(pdf: bytes | BinaryIO) -> list[str]:
    """Each page's text within its bounds, as pdfium extracts it. A file is read in place."""
    with PDFIUM_LOCK:
        document = pypdfium2.PdfDocument(pdf)
        try:
            texts = []
            for page in document:
                textpage = page.get_textpage()
                texts.append(textpage.get_text_bounded())
                textpage.close()
                page.close()
            return texts
        finally:
            document.close()
