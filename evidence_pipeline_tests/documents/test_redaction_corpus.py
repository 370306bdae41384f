"""The redaction corpus: a value the template names, hidden in each string-bearing place of a PDF, in each spelling,
and inside images; after the first pass and the second, no independent reader finds it anywhere in the derivative.
And the weakened redactors the second pass must catch."""

from __future__ import annotations

import dataclasses
import io
import shutil
import subprocess
import tempfile
import zlib
from pathlib import Path

import numpy
import pikepdf
import pytest
from PIL import Image, ImageDraw

from evidence_pipeline.documents import ocr, redact
from evidence_pipeline.documents.gate import gate
from evidence_pipeline.documents.matching import Rules, flat
from evidence_pipeline.documents.redaction_check import verify_derivative
from evidence_pipeline.documents.registry import ProcessorInput
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.synthetic.rental_applications import long_application, organization_template
from evidence_pipeline_tests.support import hostile_pdfs
from evidence_pipeline_tests.support import redaction_corpus as corpus
from evidence_pipeline_tests.support.redaction import leaks, pdftotext, pinned_template
from evidence_pipeline_tests.support.redaction import redact_pure as _redact_pure


def seen(data: bytes, angles=(0,), text_layer: bool = True, widen: float = 1) -> str:
    """What a reader sees on the pages, squeezed (flat): poppler's pdftotext, and Tesseract's command line on each
    page as poppler's pdftoppm renders it (300 dpi, annotations and forms drawn), turned by each of ``angles``
    (degrees, counter-clockwise): judges that share nothing with the passes but the OCR engine's data. Without
    ``text_layer``, only the pixels (pdftotext reads invisible and clipped text too). Each page ``widen`` times as
    wide, as a reader reads text condensed by its matrix (or stretched: ``widen`` under 1)."""
    texts = [pdftotext(data)] if text_layer else []
    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run(["pdftoppm", "-r", "300", "-gray", "-png", "-", f"{scratch}/page"], input=data, check=True)
        for path in sorted(Path(scratch).glob("page*.png")):
            page = Image.open(path)
            page = page.resize((round(page.width * widen), page.height)) if widen != 1 else page
            for angle in angles:
                turned = page.rotate(angle, expand=True, fillcolor=255) if angle else page
                turned.save(f"{scratch}/turned.png")
                texts.append(
                    subprocess.run(
                        ["tesseract", f"{scratch}/turned.png", "-", "--psm", "3"],
                        text=True,
                        capture_output=True,
                        env={"OMP_THREAD_LIMIT": "1", "PATH": "/usr/bin:/bin"},
                    ).stdout
                )
    return flat("\n".join(texts))


def redacted(data: bytes):
    result = _redact_pure(data)
    derivative = result.artifacts[result.secret["derivative"]]
    verification = verify_derivative({result.secret["derivative"]: io.BytesIO(derivative)}, result)
    return result.summary, derivative, verification


@pytest.mark.parametrize("case", sorted(corpus.PLACES))
def test_a_value_in_any_place_of_the_file_is_removed_everywhere(case):
    change, value = corpus.PLACES[case]
    data = corpus.build(change)
    summary, derivative, verification = redacted(data)
    assert summary["outcome"] == "redacted" and verification["passed"]
    assert leaks(derivative, value) == []


@pytest.mark.slow
def test_the_corpus_plants_what_it_says():
    """Each case's original holds its value where the readers see it (or in its raw objects): the check that
    the derivative holds it nowhere is not vacuous."""
    for case, (change, value) in {**corpus.PLACES, **corpus.SPELLINGS, **corpus.PICTURES}.items():
        data = corpus.build(change)
        assert leaks(data, value) or flat(value) in flat(data.decode("latin-1")), case


@pytest.mark.parametrize("case", sorted(corpus.SPELLINGS))
def test_a_value_in_any_spelling_is_found_and_removed(case):
    change, value = corpus.SPELLINGS[case]
    summary, derivative, verification = redacted(corpus.build(change))
    assert summary["outcome"] == "redacted" and verification["passed"]
    assert leaks(derivative, value) == []


