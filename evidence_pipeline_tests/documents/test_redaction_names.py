"""PDF names whose bytes are not UTF-8 (PyPDF3's includeSJISfontname.pdf names its font in Shift-JIS): pikepdf's
``str()`` of such a name raises, so every reading of a name goes through ``matching.name_str``."""

import io

import pikepdf

from evidence_pipeline.documents.matching import name_str, name_text
from evidence_pipeline_tests.support import real_corpus
from evidence_pipeline_tests.support.hostile_pdfs import CATALOG, PAGES, flate, raw_pdf

PAGE = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 300 100] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>"
HELVETICA = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"


def shift_jis_named(catalog_entry: bytes) -> bytes:
    """A page showing "Secret value", its catalog carrying ``catalog_entry``."""
    return raw_pdf(
        CATALOG.replace(b" >>", b" " + catalog_entry + b" >>"),
        PAGES,
        PAGE,
        flate(b"BT /F1 24 Tf 20 40 Td (Secret value) Tj ET"),
        HELVETICA,
    )


def test_a_name_that_is_not_utf8_reads_as_pikepdf_reads_keys():
    with pikepdf.open(io.BytesIO(shift_jis_named(b"/Kind /MS#82#6CGothic /MS#82#6CGothic 1"))) as pdf:
        key = next(k for k in pdf.Root.keys() if k.startswith("/MS"))
        assert name_str(pdf.Root.Kind) == key == "/MS\udc82lGothic"
        assert name_text(key) == "MS\ufffdlGothic"


def test_a_document_holding_such_a_name_is_redacted_not_crashed(tmp_path):
    path = tmp_path / "named.pdf"
    path.write_bytes(shift_jis_named(b"/Kind /MS#82#6CGothic"))
    assert real_corpus.redaction(path, ["Secret"]) == "redacted"
