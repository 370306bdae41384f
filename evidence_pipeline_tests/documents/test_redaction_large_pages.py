"""Posters: a page redacted is rendered at 300 dpi and read, whole where a tint covers it. In the worker's
process, under its default memory limit, an A1 page is redacted and checked, and a larger one is refused by a
budget that names it, before it is rendered (issue 46: pymupdf's test_5001.pdf, an A1 poster on a light-blue
ground, ended as PROCESSOR_RESOURCE_EXHAUSTED)."""

from __future__ import annotations

import io
import shutil

import pikepdf
import pytest
from PIL import Image, ImageDraw, ImageFont

from evidence_pipeline.config import DECLARED
from evidence_pipeline.documents import budgets, isolation, ocr
from evidence_pipeline.documents.redaction_check import verify_derivative
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.synthetic.rental_applications import FONTS
from evidence_pipeline_tests.support import redaction_corpus as corpus
from evidence_pipeline_tests.support.redaction import leaks, redact_pure

pytestmark = pytest.mark.skipif(
    not all(map(shutil.which, ("tesseract", "pdftoppm", "pdftotext"))),
    reason="tesseract and poppler-utils are not installed (make test installs them)",
)

A1 = (1684, 2384)  # points
A0 = (2384, 3370)
# as a document job's worker process runs: its default memory limit (the time limit is not what is tested here)
WORKER = isolation.Limits(int(DECLARED["processor_memory_mb"].metadata["default"]) * 2**20, seconds=3600)


def _poster(size: tuple[int, int]) -> bytes:
    """A page of ``size`` on a light-blue ground, the value in a font without a Unicode map: only OCR reads it."""
    width, height = size
    ground = b"0.75 0.85 0.95 rg 0 0 %d %d re f 0 g " % size
    shown = corpus.silent_text(before=ground, at=b"72 %d Td" % (height - 200))

    def change(pdf, page):
        page.obj.MediaBox = pikepdf.Array([0, 0, width, height])
        shown(pdf, page)

    return corpus.build(change)


@pytest.mark.slow
def test_an_a1_poster_on_a_tinted_ground_is_redacted_and_checked_within_the_workers_memory_limit():
    """The tint makes the whole page ink: 70 million pixels read in grey and again by their contrast, in each pass.
    Before, the rule finder's running sums and the contrast's differences each held the whole page at once, over a
    gigabyte: the job ended PROCESSOR_RESOURCE_EXHAUSTED."""
    result = isolation.isolated(WORKER, redact_pure, _poster(A1))
    assert result.summary["outcome"] == "redacted" and result.summary["removed"] == {"national_id": 1}
    name = result.secret["derivative"]
    derivative = result.artifacts[name]
    assert isolation.isolated(WORKER, verify_derivative, {name: io.BytesIO(derivative)}, result)["passed"]
    assert leaks(derivative, corpus.SSN) == []


def test_a_page_larger_than_a1_is_refused_by_a_budget_that_names_it_before_it_is_rendered():
    """Before, an A0 page was rendered and read until the worker reached its memory limit: a failure that says
    nothing a sender can act on."""
    with pytest.raises(EvidenceError) as refused:
        isolation.isolated(WORKER, redact_pure, _poster(A0))
    assert refused.value.code == ReasonCode.DOCUMENT_LIMIT_EXCEEDED
    assert f"{budgets.MAX_READ_PIXELS:,} pixels" in str(refused.value) and "A1" in str(refused.value)


def test_the_pieces_of_regions_read_again_are_made_as_their_sheet_is_read(monkeypatch):
    """A dense poster's doubted regions are read again in many pieces (turned, squeezed, scaled), several times
    its 70 million pixels in all. Before, every piece was made before the first was read: pymupdf's test_5001.pdf
    ended PROCESSOR_RESOURCE_EXHAUSTED in a worker at the default limit. Here each sheet holds one piece, and when a
    sheet is read no piece has been made beyond the next one's first."""
    font = ImageFont.truetype(str(FONTS / "Vera.ttf"), 40)
    page = Image.new("L", (2400, 1200), 255)
    for line, text in enumerate(("SSN 987-65-4321", "Tenant reference 4417", "Account 0042 7781")):
        word = Image.new("L", (font.getbbox(text)[2] + 10, 60), 255)
        ImageDraw.Draw(word).text((5, 5), text, fill=0, font=font)
        page.paste(word.resize((word.width * 3, word.height)), (40, 100 + 300 * line))  # stretched: doubted
    made, read = [], []
    piece, sheet_read = ocr._piece, ocr._sheet_read
    monkeypatch.setattr(ocr, "_piece", lambda *args: made.append(args) or piece(*args))
    monkeypatch.setattr(ocr, "_sheet_read", lambda pieces: read.append((len(made), len(pieces))) or sheet_read(pieces))
    monkeypatch.setattr(ocr, "_SHEET_PIXELS", 1)  # one piece a sheet
    ocr._regions_read(page, [])
    assert len(read) > 20  # each region read upright and upside down, then again in many pieces
    laid_out = 0
    for made_then, pieces in read:
        laid_out += pieces
        assert pieces == 1 and made_then <= laid_out + 1