def test_the_earlier_revisions_document_information_goes():
    data, value = corpus.earlier_revision_info()
    assert data.count(b"%%EOF") == 2 and value.encode() in data
    summary, derivative, _ = redacted(data)
    assert derivative.count(b"%%EOF") == 1 and leaks(derivative, value) == []


def test_a_link_is_dropped_whole_and_its_area_marked_never_rewritten():
    change, value = corpus.PLACES["link_uri_and_page_text"]
    summary, derivative, _ = redacted(corpus.build(change))
    with pikepdf.open(io.BytesIO(derivative)) as pdf:
        assert len(pdf.pages[0].obj.get("/Annots", [])) == 0
    assert summary["removed"]["annotation"] == 1 and summary["marks"] >= 2


@pytest.mark.skipif(not shutil.which("tesseract"), reason="tesseract is not installed (make test installs it)")
@pytest.mark.parametrize("case", sorted(corpus.PICTURES))
def test_text_inside_images_is_painted_out_in_the_pixels(case):
    change, value = corpus.PICTURES[case]
    data = corpus.build(change)
    assert "pdfimages+ocr" in leaks(data, value)
    summary, derivative, verification = redacted(data)
    assert summary["outcome"] == "redacted" and summary["removed"]["image_text"] >= 1
    assert verification["images_read"] >= 1 and leaks(derivative, value) == []
    kept = corpus.SCAN_LINES[0].split()[-1]  # the words that hold nothing stay legible
    assert kept in ocr.read(_only_image(derivative)).lines


def _only_image(data: bytes) -> Image.Image:
    with pikepdf.open(io.BytesIO(data)) as pdf:
        [image] = [obj for obj in pdf.objects if isinstance(obj, pikepdf.Stream) and obj.get("/Subtype") == "/Image"]
        return pikepdf.PdfImage(image).as_pil_image()


@pytest.mark.skipif(not shutil.which("tesseract"), reason="tesseract is not installed (make test installs it)")
def test_an_image_ocr_cannot_read_with_confidence_is_refused_unless_a_region_covers_its_page():
    data = corpus.illegible_scan()
    with pytest.raises(EvidenceError) as refused:
        _redact_pure(data)
    assert refused.value.code == ReasonCode.REDACTION_UNSUPPORTED_CONTENT and "OCR" in refused.value.message
    whole_page = (
        '{"kind": "program", "name": "p", "rules": [{"id": "scan", "label": "scanned_page", '
        '"region": {"page": 1, "rect": [0, 0, 612, 792]}}]}'
    ).encode()
    summary = _redact_pure(data, whole_page).summary
    assert summary["removed"]["scanned_page"] == 1


def test_a_page_outside_the_page_tree_goes_and_does_not_refuse_the_document():
    """A bookmark's page that the page tree no longer holds is shown by no reader: the derivative drops it and what
    only it draws (an image OCR cannot read), instead of refusing the document over it."""
    summary, derivative, verification = redacted(corpus.page_outside_the_tree())
    assert summary["removed"] == {"page_outside_the_tree": 1} and verification["passed"]
    with pikepdf.open(io.BytesIO(derivative)) as pdf:
        assert not [o for o in pdf.objects if isinstance(o, pikepdf.Stream) and o.get("/Subtype") == "/Image"]
        assert list(pdf.Root.Outlines.First.Dest) == [None, pikepdf.Name.Fit]


def _annotations_left_alone(data: bytes):
    """A weakened redactor: the real first pass, then the original's annotations put back."""
    result = _redact_pure(data)
    name = result.secret["derivative"]
    with pikepdf.open(io.BytesIO(result.artifacts[name])) as pdf, pikepdf.open(io.BytesIO(data)) as original:
        for page, before in zip(pdf.pages, original.pages):
            if "/Annots" in before.obj:
                page.obj.Annots = pdf.copy_foreign(before.obj.Annots)
        out = io.BytesIO()
        pdf.save(out)
    return dataclasses.replace(result, artifacts={**result.artifacts, name: out.getvalue()})


@pytest.mark.parametrize("case", ["link_uri", "annotation_contents", "javascript_action"])
def test_the_annotations_left_alone_double_is_caught_by_the_second_pass(case):
    result = _annotations_left_alone(corpus.build(corpus.PLACES[case][0]))
    name = result.secret["derivative"]
    with pytest.raises(EvidenceError) as caught:
        verify_derivative({name: io.BytesIO(result.artifacts[name])}, result)
    assert caught.value.code == ReasonCode.REDACTION_VERIFICATION_FAILED
    assert corpus.EMAIL not in caught.value.message and "strings" in caught.value.message


