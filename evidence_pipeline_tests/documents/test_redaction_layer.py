"""Small print in a ruled table, typed in a trusted font (issue 46: "redaction judged by what the page shows"):
the table's rules are ink the page's text layer does not explain, so the band around them is read by OCR with
everything drawn, and the engine doubts most of the 3-point words between the rules. Before, those doubted words
refused the page REDACTION_UNSUPPORTED_CONTENT although the text layer spells them (and the rules match on it). A
doubted word is now read where the trusted text's glyphs cover its box and the page without that text draws
nothing there that could hold a glyph (``ocr.Layer``); the same print drawn by anything else (an image under
the glyphs) is still doubted.
"""

from __future__ import annotations

import io
import shutil

import pytest
from PIL import Image, ImageDraw, ImageFont

from evidence_pipeline.documents import ocr
from evidence_pipeline.documents.matching import flat
from evidence_pipeline.documents.redaction_check import verify_derivative
from evidence_pipeline.synthetic.rental_applications import FONTS
from evidence_pipeline_tests.support import redaction_corpus as corpus
from evidence_pipeline_tests.support.redaction import pdftotext, redact_pure

ocr_read_page = ocr.read_page
pytestmark = pytest.mark.skipif(
    not all(map(shutil.which, ("tesseract", "pdftotext"))),
    reason="tesseract and poppler-utils are not installed (make test installs them)",
)
ROWS = (
    ("Applicant", "Mr Sample Person"),
    ("SSN", corpus.SSN),
    ("Employer", "Harbor Freight Logistics"),
    ("Monthly rent", "900"),
    ("Previous address", "12 Quay Street, Portside"),
    ("Reference", "Ms Other Person"),
    ("Phone", "555-0142"),
    ("Pets", "None declared"),
)
SIZE = 3  # points: small print
ROW = SIZE * 1.3  # points between the rules: the rules close to the glyphs
TOP = 700


def _table() -> bytes:
    """The heading, and ROWS in Helvetica at SIZE points in a table ruled across and down."""
    text = [corpus.HEADING]
    for row, (name, value) in enumerate(ROWS):
        baseline = TOP - (row + 1) * ROW + SIZE * 0.6
        text += [
            b"BT /F1 %g Tf %d %g Td (%s) Tj ET\n" % (SIZE, left, baseline, cell.encode())
            for left, cell in ((76, name), (206, value))
        ]
    bottom = TOP - len(ROWS) * ROW
    rules = [b"0.5 w\n"]
    rules += [b"72 %g m 400 %g l S\n" % (TOP - row * ROW, TOP - row * ROW) for row in range(len(ROWS) + 1)]
    rules += [b"%d %g m %d %g l S\n" % (x, TOP, x, bottom) for x in (72, 200, 400)]
    return b"".join(text + rules)


def _built() -> bytes:
    """The table, on a page whose font F1 is Helvetica (trusted: base-14, not embedded, no ToUnicode map)."""
    return corpus.build(lambda pdf, page: setattr(page.obj, "Contents", pdf.make_stream(_table())))


def test_small_print_in_a_ruled_table_typed_in_a_trusted_font_is_redacted():
    """Before: 'page 1 as rendered cannot be read with confidence by OCR', refused. Now the value is removed and
    the rest of the table stays."""
    data = _built()
    [(_, shown)] = ocr.shown_pages(data)
    doubted = [word for word in shown.reading.words if ocr._doubted(word)]
    assert shown.bands and len(doubted) > len(shown.reading.words) // 10  # what refused it: OCR doubts the print
    assert flat(corpus.SSN) in flat(pdftotext(data))
    result = redact_pure(data)
    derivative = result.artifacts[result.secret["derivative"]]
    assert result.summary["outcome"] == "redacted"
    assert verify_derivative({result.secret["derivative"]: io.BytesIO(derivative)}, result)["passed"]
    text = flat(pdftotext(derivative))
    assert flat(corpus.SSN) not in text and flat("Harbor Freight Logistics") in text
    [(_, page)] = list(ocr.rendered_pages(derivative))
    assert flat(corpus.SSN) not in flat(ocr.read_page(page).lines)


def test_the_same_small_print_drawn_by_anything_else_is_still_doubted(monkeypatch):
    """The page's reading as the redactor makes it, judged again with the same pixels drawn by what the page draws
    besides its trusted text (an image of the table: the page without that text still shows the print): doubted,
    not legible, as before. The same table in a font not trusted (a ToUnicode map) or as an image is no test of
    this: the engine reads its print, within the heading's band, as no words at all (ink skipped, not doubted)."""
    read = []
    monkeypatch.setattr(ocr, "read_page", lambda *args: read.append(args) or ocr_read_page(*args))
    [(_, shown)] = ocr.shown_pages(_built())
    [(image, known, painted, layer)] = read
    assert shown.reading.legible and not ocr_read_page(image, known, painted).legible  # legible by the layer only
    drawn = image.resize((image.width * ocr.INK_DPI // ocr.PAGE_DPI, image.height * ocr.INK_DPI // ocr.PAGE_DPI))
    assert not ocr_read_page(image, known, painted, ocr.Layer(layer.glyphs, drawn, 0)).legible


def test_the_layer_explains_a_word_only_where_the_page_draws_nothing_else_that_holds_a_glyph():
    """A doubted word under the trusted text's glyphs is explained; with an image's glyph under them, or where the
    glyphs cover less than half of it, it is not; a rule crossing it holds no glyph."""
    word = ocr.Word("Harbcr", (300, 120, 600, 150), 20.0, 0)
    glyphs = [(300 + 50 * n, 118, 350 + 50 * n, 152) for n in range(6)]
    blank = Image.new("L", (300, 200), 255)
    ruled, drawn = blank.copy(), blank.copy()
    ImageDraw.Draw(ruled).line((0, 45, 300, 45), fill=0)  # at INK_DPI: the word's rows are 40 to 50
    ImageDraw.Draw(drawn).text((120, 40), "12", fill=0, font=ImageFont.truetype(str(FONTS / "Vera.ttf"), 10))
    assert ocr.Layer(glyphs, blank, 0).explains(word) and ocr.Layer(glyphs, ruled, 0).explains(word)
    assert not ocr.Layer(glyphs, drawn, 0).explains(word)
    assert not ocr.Layer(glyphs[:2], blank, 0).explains(word)
    assert ocr.Layer(glyphs, drawn, 300).explains(word)  # the reading starts 300 rows (100 at INK_DPI) down
