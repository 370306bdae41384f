import io
import zlib

import pytest
from pypdf import PdfReader, PdfWriter
from pypdf.generic import ArrayObject, NameObject, StreamObject

from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.monthly import sources
from evidence_pipeline.monthly.render import render_report, report_totals
from evidence_pipeline.monthly.validate import validate_report
from evidence_pipeline_tests.support.fixture_sources import SMALL


@pytest.fixture
def rendered(local_runtime):
    revision = sources.pin_latest(local_runtime.sources, SMALL)
    frame = sources.read_revision(local_runtime.sources, revision)
    return revision, render_report(revision, frame).pdf, report_totals(frame)


def _reject(pdf, revision, totals) -> str:
    with pytest.raises(EvidenceError) as error:
        validate_report(pdf, revision, totals)
    return error.value.code


def test_accepts_our_report(rendered):
    revision, pdf, totals = rendered
    assert validate_report(pdf, revision, totals) == len(PdfReader(io.BytesIO(pdf)).pages)


def test_rejects_truncated_and_non_pdf(rendered):
    revision, pdf, totals = rendered
    assert _reject(pdf[: len(pdf) // 2], revision, totals) == "REPORT_INVALID"
    assert _reject(b"<html>" + pdf[6:], revision, totals) == "REPORT_INVALID"
    assert _reject(b"", revision, totals) == "REPORT_INVALID"


def test_rejects_corrupted_structure(rendered):
    revision, pdf, totals = rendered
    corrupted = pdf.replace(b" obj", b" jbo")  # every object header broken
    assert _reject(corrupted, revision, totals) == "REPORT_INVALID"


def test_rejects_encrypted_even_with_empty_password(rendered):
    revision, pdf, totals = rendered
    writer = PdfWriter(clone_from=io.BytesIO(pdf))
    writer.encrypt(user_password="", owner_password="owner")
    out = io.BytesIO()
    writer.write(out)
    assert _reject(out.getvalue(), revision, totals) == "REPORT_INVALID"


def test_rejects_report_of_another_revision(local_runtime, rendered):
    _, pdf, totals = rendered
    other = sources.pin_latest(local_runtime.sources, SMALL.__class__("acme-books", "2026-09"))
    assert _reject(pdf, other, totals) == "REPORT_INVALID"


def test_rejects_report_missing_the_sources_totals(rendered):
    revision, pdf, totals = rendered
    assert _reject(pdf, revision, totals + ("123,456,789.00 EUR",)) == "REPORT_INVALID"


def _with_extra_content(pdf: bytes, data: bytes) -> bytes:
    """The report rewritten by pypdf with one more content stream on its first page (Flate-compressed ``data``)."""
    writer = PdfWriter(clone_from=io.BytesIO(pdf))
    stream = StreamObject()
    stream.set_data(zlib.compress(data))
    stream[NameObject("/Filter")] = NameObject("/FlateDecode")
    page = writer.pages[0]
    page[NameObject("/Contents")] = ArrayObject([page.raw_get("/Contents"), writer._add_object(stream)])
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def test_rejects_a_stream_that_decodes_past_the_parser_limits(rendered):
    """pdfium extracts the text, but pypdf decodes every stream first under its limits: a decompression bomb (20 MB
    of spaces in 20 KB) is refused before pdfium would inflate it."""
    revision, pdf, totals = rendered
    assert validate_report(_with_extra_content(pdf, b" " * 1000), revision, totals)  # the rewrite alone passes
    assert _reject(_with_extra_content(pdf, b" " * 21_000_000), revision, totals) == "REPORT_INVALID"