def test_the_second_pass_searches_with_the_rules_not_only_the_removed_values():
    """A value the first pass never found (so never listed) is still caught, by the rules, in an object."""
    result = _redact_pure(corpus.build(corpus.PLACES["annotation_subject"][0]), remove=False)
    name = result.secret["derivative"]
    emptied = dataclasses.replace(result, secret={**result.secret, "values": []})
    with pytest.raises(EvidenceError) as caught:
        verify_derivative({name: io.BytesIO(result.artifacts[name])}, emptied)
    assert caught.value.code == ReasonCode.REDACTION_VERIFICATION_FAILED


@pytest.mark.skipif(not shutil.which("tesseract"), reason="tesseract is not installed (make test installs it)")
def test_the_second_pass_reads_the_pixels_of_an_unpainted_image():
    result = _redact_pure(corpus.build(corpus.PICTURES["scan_without_text"][0]), remove=False)
    name = result.secret["derivative"]
    with pytest.raises(EvidenceError) as caught:
        verify_derivative({name: io.BytesIO(result.artifacts[name])}, result)
    assert "image_text 1" in caught.value.message


def _image_declaring(width: int, height: int, data: bytes, filter_: str):
    def change(pdf, page):
        image = pdf.make_stream(
            data,
            Type=pikepdf.Name.XObject,
            Subtype=pikepdf.Name.Image,
            Width=width,
            Height=height,
            ColorSpace=pikepdf.Name.DeviceGray,
            BitsPerComponent=8,
            Filter=pikepdf.Name(filter_),
        )
        page.obj.Resources.XObject = pikepdf.Dictionary(Im0=image)
        page.obj.Contents = pdf.make_stream(b"q 100 0 0 100 72 500 cm /Im0 Do Q\n")

    return change


@pytest.mark.parametrize(
    "change, code",
    [
        (
            _image_declaring(200_000, 200_000, zlib.compress(b"\0" * 64), "/FlateDecode"),
            ReasonCode.DOCUMENT_LIMIT_EXCEEDED,
        ),
        (_image_declaring(64, 64, b"\xff\xd8 not a jpeg", "/DCTDecode"), ReasonCode.REDACTION_UNSUPPORTED_CONTENT),
    ],
)
def test_an_image_over_the_pixel_budget_or_undecodable_is_refused_before_it_is_read(change, code):
    """The redactor's own check, whatever the gate let through (the gate is passed a clean document here)."""
    clean = corpus.build(lambda pdf, page: None)
    hostile = corpus.build(change)
    document = ProcessorInput("doc_image", "0" * 64, len(hostile), gate(io.BytesIO(clean), "flag"), io.BytesIO(hostile))
    with pytest.raises(EvidenceError) as refused:
        redact.redact_document([document], {}, pinned_template())
    assert refused.value.code == code


@pytest.mark.parametrize(
    "name",
    [
        "image_declared_200000_square",
        "jpeg_stating_60000_square",
        "page_14400000_points_square",
        "page_tree_count_999999999",
        "20000_annotations",
    ],
)
def test_an_oversized_declaration_is_refused_before_the_redactor_reads_it(name):
    data, code = hostile_pdfs.HOSTILE[name]
    with pytest.raises(EvidenceError) as refused:
        _redact_pure(data)
    assert refused.value.code == code == ReasonCode.DOCUMENT_LIMIT_EXCEEDED


