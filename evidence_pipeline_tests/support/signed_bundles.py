"""Changes a signed bundle can go through after signing, for the signature check's tests (the district agreement
itself is evidence_pipeline/synthetic/district_agreements.py, which the demo uses too)."""

from __future__ import annotations

import io

from pyhanko.pdf_utils import generic
from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter


def modified(pdf: bytes) -> bytes:
    """An incremental update that draws on page 1 after signing: a change no signature allows."""
    writer = IncrementalPdfFileWriter(io.BytesIO(pdf), strict=True)
    stream = writer.add_object(generic.StreamObject(stream_data=b"q 1 0 0 rg 72 400 200 40 re f Q"))
    writer.add_stream_to_page(0, stream)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def updated(pdf: bytes) -> bytes:
    """An unsigned incremental update (new document information), as an editor saving a file appends."""
    writer = IncrementalPdfFileWriter(io.BytesIO(pdf), strict=True)
    info = generic.DictionaryObject({generic.NameObject("/Title"): generic.TextStringObject("District agreement")})
    writer.set_info(info)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()
