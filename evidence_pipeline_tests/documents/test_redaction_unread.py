"""Ink Tesseract reads as no word, doubting nothing: a dot-matrix print, letters spaced several widths apart and
small print, each in an image. Before, such a region was neither read nor refused, and the job was published with
the value on it (issue 46); it is now read again in variants made for what the engine skips, or refused."""

from __future__ import annotations

import io
import shutil
import subprocess
import tempfile
from pathlib import Path

import pikepdf
import pytesseract
import pytest
from PIL import Image, ImageDraw, ImageFilter, ImageFont

from evidence_pipeline.documents.matching import flat
from evidence_pipeline.documents.redaction_check import verify_derivative
from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.synthetic.rental_applications import FONTS
from evidence_pipeline_tests.support import redaction_corpus as corpus
from evidence_pipeline_tests.support.redaction import leaks, redact_pure

pytestmark = pytest.mark.skipif(
    not all(map(shutil.which, ("tesseract", "pdftoppm", "pdftotext"))),
    reason="tesseract and poppler-utils are not installed (make test installs them)",
)


def _font(size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(str(FONTS / "Vera.ttf"), size)


def _dotted() -> Image.Image:
    """SHOWN as a dot-matrix printer prints it: dots 5 pixels wide, 6 apart, where 80-pixel glyphs have ink."""
    font = _font(80)
    solid = Image.new("L", (font.getbbox(corpus.SHOWN)[2] + 40, 120), 255)
    ImageDraw.Draw(solid).text((20, 20), corpus.SHOWN, fill=0, font=font)
    dotted = Image.new("L", solid.size, 255)
    draw = ImageDraw.Draw(dotted)
    for y in range(0, solid.height, 6):
        for x in range(0, solid.width, 6):
            if solid.getpixel((x, y)) < 128:
                draw.ellipse((x - 2, y - 2, x + 2, y + 2), fill=0)
    return dotted


def _spaced() -> Image.Image:
    """SHOWN with each glyph (40 pixels) three glyph widths from the next."""
    font = _font(40)
    step = font.getbbox("0")[2] * 4
    spaced = Image.new("L", (len(corpus.SHOWN) * step + 40, 70), 255)
    for index, char in enumerate(corpus.SHOWN):
        ImageDraw.Draw(spaced).text((20 + index * step, 10), char, fill=0, font=font)
    return spaced


def _small(size: int) -> Image.Image:
    """SHOWN in ``size``-pixel type (capitals ``size`` * 0.73 pixels tall), to be drawn at 300 dpi."""
    font = _font(size)
    small = Image.new("L", (font.getbbox(corpus.SHOWN)[2] + 8, size + 8), 255)
    ImageDraw.Draw(small).text((4, 4), corpus.SHOWN, fill=0, font=font)
    return small


def _planted(image: Image.Image) -> bytes:
    """A page with a typed heading and ``image`` drawn at 300 dpi, its bottom left corner at (72, 600)."""

    def change(pdf, page):
        page.obj.Resources.XObject = pikepdf.Dictionary(Im0=corpus.image_xobject(pdf, image))
        placement = corpus.placement_matrix(image, 72, 600, 72 / 300)
        page.obj.Contents = pdf.make_stream(corpus.HEADING + b"q " + placement + b" cm /Im0 Do Q\n")

    return corpus.build(change)


def _rendered(data: bytes, dpi: int) -> Image.Image:
    """The area of the page the picture is drawn in, rendered by poppler at ``dpi``."""
    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run(["pdftoppm", "-r", str(dpi), "-gray", "-png", "-", f"{scratch}/page"], input=data, check=True)
        page = Image.open(next(Path(scratch).glob("page*.png"))).convert("L")
    scale = dpi / 72
    return page.crop((round(60 * scale), round(152 * scale), round(560 * scale), round(202 * scale)))


def _joined_dots(data: bytes) -> str:
    """As a reader sees dots at arm's length: together (150 dpi, blurred, then anything grey made black)."""
    blurred = _rendered(data, 150).filter(ImageFilter.GaussianBlur(1)).point(lambda v: 0 if v < 200 else 255)
    return pytesseract.image_to_string(blurred, config="--psm 6")


def _zoomed_out(data: bytes) -> str:
    """As a reader sees a spaced line from arm's length: 150 dpi."""
    return pytesseract.image_to_string(_rendered(data, 150), config="--psm 6")


def _zoomed_in(data: bytes) -> str:
    """As a reader sees small print zoomed in: 600 dpi."""
    return pytesseract.image_to_string(_rendered(data, 600), config="--psm 6")


READ = {
    "dot_matrix_print": (_dotted, _joined_dots),
    "letters_spaced_three_widths_apart": (_spaced, _zoomed_out),
    "small_print_capitals_6_pixels_tall": (lambda: _small(8), _zoomed_in),
}


@pytest.mark.parametrize("case", sorted(READ))
def test_ink_the_engine_reads_as_no_word_is_read_again_and_its_value_removed(case):
    """A reader reads the value (as the case's view shows it); the first pass reads it in a variant (dots joined,
    the gaps between glyphs narrowed, enlarged) and removes it, the second passes, and no reader reads it in what
    is published. Before, the page read as nothing: published unredacted (the small print was refused, read only
    in doubt at its size)."""
    picture, view = READ[case]
    data = _planted(picture())
    assert flat(corpus.SSN) in flat(view(data))
    result = redact_pure(data)
    assert result.summary["outcome"] == "redacted" and result.summary["removed"] == {"national_id": 1}
    name = result.secret["derivative"]
    derivative = result.artifacts[name]
    assert verify_derivative({name: io.BytesIO(derivative)}, result)["passed"]
    assert flat(corpus.SSN) not in flat(view(derivative))
    assert leaks(derivative, corpus.SSN) == []


def test_small_print_read_only_in_doubt_however_enlarged_is_refused():
    """Capitals 5 pixels tall, legible zoomed in but read as '123-465-6789' or the like at every enlargement:
    refused as illegible ink is (only a region rule redacts it). Before, its cells of ink were too light to be
    found in the page's band, and the job was published with the picture."""
    with pytest.raises(EvidenceError, match="REDACTION_UNSUPPORTED_CONTENT: page 1 as rendered cannot be read"):
        redact_pure(_planted(_small(7)))