@pytest.mark.skipif(not shutil.which("chromium"), reason="chromium is not installed (make test installs it)")
def test_an_application_another_producer_wrote_is_redacted(tmp_path):
    """Chromium's print to PDF (Skia: subset CID fonts, a link annotation, a structure tree), not this project's
    writers."""
    page = tmp_path / "application.html"
    page.write_text(
        f"<html><body><h1>Rental application</h1><p>SSN: {corpus.SSN}</p>"
        f'<p>Email: <a href="mailto:{corpus.EMAIL}">{corpus.EMAIL}</a></p></body></html>'
    )
    printed = tmp_path / "application.pdf"
    subprocess.run(
        [
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-pdf-header-footer",
            f"--print-to-pdf={printed}",
            page.as_uri(),
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )
    data = printed.read_bytes()
    assert leaks(data, corpus.SSN) and leaks(data, corpus.EMAIL)
    summary, derivative, verification = redacted(data)
    assert summary["removed"]["annotation"] == 1 and verification["passed"]
    assert leaks(derivative, corpus.SSN) == [] and leaks(derivative, corpus.EMAIL) == []


READERS = pytest.mark.skipif(
    not all(map(shutil.which, ("tesseract", "pdftoppm", "pdftotext"))),
    reason="tesseract and poppler-utils are not installed (make test installs them)",
)


@READERS
@pytest.mark.parametrize(
    "case",
    [
        case
        if case not in corpus.KNOWN_LEAKS
        else pytest.param(case, marks=pytest.mark.xfail(strict=True, reason=corpus.KNOWN_LEAKS[case]))
        for case in sorted(corpus.DRAWN)
    ],
)
def test_a_value_drawn_any_way_is_gone_from_the_page_a_reader_sees(case):
    """Drawn so that no text layer spells it (an image drawn larger than its pixels, halves in two objects, glyph
    outlines, a pattern or an appearance through a custom encoding, text at an angle): the rendered page shows it,
    and after the redaction no reader does; the rest of the page still reads, and keeps its text layer (only the
    region is burned in, not the page)."""
    change, value, angles = corpus.DRAWN[case]
    data = corpus.build(change)
    assert flat(value) in seen(data, angles) or "pdfimages+ocr" in leaks(data, value)
    summary, derivative, verification = redacted(data)
    assert verification["passed"] and summary["outcome"] == "redacted"
    after = seen(derivative, {0, *angles})
    assert flat(value) not in after and leaks(derivative, value) == []
    assert flat("Harbor Housing") in after and flat("Harbor Housing") in flat(pdftotext(derivative))
    assert "burned_page" not in summary["removed"] and unnamed_resources(derivative) == []


def unnamed_resources(data: bytes) -> list[str]:
    """The images, forms, patterns and shadings a page's resources hold that its content does not name: what a cut
    took out must not stay reachable from the page."""
    unnamed = []
    with pikepdf.open(io.BytesIO(data)) as pdf:
        for page in pdf.pages:
            named = {
                str(operand)
                for operands, _ in pikepdf.parse_content_stream(page)
                if not isinstance(operands, pikepdf.PdfInlineImage)
                for operand in operands
                if isinstance(operand, pikepdf.Name)
            }
            resources = page.obj.get("/Resources", pikepdf.Dictionary())
            unnamed += [
                name
                for kind in ("/XObject", "/Pattern", "/Shading")
                for name in resources.get(kind, pikepdf.Dictionary()).keys()
                if name not in named
            ]
    return unnamed


@READERS
def test_typed_pages_in_trusted_fonts_are_not_read_by_ocr_and_their_values_still_go():
    """Text in a base-14 font with a standard encoding spells what it draws: neither pass OCRs it (what keeps a
    typed application's cost near the text layer's), and the rules still remove its values; a page with an image
    is read in the band around the image only."""
    data = long_application(2)
    result = _redact_pure(data)
    summary, derivative = result.summary, result.artifacts[result.secret["derivative"]]
    verification = verify_derivative({result.secret["derivative"]: io.BytesIO(derivative)}, result)
    assert verification["passed"] and summary["ocr"]["pages"] == 0 and summary["removed"]["national_id"] == 8
    # the marks it drew are excused as the boxes it recorded painting, not as dark pixels: unrecorded, they are ink
    shown = [shown for _, shown in ocr.shown_pages(derivative, result.secret["painted"])]
    assert [page.bands for page in shown] == [0, 0] and [page.ink for page in shown] == [None, None]  # no tint either
    assert all(shown.bands for _, shown in ocr.shown_pages(derivative))
    assert flat("123-10-1003") not in seen(derivative) and flat("employment history") in seen(derivative)
    [(_, shown)] = ocr.shown_pages(corpus.build(corpus.DRAWN["value_split_across_two_images"][0]))
    assert shown.bands == 1 and "Harbor" not in shown.reading.lines  # the heading's band is not read


@READERS
@pytest.mark.parametrize(
    "case", ["vector_outlines_of_glyphs", "white_text_on_a_tight_dark_panel", "small_white_text_on_a_black_area"]
)
def test_the_second_pass_fails_a_derivative_that_shows_a_value_only_on_its_rendered_page(case):
    """A derivative whose objects spell nothing a rule matches, whose page shows a national id drawn as glyph
    outlines, or light on a dark panel that fits its text tightly (read negative), or small on a black area (no
    dark area the document draws is excused as a redaction's box): the rendered page's OCR fails it, and the
    message names the place, not the value."""
    data = corpus.build(corpus.DRAWN[case][0])
    result = _redact_pure(corpus.build(lambda pdf, page: None), remove=False)
    name = result.secret["derivative"]
    assert leaks(data, corpus.SSN) == []  # no text layer, string, stream or image holds it
    with pytest.raises(EvidenceError) as caught:
        verify_derivative({name: io.BytesIO(data)}, result)
    assert caught.value.code == ReasonCode.REDACTION_VERIFICATION_FAILED
    assert caught.value.message.endswith("rendered_page 1") and corpus.SSN not in caught.value.message


@READERS
def test_a_match_in_a_form_field_removes_its_region_and_the_value_not_every_word_the_field_shows():
    """The field's value goes and its widget's area is burned in with the match's region black: the other words
    it shows still show, and the page's own text keeps its text layer."""
    data = corpus.build(corpus.field_with_words)
    summary, derivative, verification = redacted(data)
    assert verification["passed"] and summary["removed"]["field"] == 1 and summary["burned_regions"] == {"1": 1}
    assert "burned_page" not in summary["removed"]
    after = seen(derivative)
    assert flat(corpus.SSN) not in after and flat(corpus.FIELD_WORDS) in after and leaks(derivative, corpus.SSN) == []
    assert flat("Harbor Housing") in flat(pdftotext(derivative))
    with pikepdf.open(io.BytesIO(derivative)) as pdf:
        assert all("/V" not in field and "/AP" not in field for field in pdf.Root.AcroForm.Fields)
        assert "/Annots" not in pdf.pages[0].obj or not len(pdf.pages[0].obj.Annots)


@READERS
def test_the_summary_counts_the_burned_regions_per_page_and_only_their_pages_change():
    """Three pages: outlines of a national id, nothing, a national id split across two images. The summary counts
    the words burned in per page; each page keeps its typed heading in its text layer; the same input gives the
    same bytes."""
    data = corpus.pages(
        corpus.DRAWN["vector_outlines_of_glyphs"][0],
        lambda pdf, page: None,
        corpus.DRAWN["value_split_across_two_images"][0],
    )
    summary, derivative, verification = redacted(data)
    assert verification["passed"] and summary["burned_regions"] == {"1": 1, "3": 2}
    assert "burned_page" not in summary["removed"] and leaks(derivative, corpus.SSN) == []
    assert [page.count("Harbor Housing") for page in pdftotext(derivative).split("\f")[:3]] == [1, 1, 1]
    assert redacted(data)[1] == derivative


@READERS
@pytest.mark.parametrize("turn", [90, 180, 270])
def test_a_region_on_a_turned_page_is_burned_in_where_it_shows(turn):
    """The page is rendered turned as its /Rotate says: the region is cut in the page's own space and the burned
    image, turned back, lands where the outlines were drawn, in their orientation (the black box after 'SSN')."""

    def change(pdf, page):
        corpus.DRAWN["vector_outlines_of_glyphs"][0](pdf, page)
        page.obj.Rotate = turn

    summary, derivative, verification = redacted(corpus.build(change))
    assert (
        verification["passed"] and list(summary["burned_regions"]) == ["1"] and "burned_page" not in summary["removed"]
    )
    assert flat(corpus.SSN) not in seen(derivative, (turn,)) and leaks(derivative, corpus.SSN) == []
    assert flat("Harbor Housing") in flat(pdftotext(derivative))
    outlines = corpus.text_picture(corpus.SHOWN, 60)  # drawn at (72, 600), 0.3 point a pixel
    with pikepdf.open(io.BytesIO(derivative)) as pdf:
        page = pdf.pages[0]
        [(name, image)] = page.Resources.XObject.items()
        placed = [
            [float(v) for v in operands]
            for operands, operator in pikepdf.parse_content_stream(page)
            if str(operator) == "cm" and len(operands) == 6
        ][-1]
        solid = numpy.asarray(pikepdf.PdfImage(image).as_pil_image().convert("L")) < 64
    left, top, right, bottom = outlines.point(lambda v: 255 if v < 128 else 0).getbbox()  # the outlines' ink
    assert placed == pytest.approx(
        [(right - left) * 0.3, 0, 0, (bottom - top) * 0.3, 72 + left * 0.3, 600 + (outlines.height - bottom) * 0.3],
        abs=2,
    )  # and the padded region
    assert solid[:, solid.shape[1] // 2 :].mean() > 3 * solid[:, : solid.shape[1] // 4].mean()


@READERS
def test_a_cut_that_leaves_ink_in_a_region_burns_the_whole_page(monkeypatch):
    """The safety net: were the content walk to miss what draws in a region, the cut page, rendered again, shows
    ink there, and the page is burned whole (counted), never left with the value under a box."""
    monkeypatch.setattr(redact.cut, "across", lambda walked, resources, regions, page: redact.cut.Cut())
    data = corpus.build(corpus.DRAWN["vector_outlines_of_glyphs"][0])
    summary, derivative, verification = redacted(data)
    assert verification["passed"] and summary["removed"]["burned_page"] == 1 and summary["burned_regions"] == {"1": 1}
    assert leaks(derivative, corpus.SSN) == [] and flat(corpus.SSN) not in seen(derivative)
    assert "Harbor" not in pdftotext(derivative)  # the page is its rendering now


@pytest.mark.parametrize(
    ("change", "value", "view"),
    [
        (corpus.PLACES["line_finished_after_another"][0], corpus.EMAIL, "pdfium_reading_order_text"),
        (corpus.DRAWN["drawn_glyph_by_glyph_among_another_words_glyphs"][0], corpus.SSN, "pdfium_drawing_order_text"),
        (corpus.DRAWN["hyphenated_where_its_line_wraps_in_a_field"][0], corpus.EMAIL, "rendered_page"),
    ],
)
def test_the_second_pass_reads_text_as_a_reader_joins_it_whatever_order_it_was_drawn_in(change, value, view):
    """A derivative whose text is in a font the rendered page's OCR trusts (and so skips): an e-mail address's
    line finished after another line is drawn, read whole in reading order; a national id drawn glyph by glyph
    with another word over its digits a point lower (in reading order the two interleave, with the lines joined
    the id runs into the word), read whole in drawing order joined where the glyphs meet. And an e-mail address
    hyphenated where a field's appearance wraps it, read on the rendered page with the hyphen dropped. Each fails
    the derivative, naming the view, not the value."""
    data = corpus.build(change)
    result = _redact_pure(corpus.build(lambda pdf, page: None), remove=False)
    name = result.secret["derivative"]
    with pytest.raises(EvidenceError) as caught:
        verify_derivative({name: io.BytesIO(data)}, result)
    assert caught.value.code == ReasonCode.REDACTION_VERIFICATION_FAILED
    assert f"{view} 1" in caught.value.message and value not in caught.value.message


@READERS
@pytest.mark.parametrize("case", sorted(corpus.HIDDEN))
def test_a_value_in_the_file_that_no_reader_sees_is_removed_and_passes(case):
    """Optional content off by default, clipped away, invisible text with nothing drawn, a soft mask of zero: the
    page does not show the value, its objects hold it. The first pass removes it from the objects (it is in the
    file, whatever the page shows), and the second pass, reading a page that never showed it, passes."""
    change, value = corpus.HIDDEN[case]
    data = corpus.build(change)
    assert flat(value) not in seen(data, text_layer=False) and leaks(data, value)
    summary, derivative, verification = redacted(data)
    assert verification["passed"] and summary["outcome"] == "redacted"
    assert leaks(derivative, value) == [] and flat("Harbor Housing") in seen(derivative)


@READERS
def test_text_condensed_by_its_matrix_is_read_at_its_strokes_proportions_and_burned_in():
    """Glyphs four times taller than wide (a text matrix stretched in one axis), in a font whose text layer spells
    nothing: the engine reads no word of the page as drawn, a reader reads the value (and so does the engine with
    the page widened); the passes read each region of ink where nothing was read with confidence again, scaled to
    its strokes' proportions, and the region is burned in."""
    data = corpus.build(corpus.condensed_text)
    assert flat(corpus.SSN) not in seen(data) and flat(corpus.SSN) in seen(data, text_layer=False, widen=4)
    summary, derivative, verification = redacted(data)
    assert verification["passed"] and list(summary["burned_regions"]) == ["1"]
    assert flat(corpus.SSN) not in seen(derivative, widen=4) and leaks(derivative, corpus.SSN) == []
    assert flat("Harbor Housing") in flat(pdftotext(derivative))


@READERS
@pytest.mark.parametrize("scale", [300, 400])
def test_text_stretched_very_wide_is_read_squeezed_back_and_burned_in(scale):
    """The value drawn three and four times as wide as its font (Tz), in a font whose text layer spells nothing:
    the engine reads no value on the page as drawn (at four times, its glyphs stand apart in regions of their own);
    a reader reads it, and so does the engine with the page squeezed. The passes read a doubted region's line
    across the page squeezed to its strokes' proportions, and burn the value in."""
    data = corpus.build(corpus.wide_text(scale))
    squeezed = 100 / scale
    assert flat(corpus.SSN) not in seen(data) and flat(corpus.SSN) in seen(data, text_layer=False, widen=squeezed)
    summary, derivative, verification = redacted(data)
    assert verification["passed"] and list(summary["burned_regions"]) == ["1"]
    assert flat(corpus.SSN) not in seen(derivative, widen=squeezed) and leaks(derivative, corpus.SSN) == []
    assert flat("Harbor Housing") in flat(pdftotext(derivative))


@READERS
def test_a_table_whose_rules_touch_its_text_is_read_without_them_and_its_value_burned_in():
    """A table whose rules touch its words (solid and dotted, as spreadsheets print them), in a font whose text
    layer spells nothing: the engine, reading the page with its rules, reads almost none of the table and doubts
    nothing, so the page passed as legible with the value unread. The page is read again with its rules made
    white (lines an inch long or more, thin), the value is burned in; the same table without rules reads, and in
    the derivative's rendering the value is gone and the other cells still read."""
    data = corpus.build(corpus.ruled_table())
    assert flat(corpus.SSN) not in seen(data) and flat(corpus.SSN) in seen(corpus.build(corpus.ruled_table(False)))
    summary, derivative, verification = redacted(data)
    assert verification["passed"] and summary["burned_regions"] == {"1": 1}
    [(_, image)] = list(ocr.rendered_pages(derivative))
    read = flat(ocr.read_page(image).lines)
    assert flat(corpus.SSN) not in read and flat("555-0142") in read and leaks(derivative, corpus.SSN) == []


def test_rules_are_made_white_and_glyphs_stay():
    """What is a rule: a line of ink an inch long or longer, solid or dotted, thin; not a glyph's stroke, not a
    thick bar (a black box, a panel), not light shading."""
    image = Image.new("L", (1200, 400), 255)
    draw = ImageDraw.Draw(image)
    draw.line((50, 50, 1150, 50), fill=0, width=3)  # a solid rule
    for x in range(50, 1150, 12):  # a dotted one, grey
        draw.line((x, 100, x + 9, 100), fill=166, width=2)
    draw.line((40, 40, 40, 380), fill=0, width=4)  # a rule down
    draw.rectangle((100, 200, 700, 240), fill=0)  # a black box: thicker than a rule
    draw.rectangle((100, 300, 1100, 360), fill=235)  # light shading
    draw.line((800, 150, 800, 250), fill=0, width=6)  # a stroke shorter than an inch
    pixels = numpy.asarray(ocr._unruled(image))
    assert (pixels[48:53, 50:1150] == 255).all() and (pixels[98:103, 50:1150] == 255).all()
    assert (pixels[40:380, 37:44] == 255).all()
    assert (pixels[205:235, 105:695] == 0).all() and (pixels[305:355, 105:1095] == 235).all()
    assert (pixels[150:250, 798:802] == 0).all()
    assert ocr._unruled(Image.new("L", (400, 400), 255)) is None


def test_a_doubted_word_is_explained_only_by_confident_words_that_cover_it():
    """A doubted word (a value misread) is excused from the legibility count only where words read with
    confidence in another reading cover half of it: a stray mark read with confidence across it (an 'S', a '>')
    explains nothing, and the page is not legible."""
    shown = Image.new("L", (600, 60), 255)
    doubted = ocr.Word("12B45-67B9", (100, 10, 400, 50), 30.0, 0)
    for stray in ("S", ">", "Se"):
        assert not ocr._legible([doubted], shown, [ocr.Word(stray, (150, 12, 180, 48), 90.0, 1)])
    assert ocr._legible([doubted], shown, [ocr.Word("123-45-6789", (98, 8, 402, 52), 90.0, 1)])


def test_a_value_only_the_rendered_page_shows_is_removed_from_the_objects_too():
    """The page draws a national id as glyph outlines: only the rendered page's OCR finds it, after the objects
    were searched. The document information holds the same value glued to a word (no rule matches there, the
    value's spelling does): the first pass removes it from there too, and the second pass passes."""

    def change(pdf, page):
        corpus.DRAWN["vector_outlines_of_glyphs"][0](pdf, page)
        pdf.trailer.Info = pdf.make_indirect(pikepdf.Dictionary(Keywords=pikepdf.String(f"ref{corpus.SSN}x")))

    summary, derivative, verification = redacted(corpus.build(change))
    assert verification["passed"] and summary["removed"]["metadata"] == 1 and summary["burned_regions"] == {"1": 1}
    assert leaks(derivative, corpus.SSN) == []


def test_the_derivative_holds_no_object_stream_whose_syntax_spells_a_value():
    """A value (a year the page shows) that no object of the derivative holds, but that an object stream's text
    would spell: the hex digits of a UTF-16 string (" 2019" is <0020003200300031...>, which holds "2000"). Objects
    are written outside streams, so the second pass reads them as objects and passes."""

    def change(pdf, page):
        page.obj.Contents = pdf.make_stream(corpus.HEADING + b"BT /F1 12 Tf 72 700 Td (Budget 2000) Tj ET\n")
        pdf.trailer.Info = pdf.make_indirect(pikepdf.Dictionary(Producer=pikepdf.String("Writer \u2713 2019")))

    data = corpus.build(change)
    assert b"<feff" in data.lower()  # the producer is written in hex, as UTF-16
    result = _redact_pure(data, organization=organization_template(year=r"\b2000\b"))
    derivative = result.artifacts[result.secret["derivative"]]
    verification = verify_derivative({result.secret["derivative"]: io.BytesIO(derivative)}, result)
    assert verification["passed"] and result.summary["removed"]["custom"] == 1
    assert b"/ObjStm" not in derivative and "2000" not in pdftotext(derivative)


@READERS
@pytest.mark.parametrize("turn", [0, 90])
def test_a_match_in_the_text_layer_pdfium_reads_is_a_region_where_the_page_shows_it(turn):
    """What pdfium's text layer still spells after the object-level pass (a font the walk reads as U+FFFD that
    pdfium decodes, small print OCR missed) is burned in where it is drawn: each match's characters are a region
    of the rendering's pixels, on a turned page too; painted white there, the rendering shows no value, and the
    heading still reads."""
    change = corpus.helvetica_value if not turn else corpus.on_a_turned_page(corpus.helvetica_value)
    data = corpus.build(change)
    finding = redact.Finding()
    regions = redact._text_layer_regions(data, pinned_rules(), finding)
    assert corpus.SSN in finding.values and list(regions) == [0]
    [(_, image)] = list(ocr.rendered_pages(data))
    ink = numpy.asarray(image) < ocr.INK
    assert all(ink[top:bottom, left:right].any() for left, top, right, bottom in regions[0])
    for left, top, right, bottom in regions[0]:
        image.paste(255, (left, top, right, bottom))
    read = flat(ocr.read(image).lines)
    assert flat(corpus.SSN) not in read and flat("Harbor Housing") in read


def pinned_rules():
    return Rules.of(pinned_template()["template"])
