"""Born-digital documents (typed, with a text layer) that the redactor refused REDACTION_UNSUPPORTED_CONTENT as if
illegible (issue 46: "Real documents are redactable"), one test per cause found in the real-world corpus, each with
the same construction holding a value a reader cannot make out, which is still refused:

- an image in a colour space the first pass's decoder (pikepdf) cannot decode (a Separation's spot ink, as
  pdf2docx's demo-issue-340 draws a logo): read as pdfium decodes it where the page draws it, as the second pass
  already read it;
- text struck through (pymupdf's test-styled-table): the page read without its rules cut each glyph in two halves
  the engine doubts (and, with the rules, read the line as other words: a struck-through value went unread); a rule's
  pixels where a glyph's stroke crosses it now stay;
- the first pass's marks on two neighbouring lines over a highlight (pdfannots' issue13): touching, with the page
  between them, they were judged no solid box, read as a doubted word, and refused the page; the boxes the first
  pass painted are now cleared before the page is read, unless light ink is drawn on one;
- an inline stencil mask (tabula-py's data_dtype.pdf draws a barcode as one), which pikepdf's conversion of an
  inline image does not find: decoded from qpdf's externalized image, its value read (and, in an inline image,
  refused);
- an image's soft mask read alone (pymupdf's test_3727.pdf letters a title in one): no image of its own, it is
  judged where its image is drawn, on the rendered page, which reads and burns in a value it shapes.
"""

from __future__ import annotations

import io
import shutil
import zlib

import numpy
import pikepdf
import pytest
from PIL import Image, ImageDraw, ImageFilter, ImageFont

from evidence_pipeline.documents import ocr
from evidence_pipeline.documents.matching import flat
from evidence_pipeline.documents.redaction_check import verify_derivative
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.synthetic.rental_applications import FONTS
from evidence_pipeline_tests.support import redaction_corpus as corpus
from evidence_pipeline_tests.support.redaction import leaks, pdftotext, redact_pure

pytestmark = pytest.mark.skipif(
    not all(map(shutil.which, ("tesseract", "pdftotext"))),
    reason="tesseract and poppler-utils are not installed (make test installs them)",
)
LINES = ("Applicant: Mr Sample Person", f"SSN {corpus.SSN}", "Monthly rent budget 900", "Previous landlord Harbor")


def _spot_ink(image: Image.Image):
    """``image`` drawn over the page in one spot ink: a Separation colour space (tint 1 is full ink, black through
    its CMYK alternate), which pikepdf does not decode."""

    def change(pdf, page):
        tint = pdf.make_indirect(
            pikepdf.Dictionary(FunctionType=2, Domain=[0, 1], C0=[0, 0, 0, 0], C1=[0, 0, 0, 1], N=1)
        )
        stream = pdf.make_stream(
            zlib.compress(bytes(255 - v for v in image.convert("L").tobytes())),
            Type=pikepdf.Name.XObject,
            Subtype=pikepdf.Name.Image,
            Width=image.width,
            Height=image.height,
            ColorSpace=pikepdf.Array([pikepdf.Name.Separation, pikepdf.Name.Black, pikepdf.Name.DeviceCMYK, tint]),
            BitsPerComponent=8,
            Filter=pikepdf.Name.FlateDecode,
        )
        page.obj.Resources.XObject = pikepdf.Dictionary(Im0=stream)
        page.obj.Contents = pdf.make_stream(b"q " + corpus.FULL_PAGE + b" cm /Im0 Do Q\n")

    return change


def test_an_image_in_a_spot_ink_is_read_as_pdfium_decodes_it_and_its_value_painted_out():
    """Before: 'an image the redactor cannot decode', refused. Now the value is painted out of the image's pixels
    and no reader finds it."""
    data = corpus.build(_spot_ink(corpus.scan_image()))
    with pikepdf.open(io.BytesIO(data)) as pdf, pytest.raises(pikepdf.HifiPrintImageNotTranscodableError):
        pikepdf.PdfImage(pdf.pages[0].Resources.XObject.Im0).as_pil_image()
    result = redact_pure(data)
    derivative = result.artifacts[result.secret["derivative"]]
    verification = verify_derivative({result.secret["derivative"]: io.BytesIO(derivative)}, result)
    assert result.summary["outcome"] == "redacted" and result.summary["removed"]["image_text"] == 1
    assert verification["passed"]
    [(_, page)] = list(ocr.rendered_pages(derivative))
    read = flat(ocr.read_page(page).lines)
    assert flat(corpus.SSN) not in read and flat("Monthly rent budget 900") in read
    assert flat(corpus.SSN) not in flat(pdftotext(derivative))


def test_an_image_in_a_spot_ink_that_ocr_cannot_read_is_still_refused():
    with pytest.raises(EvidenceError) as refused:
        redact_pure(corpus.build(_spot_ink(corpus.scan_image(blur=3.0))))
    assert refused.value.code == ReasonCode.REDACTION_UNSUPPORTED_CONTENT and "OCR" in refused.value.message


