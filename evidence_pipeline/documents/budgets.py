"""The work one document may cost: budgets that the worker gate checks before any processor runs, and that the
processors' own walks (``pdftext``) enforce again, from these constants only.

Exceeding one is DOCUMENT_LIMIT_EXCEEDED, whose message names the limit (never a value read from the file) and
what the sender can do. The docs' "Document limits" table (docs/tenants-api/gate.md) lists each with why it is
where it is.
"""

from __future__ import annotations

from evidence_pipeline.errors import EvidenceError, ReasonCode

MAX_PAGES = 1_000  # pages found in the page tree, and what any node's /Count may claim
MAX_OBJECTS = 50_000  # objects the cross-reference names
MAX_DECODED_BYTES = 512_000_000  # all streams of the document together, decoded: 19 A4 pages at 300 dpi in colour
# stored lossless (26 MB each), 58 in grey (8.7 MB); a JPEG page counts its encoded bytes (pypdf leaves it encoded)
MAX_STREAM_BYTES = 64_000_000  # one stream, declared and decoded: an A3 page at 300 dpi in colour, lossless, is 52 MB
MAX_GLYPH_CODES = 65_536  # codes one font's /W array or ToUnicode CMap may map in total: every two-byte code
# entries of one array as parsed: a composite font's /W giving every two-byte code its own range (3 numbers each,
# 196,608 entries) passes; 20,000 (the service's own reports' limit) refused a LibreOffice-signed contract
MAX_ARRAY_ENTRIES = 200_000
MAX_DICTIONARY_ENTRIES = 5_000  # entries of one dictionary (a Type 3 font's glyphs, an old-style /Dests)
MAX_OPERATORS = 1_000_000  # instructions in one content stream (a page's contents, a form XObject)
MAX_TEXT_BYTES = 1_000_000  # bytes of all string operands of one content stream (the gate counts them as written)
MAX_IMAGE_PIXELS = 80_000_000  # width x height of one image, declared or encoded; A3 at 600 dpi is 70 million
MAX_READ_PIXELS = 80_000_000  # a page redacted is rendered at 300 dpi to be read: A1 (70 million) fits the worker's
# default memory limit with the whole page read, A0 (140 million) does not
MAX_PAGE_UNITS = 14_400  # a page side in default user space units (x /UserUnit): PDF's own limit (ISO 32000 C.2)
MAX_ANNOTATIONS = 1_000  # annotations of one page
MAX_TREE_DEPTH = 32  # levels of a name or number tree, or of the outline; a node met twice is refused too


# What a sender can do about a limit that counts the document's size
SPLIT = "send it in smaller parts, or re-saved with simpler pages or smaller images (docs: Document limits)"


def exceeded(limit: str, action: str = SPLIT) -> EvidenceError:
    """The refusal for a document over ``limit`` (a description of the limit, with its value), naming ``action``."""
    return EvidenceError(ReasonCode.DOCUMENT_LIMIT_EXCEEDED, f"the document exceeds a limit: {limit}; {action}")
