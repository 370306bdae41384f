"""Issue 46's independent tester: documents the project did not plant (support/redaction_adversary.py), each showing
a national id to a reader in a way the planted corpus does not cover, each run through both passes: the
derivative is published and no reader, however they bring the page up, reads the value.

As found (before the second pass read every view a reader can bring up, and the tinted areas by their contrast),
eight of them were published with the value showing: red on a grey of the same level, black on a light grey panel,
a layer off on screen, a layer that prints, an annotation that prints, a rollover appearance, a check box's other
state, text outside the crop box; and a ninth, trusted glyphs bouncing off their line, which a reader reads (poppler
and Tesseract do not). Then the second pass refused them; now the first pass reads the same views (and joins a
line whose glyphs bounce) and removes what they show, so they are published with the value gone from every view,
every text layer and every object.
"""

from __future__ import annotations

import io
import shutil

import pytest

from evidence_pipeline.documents.matching import flat
from evidence_pipeline.documents.redaction_check import verify_derivative
from evidence_pipeline_tests.support import redaction_adversary as adversary
from evidence_pipeline_tests.support import redaction_corpus as corpus
from evidence_pipeline_tests.support.redaction import leaks, redact_pure

pytestmark = pytest.mark.skipif(
    not all(map(shutil.which, ("tesseract", "pdftoppm", "pdftotext"))),
    reason="tesseract and poppler-utils are not installed (make test installs them)",
)


@pytest.mark.parametrize("case", sorted(adversary.CASES))
def test_no_reader_reads_the_value_in_what_is_published(case):
    change, way = adversary.CASES[case]
    data = corpus.build(change)
    if case != "bouncing_helvetica_glyphs_drawn_out_of_order":  # a reader reads it; poppler and Tesseract do not
        assert flat(corpus.SSN) in adversary.shown(data, way)
    result = redact_pure(data)
    name = result.secret["derivative"]
    derivative = result.artifacts[name]
    verification = verify_derivative({name: io.BytesIO(derivative)}, result)
    for brought_up in {way, *adversary.VIEWS}:  # however a reader brings the page up, not only as it was planted
        assert flat(corpus.SSN) not in adversary.shown(derivative, brought_up), brought_up
    assert leaks(derivative, corpus.SSN) == []  # pdftotext, pypdf, pdfium, qpdf's object dump, each image's OCR
    assert flat("Harbor Housing") in adversary.shown(derivative, "page")
    assert verification["passed"] and result.summary["removed"]