def _struck_through(blur: float = 0) -> Image.Image:
    """LINES typed at 300 dpi, each struck through by a line 4 pixels thick (longer than an inch: a rule)."""
    image = Image.new("L", (2000, 160 + 110 * len(LINES)), 255)
    draw = ImageDraw.Draw(image)
    font = ImageFont.truetype(str(FONTS / "Vera.ttf"), 48)
    for number, line in enumerate(LINES):
        left, top, right, bottom = draw.textbbox((100, 80 + 110 * number), line, font=font)
        draw.text((100, 80 + 110 * number), line, fill=0, font=font)
        draw.line((left - 8, (top + bottom) // 2, right + 8, (top + bottom) // 2), fill=0, width=4)
    return image.filter(ImageFilter.GaussianBlur(blur)) if blur else image


def test_text_struck_through_is_read_whole_where_its_strokes_cross_the_line():
    """Before: the reading with the line read each struck word as other letters, and the reading without it read
    the glyphs' halves as two lines of doubted words: the value was not read."""
    reading = ocr.read_page(_struck_through())
    assert reading.legible
    assert all(flat(line) in flat(reading.lines) for line in LINES)


def test_crossing_strokes_keep_the_rules_pixels_and_the_rest_of_the_rule_goes():
    image = Image.new("L", (1200, 200), 255)
    draw = ImageDraw.Draw(image)
    draw.line((50, 100, 1150, 100), fill=0, width=4)  # a rule
    draw.line((600, 60, 600, 140), fill=0, width=6)  # a glyph's stroke across it
    pixels = numpy.asarray(ocr._unruled(image))
    assert (pixels[97:103, 598:602] == 0).all()  # where the stroke crosses
    assert (pixels[97:103, 60:590] == 255).all() and (pixels[97:103, 610:1140] == 255).all()


def test_text_struck_through_that_ocr_cannot_read_is_still_refused():
    assert not ocr.read_page(_struck_through(blur=4)).legible


def _highlighted_marks():
    """A highlighted phrase whose last word and the next line's first were removed: the two marks touch, the
    highlight's tint around them (the painted boxes, in the image's pixels)."""
    font = ImageFont.truetype(str(FONTS / "Vera.ttf"), 50)
    image = Image.new("L", (1400, 420), 255)
    draw = ImageDraw.Draw(image)
    draw.rounded_rectangle((90, 90, 900, 170), radius=30, fill=225)
    draw.rounded_rectangle((90, 172, 700, 252), radius=30, fill=225)
    draw.text((110, 100), "This is a", fill=0, font=font)
    painted = [(370, 90, 900, 171), (100, 173, 640, 252)]
    for box in painted:
        draw.rectangle(box, fill=0)
    return image, draw, font, painted


def test_touching_marks_over_a_highlight_are_cleared_before_the_page_is_read():
    image, _, _, painted = _highlighted_marks()
    inside = [(slice(100, 160), slice(400, 880)), (slice(185, 245), slice(110, 630))]
    assert all((numpy.asarray(ocr._cleared(image))[area] == 0).all() for area in inside)  # no solid box, judged so
    assert all((numpy.asarray(ocr._cleared(image, painted))[area] == 255).all() for area in inside)


def test_light_ink_drawn_on_a_painted_box_is_still_read():
    image, draw, font, painted = _highlighted_marks()
    draw.text((120, 185), corpus.SSN, fill=255, font=font)
    assert flat(corpus.SSN) in flat(ocr.read_page(image, painted=painted).lines)


def _inline_stencil(image: Image.Image, text: bytes = b""):
    """``image`` drawn as an inline stencil mask (``BI /IM true ... EI``: a 1-bit shape the page paints in its fill
    colour, black here), as pdfTeX keeps a barcode (tabula-py's data_dtype.pdf), under the typed heading and
    ``text``."""

    def change(pdf, page):
        bits = image.convert("L").point(lambda v: 255 if v > 128 else 0, "1")  # sample 0 paints (Decode [0 1])
        samples = zlib.compress(bits.tobytes()).hex().encode() + b">"
        placed = corpus.placement_matrix(image, 72, 500, 72 / 150)
        inline = b"BI /W %d /H %d /IM true /BPC 1 /F [/AHx /Fl] ID\n%s\nEI" % (image.width, image.height, samples)
        page.obj.Contents = pdf.make_stream(corpus.HEADING + text + b"q " + placed + b" cm " + inline + b" Q\n")

    return change


def _bars() -> Image.Image:
    image = Image.new("L", (600, 120), 255)
    draw = ImageDraw.Draw(image)
    for x in range(20, 580, 14):
        draw.rectangle((x, 10, x + 3 + x % 5, 110), fill=0)
    return image


def test_an_inline_stencil_mask_is_decoded_and_the_typed_value_removed():
    """Before: pikepdf converts an inline image through a page of its own and looks for it among that page's images,
    where qpdf counts no stencil mask: 'an image the redactor cannot decode (StopIteration)', refused."""
    typed = b"BT /F1 12 Tf 72 700 Td (SSN " + corpus.SSN.encode() + b") Tj ET\n"
    data = corpus.build(_inline_stencil(_bars(), typed))
    result = redact_pure(data)
    derivative = result.artifacts[result.secret["derivative"]]
    verification = verify_derivative({result.secret["derivative"]: io.BytesIO(derivative)}, result)
    assert result.summary["outcome"] == "redacted" and verification["passed"]
    assert flat(corpus.SSN) not in flat(pdftotext(derivative)) and flat("Harbor Housing") in flat(pdftotext(derivative))


def test_a_value_drawn_in_an_inline_stencil_mask_is_read_and_refused():
    """The mask is read now: the value it draws is found, and an inline image is not painted, so it is refused
    (not, as before, for an image not decoded)."""
    with pytest.raises(EvidenceError) as refused:
        redact_pure(corpus.build(_inline_stencil(corpus.text_picture(corpus.SHOWN, 40))))
    assert refused.value.code == ReasonCode.REDACTION_UNSUPPORTED_CONTENT
    assert refused.value.message == "an inline image holds text to remove"


def _brushed(text: str) -> Image.Image:
    """``text`` as a soft mask's shape (opaque where the letters are), slanted and speckled as brush lettering is:
    read alone, the engine doubts it."""
    letters = corpus.text_picture(text, 80)
    slant = 0.6 * letters.height
    letters = letters.transform(
        (letters.width + round(slant), letters.height), Image.AFFINE, (1, 0.6, -slant, 0, 1, 0), fillcolor=255
    )
    speckled = (255 - numpy.asarray(letters, dtype=float)) * (
        numpy.random.default_rng(0).random(letters.size[::-1]) > 0.3
    )
    return Image.fromarray(speckled.astype("uint8")).filter(ImageFilter.GaussianBlur(1))


def _through_soft_mask(mask: Image.Image, typed: bytes):
    """A plain red image drawn through ``mask`` (its /SMask), as pymupdf's test_3727.pdf draws a brush-lettered
    title, below ``typed`` lines."""

    def change(pdf, page):
        image = {"Type": pikepdf.Name.XObject, "Subtype": pikepdf.Name.Image, "Width": mask.width}
        image |= {"Height": mask.height, "BitsPerComponent": 8, "Filter": pikepdf.Name.FlateDecode}
        soft = pdf.make_stream(zlib.compress(mask.tobytes()), ColorSpace=pikepdf.Name.DeviceGray, **image)
        red = zlib.compress(bytes((200, 30, 30)) * (mask.width * mask.height))
        page.obj.Resources.XObject = pikepdf.Dictionary(
            Im0=pdf.make_stream(red, ColorSpace=pikepdf.Name.DeviceRGB, SMask=soft, **image)
        )
        placed = corpus.placement_matrix(mask, 72, 450, 72 / 150)
        page.obj.Contents = pdf.make_stream(corpus.HEADING + typed + b"q " + placed + b" cm /Im0 Do Q\n")

    return change


def _typed(*lines: str) -> bytes:
    return b"".join(
        b"BT /F1 12 Tf 72 %d Td (%s) Tj ET\n" % (700 - 16 * n, line.encode()) for n, line in enumerate(lines)
    )


def test_a_soft_mask_the_engine_doubts_alone_is_judged_where_its_image_is_drawn():
    """Before: the image's /SMask, reached as an image outside the page content and read alone, was doubted and the
    document refused ('an image outside the page content cannot be read with confidence by OCR'); what it shapes is
    on the rendered page, which reads it."""
    mask = _brushed("READ: MATTHEW 28")
    assert not ocr.read(mask).legible
    result = redact_pure(corpus.build(_through_soft_mask(mask, _typed(*LINES))))
    derivative = result.artifacts[result.secret["derivative"]]
    verification = verify_derivative({result.secret["derivative"]: io.BytesIO(derivative)}, result)
    assert result.summary["outcome"] == "redacted" and verification["passed"]
    assert flat(corpus.SSN) not in flat(pdftotext(derivative)) and flat("Monthly rent budget") in flat(
        pdftotext(derivative)
    )


def test_a_value_a_soft_mask_shapes_is_read_on_the_rendered_page_and_burned_in():
    mask = _brushed(corpus.SHOWN)
    result = redact_pure(corpus.build(_through_soft_mask(mask, _typed(LINES[0], *LINES[2:]))))
    derivative = result.artifacts[result.secret["derivative"]]
    assert result.summary["outcome"] == "redacted" and result.summary["removed"]["national_id"] == 1
    assert verify_derivative({result.secret["derivative"]: io.BytesIO(derivative)}, result)["passed"]
    assert leaks(derivative, corpus.SSN) == []
    [(_, page)] = list(ocr.rendered_pages(derivative))
    assert flat(corpus.SSN) not in flat(ocr.read_page(page).lines)
