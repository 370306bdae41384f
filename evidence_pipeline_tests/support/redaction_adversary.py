"""Documents an adversarial tenant would upload (issue 46's independent tester), beyond the planted corpus
(redaction_corpus.py, whose helpers they reuse): each shows ``SSN 123-45-6789`` to a reader in a way of its own, and
says how the reader brings it up. And that reader: poppler and Tesseract, sharing nothing with the passes but the
engine's data.

A reader brings a value up by looking at the page (pdftoppm's rendering of the media box, which pdftoppm shows, not
only the crop box), mirrored (text drawn mirrored), or in colour (each channel read apart: red on an equally dark
grey is plain in colour), or by turning every layer on in a viewer's layers panel, by printing (pdfium in print
mode), by hovering over an annotation (its rollover appearance) or by clicking a check box (its other state).
"""

from __future__ import annotations

import io
import subprocess
import tempfile
from pathlib import Path

import pikepdf
import pypdfium2
from PIL import Image, ImageDraw, ImageFont, ImageOps
from reportlab.pdfbase import pdfmetrics

from evidence_pipeline.documents.matching import flat
from evidence_pipeline.monthly.validate import PDFIUM_LOCK
from evidence_pipeline.synthetic.rental_applications import FONTS
from evidence_pipeline_tests.support import redaction_corpus as corpus
from evidence_pipeline_tests.support.redaction import pdftotext


def _cid_appearance(pdf) -> pikepdf.Stream:
    """The value in the CID font without a ToUnicode map, as an appearance 200 by 24."""
    return pdf.make_stream(
        b"BT /V1 16 Tf 2 4 Td <" + corpus.cid_codes(corpus.SHOWN).hex().encode() + b"> Tj ET",
        Type=pikepdf.Name.XObject,
        Subtype=pikepdf.Name.Form,
        BBox=[0, 0, 200, 24],
        Resources=pikepdf.Dictionary(Font=pikepdf.Dictionary(V1=corpus.cid_font(pdf, False))),
    )


def _print_state_layer(pdf, page):
    """A layer off on screen whose usage says it prints, and the print event's setting that applies it."""
    corpus.in_optional_content(False, corpus.silent_text())(pdf, page)
    [group] = pdf.Root.OCProperties.OCGs
    group.Usage = pikepdf.Dictionary(Print=pikepdf.Dictionary(PrintState=pikepdf.Name.ON))
    pdf.Root.OCProperties.D.AS = [
        pikepdf.Dictionary(Event=pikepdf.Name.Print, OCGs=[group], Category=[pikepdf.Name.Print])
    ]


def _stamp(flags: int, **appearances):
    def change(pdf, page):
        made = {key: (_cid_appearance(pdf) if value is None else value(pdf)) for key, value in appearances.items()}
        corpus.annotation(
            pdf, page, Subtype=pikepdf.Name.Stamp, Rect=[72, 600, 272, 624], F=flags, AP=pikepdf.Dictionary(**made)
        )

    return change


def _blank(pdf) -> pikepdf.Stream:
    return pdf.make_stream(b"", Type=pikepdf.Name.XObject, Subtype=pikepdf.Name.Form, BBox=[0, 0, 200, 24])


def _check_box_off_state(pdf, page):
    """A check box shown on (a black square); its off state, one click away, draws the value."""
    on = pdf.make_stream(
        b"0 g 4 4 16 16 re f", Type=pikepdf.Name.XObject, Subtype=pikepdf.Name.Form, BBox=[0, 0, 24, 24]
    )
    corpus.field(
        FT=pikepdf.Name.Btn,
        Rect=[72, 600, 272, 624],
        V=pikepdf.Name.On,
        AS=pikepdf.Name.On,
        AP=pikepdf.Dictionary(N=pikepdf.Dictionary(On=on, Off=_cid_appearance(pdf))),
    )(pdf, page)


def _outside_the_crop_box(pdf, page):
    corpus.silent_text(at=b"72 100 Td")(pdf, page)
    page.obj.CropBox = [0, 300, 612, 792]


def _image_through_glyph_clip(pdf, page):
    """The value's glyphs as a clip (rendering mode 7), a dark full-page image painted through it."""
    corpus.silent_text(before=b"q ", text_state=b"7 Tr", after=b"q 612 0 0 792 0 0 cm /Im0 Do Q Q\n")(pdf, page)
    page.obj.Resources.XObject = pikepdf.Dictionary(Im0=corpus.image_xobject(pdf, Image.new("L", (64, 64), 20)))


