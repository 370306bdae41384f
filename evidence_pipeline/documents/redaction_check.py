"""The second pass of a redaction: the written derivative, read back and searched by code that shares nothing with
the redactor (which uses pikepdf and its own content-stream walk).

Three searches: page text extracted by pypdf, page text extracted by pdfium (pypdfium2), and every object of the
file as pypdf loads it: each decoded stream (content, forms, XMP, fonts, images), each string and name. None of the
values the first pass removed may appear in any of them (whitespace and case ignored in extracted text), no rule of
the template may match the extracted text, and no embedded file may remain. Any finding fails the job with
REDACTION_VERIFICATION_FAILED; the message counts what was found, never the values.
"""

from __future__ import annotations

import io
import re
from typing import BinaryIO

import pypdfium2
from pypdf import PdfReader, apply_configuration
from pypdf.generic import (
    ArrayObject,
    ByteStringObject,
    DictionaryObject,
    IndirectObject,
    StreamObject,
    TextStringObject,
)

from evidence_pipeline.documents.gate import LIMITS, _every_object
from evidence_pipeline.documents.registry import ProcessorResult
from evidence_pipeline.errors import EvidenceError, ReasonCode

_SPACE = re.compile(r"\s+")


def verify_derivative(written: dict[str, BinaryIO], result: ProcessorResult) -> dict:
    """Check the written derivative against what the first pass says it removed; the verification record."""
    secret = result.secret
    file = written[secret["derivative"]]
    file.seek(0)
    data = file.read()
    values = secret["values"]
    texts = {"pypdf": _pypdf_text(data), "pdfium": _pdfium_text(data)}
    found: dict[str, int] = {}
    for extractor, pages in texts.items():
        flat = [_flat(page) for page in pages]
        hits = sum(1 for value in values if any(_flat(value) in page for page in flat))
        hits += sum(1 for page in pages for _ in secret["rules"].matches(page))
        if hits:
            found[f"{extractor}_text"] = hits
    objects, embedded, raw_hits = _raw_scan(data, values)
    if raw_hits:
        found["objects"] = raw_hits
    if embedded:
        found["embedded_files"] = embedded
    if found:
        raise EvidenceError(
            ReasonCode.REDACTION_VERIFICATION_FAILED,
            "the derivative still holds removed content: " + ", ".join(f"{k} {v}" for k, v in sorted(found.items())),
        )
    return {
        "passed": True,
        "values_checked": len(values),
        "extractors": sorted(texts),
        "pages": len(texts["pypdf"]),
        "objects_scanned": objects,
    }


def _flat(text: str) -> str:
    return _SPACE.sub("", text).casefold()


def _pypdf_text(data: bytes) -> list[str]:
    with apply_configuration(**LIMITS):
        return [page.extract_text() or "" for page in PdfReader(io.BytesIO(data)).pages]


def _pdfium_text(data: bytes) -> list[str]:
    document = pypdfium2.PdfDocument(data)
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


def _raw_scan(data: bytes, values: list[str]) -> tuple[int, int, int]:
    """(objects scanned, embedded files, hits) over every object pypdf finds in the file."""
    needles = [n for value in values for n in {value, _SPACE.sub("", value)}]
    encoded = [(n.encode("utf-8"), n.encode("utf-16-be"), n.encode("latin-1", errors="ignore")) for n in needles]
    objects = embedded = hits = 0
    with apply_configuration(**LIMITS):
        reader = PdfReader(io.BytesIO(data))
        stack = list(_every_object(reader))
        while stack:
            obj = stack.pop()
            objects += 1
            if isinstance(obj, StreamObject):
                blob = obj.get_data()
                hits += sum(1 for forms in encoded if any(form and form in blob for form in forms))
            if isinstance(obj, DictionaryObject):
                embedded += obj.get("/Type") == "/EmbeddedFile" or "/EmbeddedFiles" in obj
                stack.extend(v for v in obj.values() if not isinstance(v, IndirectObject))
            elif isinstance(obj, ArrayObject):
                stack.extend(v for v in obj if not isinstance(v, IndirectObject))
            elif isinstance(obj, (TextStringObject, ByteStringObject)):
                text = str(obj) if isinstance(obj, TextStringObject) else bytes(obj).decode("latin-1")
                hits += sum(1 for n in needles if n in text or _flat(n) in _flat(text))
    return objects, embedded, hits
