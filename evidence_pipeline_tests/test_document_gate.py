"""The worker-side document gate on hostile documents built here: each gets its own code, no crash."""

import io
import time

import pytest

from evidence_pipeline.documents.gate import gate
from evidence_pipeline.errors import EvidenceError
from evidence_pipeline_tests.hostile_pdfs import HOSTILE, pages, simple, written


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_each_hostile_document_gets_its_code(name):
    data, code = HOSTILE[name]
    start = time.perf_counter()
    with pytest.raises(EvidenceError) as refused:
        gate(io.BytesIO(data))
    assert refused.value.code == code, refused.value.message
    assert time.perf_counter() - start < 10


def test_at_least_30_hostile_documents():
    assert len(HOSTILE) >= 30


def test_a_plain_document_passes_and_is_described():
    gated = gate(io.BytesIO(pages(3)))
    assert (gated.pages, gated.active_content, gated.signatures_present) == (3, (), False)
    assert gated.pdf_version == "1.3" and gated.fonts == ()


def test_active_content_is_flagged_instead_when_the_policy_says_so():
    data, _ = HOSTILE["javascript_open_action"]
    assert gate(io.BytesIO(data), active_content="flag").active_content == ("DOCUMENT_JAVASCRIPT",)
    assert gate(io.BytesIO(HOSTILE["embedded_file"][0]), "flag").active_content == ("DOCUMENT_EMBEDDED_FILES",)


def test_fonts_and_signature_fields_are_found():
    font = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"
    signature = b"<< /FT /Sig /T (sig) >>"
    gated = gate(io.BytesIO(simple(font, signature)))
    assert gated.fonts == ("Helvetica",) and gated.signatures_present


def test_written_documents_pass():
    assert gate(io.BytesIO(written(lambda w: w.add_metadata({"/Producer": "tests"})))).producer == "tests"