def _split_between_form_and_page(pdf, page):
    """``SSN 123-45-`` in a form XObject, ``6789`` on the page beside it, both in the CID font."""
    font = corpus.cid_font(pdf, False)
    form = pdf.make_stream(
        b"BT /V1 16 Tf 0 4 Td <" + corpus.cid_codes("SSN 123-45-").hex().encode() + b"> Tj ET",
        Type=pikepdf.Name.XObject,
        Subtype=pikepdf.Name.Form,
        BBox=[0, 0, 200, 24],
        Resources=pikepdf.Dictionary(Font=pikepdf.Dictionary(V1=font)),
    )
    page.obj.Resources.XObject = pikepdf.Dictionary(Fm0=form)
    page.obj.Resources.Font.V1 = font
    page.obj.Contents = pdf.make_stream(
        corpus.HEADING
        + b"q 1 0 0 1 72 600 cm /Fm0 Do Q\nBT /V1 16 Tf 171.5 604 Td <"
        + corpus.cid_codes("6789").hex().encode()
        + b"> Tj ET\n"
    )


def _helvetica(text: bytes):
    return lambda pdf, page: page.obj.__setattr__("Contents", pdf.make_stream(corpus.HEADING + text))


def _bouncing_glyphs(pdf, page):
    """Helvetica 14 (trusted: the passes read its text layer, not its pixels), every other glyph 11 points higher,
    the raised ones drawn first: neither drawing order nor lines by baseline spell the value; a reader reads one
    line (poppler and Tesseract read two)."""
    x, raised, level = 72.0, [], []
    for index, char in enumerate(corpus.SHOWN):
        up = index % 2
        (raised if up else level).append(
            b"BT /F1 14 Tf 1 0 0 1 %.2f %d Tm (%s) Tj ET\n" % (x, 600 + 11 * up, corpus.literal(char))
        )
        x += pdfmetrics.stringWidth(char, "Helvetica", 14)
    page.obj.Contents = pdf.make_stream(corpus.HEADING + b"".join(raised + level))


def _red_on_grey_image(pdf, page):
    """An RGB image (a photographed card): red text on a grey of the same level."""
    font = ImageFont.truetype(str(FONTS / "Vera.ttf"), 40)
    image = Image.new("RGB", (600, 60), (76, 76, 76))
    ImageDraw.Draw(image).text((10, 8), corpus.SHOWN, fill=(255, 0, 0), font=font)
    page.obj.Resources.XObject = pikepdf.Dictionary(Im0=corpus.image_xobject(pdf, image))
    page.obj.Contents = pdf.make_stream(corpus.HEADING + b"q 288 0 0 28.8 72 600 cm /Im0 Do Q\n")


def _ccitt_image(pdf, page):
    """The value's picture as a CCITT group 4 image (a fax, a 1-bit scan)."""
    picture = corpus.text_picture(corpus.SHOWN, 50).point(lambda v: 255 if v > 128 else 0).convert("1")
    tiff = io.BytesIO()
    picture.save(tiff, "TIFF", compression="group4")
    strip = Image.open(io.BytesIO(tiff.getvalue())).tag_v2
    start, length = strip[273][0], strip[279][0]  # the one strip's offset and byte count
    page.obj.Resources.XObject = pikepdf.Dictionary(
        Im0=pdf.make_stream(
            tiff.getvalue()[start : start + length],
            Type=pikepdf.Name.XObject,
            Subtype=pikepdf.Name.Image,
            Width=picture.width,
            Height=picture.height,
            ColorSpace=pikepdf.Name.DeviceGray,
            BitsPerComponent=1,
            Filter=pikepdf.Name.CCITTFaxDecode,
            DecodeParms=pikepdf.Dictionary(K=-1, Columns=picture.width, Rows=picture.height),
        )
    )
    placed = corpus.placement_matrix(picture, 72, 600, 72 / 150)
    page.obj.Contents = pdf.make_stream(corpus.HEADING + b"q " + placed + b" cm /Im0 Do Q\n")


# each: (change, how a reader brings the value up)
CASES = {
    "red_on_a_grey_of_the_same_level": (
        corpus.silent_text(before=b"0.298 g 60 590 260 36 re f ", text_state=b"1 0 0 rg"),
        "colour",
    ),
    "red_on_a_grey_of_the_same_level_in_an_rgb_image": (_red_on_grey_image, "colour"),
    "light_yellow_on_white": (corpus.silent_text(text_state=b"1 1 0.5 rg"), "colour"),
    "ccitt_group_4_image": (_ccitt_image, "page"),
    "black_on_a_light_grey_panel": (
        corpus.silent_text(before=b"0.7 g 60 590 260 36 re f ", text_state=b"0 g"),
        "page",
    ),
    "layer_off_on_screen": (corpus.in_optional_content(False, corpus.silent_text()), "layers"),
    "layer_off_on_screen_that_prints": (_print_state_layer, "print"),
    "annotation_that_prints_and_is_not_shown": (_stamp(4 | 32, N=None), "print"),
    "annotation_rollover_appearance": (_stamp(4, N=_blank, R=None), "rollover"),
    "check_box_off_state": (_check_box_off_state, "state"),
    "outside_the_crop_box_inside_the_media_box": (_outside_the_crop_box, "page"),
    "image_painted_through_a_glyph_clip": (_image_through_glyph_clip, "page"),
    "split_between_a_form_xobject_and_the_page": (_split_between_form_and_page, "page"),
    "mirrored_helvetica": (
        _helvetica(b"BT /F1 14 Tf -1 0 0 1 300 600 Tm (" + corpus.SHOWN.encode() + b") Tj ET\n"),
        "mirror",
    ),
    "one_point_helvetica_scaled_by_the_ctm": (
        _helvetica(b"q 14 0 0 14 72 600 cm BT /F1 1 Tf 0 0 Td (" + corpus.SHOWN.encode() + b") Tj ET Q\n"),
        "page",
    ),
    "winansi_soft_hyphen_bytes_drawn_as_hyphens": (
        _helvetica(b"BT /F1 14 Tf 72 600 Td (" + corpus.SHOWN.replace("-", "\xad").encode("latin-1") + b") Tj ET\n"),
        "page",
    ),
    "bouncing_helvetica_glyphs_drawn_out_of_order": (_bouncing_glyphs, "page"),
}


VIEWS = ("page", "colour", "layers", "print", "rollover", "state")  # every way a reader brings a page up


def shown(data: bytes, way: str) -> str:
    """What a reader reads of ``data`` brought up ``way`` (and pdftotext), squeezed (flat)."""
    if way == "print":
        images = list(_pdfium_printed(data))
    else:
        changed = {"layers": _every_layer_on, "rollover": _rollover, "state": _other_state}.get(way, lambda d: d)
        images = list(_pdftoppm(changed(data)))
    if way == "mirror":  # as a reader reads text drawn mirrored (or its reflection)
        images = [ImageOps.mirror(image) for image in images]
    read = []
    for image in images:
        if way == "colour":
            read += [image.getchannel(channel) for channel in "RGB"]
        else:
            grey = image.convert("L")  # and in black and white: the engine takes a flat tint for a picture
            read += [grey, grey.point(lambda v: 255 if v >= 128 else 0)]
    return flat("\n".join([pdftotext(data), *map(_tesseract, read)]))


def _pdftoppm(data: bytes):
    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run(["pdftoppm", "-r", "300", "-png", "-", f"{scratch}/page"], input=data, check=True)
        for path in sorted(Path(scratch).glob("page*.png")):
            yield Image.open(path).convert("RGB")


def _pdfium_printed(data: bytes):
    with PDFIUM_LOCK:
        document = pypdfium2.PdfDocument(data)
        try:
            document.init_forms()
            images = [
                page.render(scale=300 / 72, optimize_mode="print", draw_annots=True).to_pil().convert("RGB")
                for page in document
            ]
        finally:
            document.close()
    return images


def _tesseract(image: Image.Image) -> str:
    with tempfile.NamedTemporaryFile(suffix=".png") as file:
        image.save(file.name)
        return subprocess.run(
            ["tesseract", file.name, "-", "--psm", "3"],
            text=True,
            capture_output=True,
            env={"OMP_THREAD_LIMIT": "1", "PATH": "/usr/bin:/bin"},
        ).stdout


def _changed(data: bytes, change) -> bytes:
    with pikepdf.open(io.BytesIO(data)) as pdf:
        change(pdf)
        out = io.BytesIO()
        pdf.save(out)
        return out.getvalue()


def _every_layer_on(data: bytes) -> bytes:
    """As a viewer's layers panel shows every layer turned on."""

    def change(pdf):
        properties = pdf.Root.get("/OCProperties")
        if properties is not None:
            properties.D.ON = properties.OCGs
            for key in ("/OFF", "/AS"):
                if key in properties.D:
                    del properties.D[key]

    return _changed(data, change)


def _annotations(pdf):
    return [annot for page in pdf.pages for annot in page.obj.get("/Annots", []) if "/AP" in annot]


def _rollover(data: bytes) -> bytes:
    """As a viewer shows each annotation while the pointer is over it."""

    def change(pdf):
        for annot in _annotations(pdf):
            if "/R" in annot.AP:
                annot.AP.N = annot.AP.R

    return _changed(data, change)


def _other_state(data: bytes) -> bytes:
    """As a viewer shows each check box clicked: its other state."""

    def change(pdf):
        for annot in _annotations(pdf):
            states = annot.AP.N
            if not isinstance(states, pikepdf.Stream):
                others = [key for key in states.keys() if key != str(annot.get("/AS"))]
                annot.AS = pikepdf.Name(others[0]) if others else annot.get("/AS")

    return _changed(data, change)
