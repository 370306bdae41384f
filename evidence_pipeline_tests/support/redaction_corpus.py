"""A corpus of applications that hide a value the template names in one place of the PDF, or in one spelling each:
built deterministically with pikepdf (and PIL for pictures), one small document per case.

Every case starts from the same one-page typed application and plants EMAIL (matched by the organization
template's e-mail rule) or SSN (its national-id rule) in exactly one place or spelling; a case's document holds the
value nowhere else unless its name says so. ``PLACES`` enumerates the string-bearing places of the PDF
specification, ``SPELLINGS`` the normalizations, ``PICTURES`` text inside images.
"""

from __future__ import annotations

import io
import urllib.parse
import zlib

import numpy
import pikepdf
from PIL import Image, ImageChops, ImageDraw, ImageFilter, ImageFont
from reportlab.pdfbase import pdfmetrics

from evidence_pipeline.synthetic.rental_applications import FONTS

EMAIL = "m.holloway@example.net"
SSN = "123-45-6789"
SCAN_LINES = ("Applicant: Mr Sample Person", f"SSN {SSN}", "Monthly rent budget 900")


def _base() -> pikepdf.Pdf:
    pdf = pikepdf.new()
    pdf.add_blank_page(page_size=(612, 792))
    page = pdf.pages[0]
    page.obj.Resources = pikepdf.Dictionary(
        Font=pikepdf.Dictionary(
            F1=pdf.make_indirect(
                pikepdf.Dictionary(
                    Type=pikepdf.Name.Font,
                    Subtype=pikepdf.Name.Type1,
                    BaseFont=pikepdf.Name.Helvetica,
                    Encoding=pikepdf.Name.WinAnsiEncoding,
                )
            )
        )
    )
    page.obj.Contents = pdf.make_stream(b"BT /F1 12 Tf 72 740 Td (Rental application, Harbor Housing) Tj ET\n")
    return pdf


def _saved(pdf: pikepdf.Pdf) -> bytes:
    out = io.BytesIO()
    pdf.save(out, deterministic_id=True, compress_streams=False, fix_metadata_version=False)
    return out.getvalue()


def _with(change) -> bytes:
    pdf = _base()
    change(pdf, pdf.pages[0])
    return _saved(pdf)


def annotation(pdf, page, **entries) -> pikepdf.Dictionary:
    annot = pdf.make_indirect(pikepdf.Dictionary(Type=pikepdf.Name.Annot, **{"Rect": [72, 600, 272, 620], **entries}))
    page.obj.Annots = pdf.make_indirect(pikepdf.Array([*page.obj.get("/Annots", []), annot]))
    return annot


def _text_annotation(key: str, value: pikepdf.Object):
    return lambda pdf, page: annotation(pdf, page, Subtype=pikepdf.Name.Text, **{key: value})


def _link(action: pikepdf.Dictionary, key: str = "A"):
    return lambda pdf, page: annotation(pdf, page, Subtype=pikepdf.Name.Link, **{key: action})


def _uri(uri: str) -> pikepdf.Dictionary:
    return pikepdf.Dictionary(S=pikepdf.Name.URI, URI=pikepdf.String(uri))


def field(**entries):
    def change(pdf, page):
        widget = annotation(
            pdf, page, Subtype=pikepdf.Name.Widget, T=pikepdf.String("contact"), **{"FT": pikepdf.Name.Tx, **entries}
        )
        pdf.Root.AcroForm = pikepdf.Dictionary(Fields=[widget])

    return change


def _page_font_appearance(pdf, page, content: bytes, width: float) -> pikepdf.Dictionary:
    """An /AP of one normal appearance, ``width`` by 20, drawing ``content`` with the page's fonts."""
    appearance = pdf.make_stream(
        content,
        Type=pikepdf.Name.XObject,
        Subtype=pikepdf.Name.Form,
        BBox=[0, 0, width, 20],
        Resources=page.obj.Resources,
    )
    return pikepdf.Dictionary(N=appearance)


def _field_appearance(pdf, page):
    field(AP=_page_font_appearance(pdf, page, b"BT /F1 10 Tf 2 5 Td (" + EMAIL.encode() + b") Tj ET", 200))(pdf, page)


def catalog(**entries):
    def change(pdf, page):
        for key, value in entries.items():
            pdf.Root[f"/{key}"] = value

    return change


def xmp(body: str):
    packet = (
        '<?xpacket begin="" id="W5M0MpCehiHzreSzNTczkc9d"?><x:xmpmeta xmlns:x="adobe:ns:meta/">'
        '<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"><rdf:Description rdf:about="" '
        f'xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:source>{body}</dc:source></rdf:Description>'
        '</rdf:RDF></x:xmpmeta><?xpacket end="w"?>'
    ).encode()
    return lambda pdf, page: pdf.Root.__setattr__(
        "Metadata", pdf.make_stream(packet, Type=pikepdf.Name.Metadata, Subtype=pikepdf.Name.XML)
    )


def _page_metadata(pdf, page):
    page.obj.Metadata = pdf.make_stream(
        f"<x:xmpmeta><dc:source>{EMAIL}</dc:source></x:xmpmeta>".encode(),
        Type=pikepdf.Name.Metadata,
        Subtype=pikepdf.Name.XML,
    )


def _outline(pdf, page):
    item = pdf.make_indirect(pikepdf.Dictionary(Title=pikepdf.String("Contact"), A=_uri(f"mailto:{EMAIL}")))
    outlines = pdf.make_indirect(pikepdf.Dictionary(Type=pikepdf.Name.Outlines, First=item, Last=item, Count=1))
    item.Parent = outlines
    pdf.Root.Outlines = outlines


def _name_tree(tree: str, key: pikepdf.String, value):
    def change(pdf, page):
        pdf.Root.Names = pikepdf.Dictionary({f"/{tree}": pikepdf.Dictionary(Names=[key, value])})

    return change


def _marked_content(key: str):
    def change(pdf, page):
        page.obj.Contents = pdf.make_stream(
            b"/Span << /" + key.encode() + b" (" + EMAIL.encode() + b") >> BDC BT /F1 12 Tf 72 740 Td "
            b"(Rental application, Harbor Housing) Tj ET EMC\n"
        )

    return change


def _property_list(pdf, page):
    page.obj.Resources.Properties = pikepdf.Dictionary(MC0=pikepdf.Dictionary(ActualText=pikepdf.String(EMAIL)))
    page.obj.Contents = pdf.make_stream(b"/Span /MC0 BDC BT /F1 12 Tf 72 740 Td (Rental application) Tj ET EMC\n")


def _structure(pdf, page):
    element = pdf.make_indirect(
        pikepdf.Dictionary(
            Type=pikepdf.Name.StructElem, S=pikepdf.Name.P, Pg=page.obj, Alt=pikepdf.String(f"Contact {EMAIL}"), K=0
        )
    )
    pdf.Root.StructTreeRoot = pdf.make_indirect(pikepdf.Dictionary(Type=pikepdf.Name.StructTreeRoot, K=[element]))
    element.P = pdf.Root.StructTreeRoot
    pdf.Root.MarkInfo = pikepdf.Dictionary(Marked=True)


def _optional_content(pdf, page):
    group = pdf.make_indirect(pikepdf.Dictionary(Type=pikepdf.Name.OCG, Name=pikepdf.String(f"Layer of {EMAIL}")))
    pdf.Root.OCProperties = pikepdf.Dictionary(OCGs=[group], D=pikepdf.Dictionary(ON=[group]))


def _page_text(text: bytes):
    def change(pdf, page):
        page.obj.Contents = pdf.make_stream(b"BT /F1 12 Tf 72 740 Td (Rental application) Tj ET\n" + text)

    return change


def _reversed_glyphs(pdf, page):
    """One line drawn glyph by glyph from its last character to its first."""
    text = f"Email: {EMAIL}"
    x, positions = 72.0, []
    for char in text:
        positions.append((x, char))
        x += pdfmetrics.stringWidth(char, "Helvetica", 12)
    ops = b"".join(b"BT /F1 12 Tf %.1f 700 Td (%s) Tj ET\n" % (px, literal(c)) for px, c in reversed(positions))
    page.obj.Contents = pdf.make_stream(b"BT /F1 12 Tf 72 740 Td (Rental application) Tj ET\n" + ops)


def _line_finished_after_another(pdf, page):
    """An e-mail address's line begun, another line drawn below it, then the address's line finished: text in
    drawing order reads the other line between the address's halves."""
    head, tail = f"Email: {EMAIL[:11]}", EMAIL[11:]
    x = 72 + pdfmetrics.stringWidth(head, "Helvetica", 12)
    page.obj.Contents = pdf.make_stream(
        b"BT /F1 12 Tf 72 700 Td (%s) Tj ET\nBT /F1 12 Tf 72 650 Td (Reference 42) Tj ET\n"
        b"BT /F1 12 Tf %.2f 700 Td (%s) Tj ET\n" % (head.encode(), x, tail.encode())
    )


def literal(char: str) -> bytes:
    data = char.encode("cp1252")
    return b"\\" + data if data in (b"(", b")", b"\\") else data


def _appended(first: bytes) -> bytes:
    reader = pikepdf.open(io.BytesIO(first))
    size = len(reader.objects) + 1
    root = reader.Root.objgen[0]
    startxref = int(first.rsplit(b"startxref", 1)[1].split()[0])
    body = b"%d 0 obj\n<< /Title (Application) >>\nendobj\n" % size
    offset = len(first)
    xref = offset + len(body)
    tail = b"xref\n0 1\n0000000000 65535 f \n%d 1\n%010d 00000 n \n" % (
        size,
        offset,
    ) + b"trailer\n<< /Size %d /Root %d 0 R /Info %d 0 R /Prev %d >>\nstartxref\n%d\n%%%%EOF\n" % (
        size + 1,
        root,
        size,
        startxref,
        xref,
    )
    return first + body + tail


# -- pictures ----------------------------------------------------------------------------------------------------


def scan_image(lines=SCAN_LINES, size=(1275, 1650), turn: float = 0, blur: float = 0) -> Image.Image:
    """A page photographed or scanned at 150 dpi: lines of 30-pixel text, turned ``turn`` degrees (counter-clockwise)
    and blurred ``blur`` pixels."""
    image = Image.new("L", size, 255)
    draw = ImageDraw.Draw(image)
    font = ImageFont.truetype(str(FONTS / "Vera.ttf"), 30)
    for number, line in enumerate(lines):
        draw.text((110, 140 + 60 * number), line, fill=0, font=font)
    if turn:
        image = image.rotate(turn, expand=True, fillcolor=255)
    return image.filter(ImageFilter.GaussianBlur(blur)) if blur else image


def image_xobject(pdf, image: Image.Image, jpeg: bool = False) -> pikepdf.Stream:
    """``image`` (grey or RGB) as an image XObject, JPEG-compressed or lossless."""
    colour_space = pikepdf.Name.DeviceRGB if image.mode == "RGB" else pikepdf.Name.DeviceGray
    if jpeg:
        data = io.BytesIO()
        image.save(data, "JPEG", quality=85)
        return pdf.make_stream(
            data.getvalue(),
            Type=pikepdf.Name.XObject,
            Subtype=pikepdf.Name.Image,
            Width=image.width,
            Height=image.height,
            ColorSpace=colour_space,
            BitsPerComponent=8,
            Filter=pikepdf.Name.DCTDecode,
        )
    return pdf.make_stream(
        zlib.compress(image.tobytes()),
        Type=pikepdf.Name.XObject,
        Subtype=pikepdf.Name.Image,
        Width=image.width,
        Height=image.height,
        ColorSpace=colour_space,
        BitsPerComponent=8,
        Filter=pikepdf.Name.FlateDecode,
    )


def drawn_picture(image: Image.Image, placement: bytes, text: bytes = b"", jpeg: bool = False):
    def change(pdf, page):
        page.obj.Resources.XObject = pikepdf.Dictionary(Im0=image_xobject(pdf, image, jpeg))
        page.obj.Contents = pdf.make_stream(b"q " + placement + b" cm /Im0 Do Q\n" + text)

    return change


FULL_PAGE = b"612 0 0 792 0 0"
TYPED = b"BT /F1 12 Tf 72 740 Td (Rental application: identity document below) Tj ET\n"
# an invisible text layer (rendering mode 3), as OCR software writes over a scan
OCR_LAYER = b"BT 3 Tr /F1 12 Tf 53 700 Td (SSN " + SSN.encode() + b") Tj ET\n"

PLACES = {
    "page_text": (_page_text(b"BT /F1 12 Tf 72 700 Td (Email: " + EMAIL.encode() + b") Tj ET\n"), EMAIL),
    "annotation_contents": (_text_annotation("Contents", pikepdf.String(f"Call {EMAIL}")), EMAIL),
    "annotation_title": (_text_annotation("T", pikepdf.String(EMAIL)), EMAIL),
    "annotation_rich_text": (_text_annotation("RC", pikepdf.String(f"<body><p>{EMAIL}</p></body>")), EMAIL),
    "annotation_subject": (_text_annotation("Subj", pikepdf.String(EMAIL)), EMAIL),
    "link_uri": (_link(_uri(f"mailto:{EMAIL}")), EMAIL),
    "link_uri_and_page_text": (
        lambda pdf, page: (
            _page_text(b"BT /F1 12 Tf 72 610 Td (" + EMAIL.encode() + b") Tj ET\n")(pdf, page),
            _link(_uri(f"mailto:{EMAIL}"))(pdf, page),
        ),
        EMAIL,
    ),
    "link_next_chain": (
        _link(
            pikepdf.Dictionary(
                S=pikepdf.Name.Named,
                N=pikepdf.Name.NextPage,
                Next=[_uri("https://example.invalid/"), _uri(f"mailto:{EMAIL}")],
            )
        ),
        EMAIL,
    ),
    "annotation_additional_actions": (_link(pikepdf.Dictionary(E=_uri(f"mailto:{EMAIL}")), key="AA"), EMAIL),
    "launch_file": (_link(pikepdf.Dictionary(S=pikepdf.Name.Launch, F=pikepdf.String(f"{SSN}.pdf"))), SSN),
    "goto_remote": (
        _link(
            pikepdf.Dictionary(
                S=pikepdf.Name.GoToR,
                F=pikepdf.Dictionary(Type=pikepdf.Name.Filespec, F=pikepdf.String(f"records/{SSN}.pdf")),
                D=[0, pikepdf.Name.Fit],
            )
        ),
        SSN,
    ),
    "goto_embedded": (
        _link(
            pikepdf.Dictionary(
                S=pikepdf.Name.GoToE,
                D=pikepdf.String(SSN),
                T=pikepdf.Dictionary(R=pikepdf.Name.C, N=pikepdf.String("a")),
            )
        ),
        SSN,
    ),
    "submit_form_url": (
        _link(
            pikepdf.Dictionary(
                S=pikepdf.Name.SubmitForm,
                F=pikepdf.Dictionary(
                    FS=pikepdf.Name.URL, F=pikepdf.String(f"https://example.invalid/submit?to={EMAIL}")
                ),
            )
        ),
        EMAIL,
    ),
    "javascript_action": (
        _link(pikepdf.Dictionary(S=pikepdf.Name.JavaScript, JS=pikepdf.String(f"app.alert('{EMAIL}');"))),
        EMAIL,
    ),
    "open_action_javascript_stream": (
        lambda pdf, page: pdf.Root.__setattr__(
            "OpenAction",
            pikepdf.Dictionary(S=pikepdf.Name.JavaScript, JS=pdf.make_stream(f"var contact = '{EMAIL}';".encode())),
        ),
        EMAIL,
    ),
    "page_additional_actions": (
        lambda pdf, page: page.obj.__setattr__("AA", pikepdf.Dictionary(O=_uri(f"mailto:{EMAIL}"))),
        EMAIL,
    ),
    "field_value": (field(V=pikepdf.String(EMAIL)), EMAIL),
    "field_default_value": (field(DV=pikepdf.String(EMAIL)), EMAIL),
    "field_tooltip": (field(TU=pikepdf.String(f"Write to {EMAIL}")), EMAIL),
    "field_mapping_name": (field(TM=pikepdf.String(EMAIL)), EMAIL),
    "field_options": (field(FT=pikepdf.Name.Ch, Opt=[pikepdf.String("none"), pikepdf.String(EMAIL)]), EMAIL),
    "field_appearance": (_field_appearance, EMAIL),
    "document_information": (
        lambda pdf, page: pdf.trailer.__setattr__(
            "Info", pdf.make_indirect(pikepdf.Dictionary(Author=pikepdf.String(EMAIL)))
        ),
        EMAIL,
    ),
    "catalog_xmp": (xmp(EMAIL), EMAIL),
    "page_xmp": (_page_metadata, EMAIL),
    "outline_action": (_outline, EMAIL),
    "named_destination": (_name_tree("Dests", pikepdf.String(EMAIL), pikepdf.Array([0, pikepdf.Name.Fit])), EMAIL),
    "javascript_name_tree": (
        _name_tree(
            "JavaScript",
            pikepdf.String("init"),
            pikepdf.Dictionary(S=pikepdf.Name.JavaScript, JS=pikepdf.String(f"var c = '{EMAIL}';")),
        ),
        EMAIL,
    ),
    "page_label": (
        catalog(
            PageLabels=pikepdf.Dictionary(Nums=[0, pikepdf.Dictionary(S=pikepdf.Name.D, P=pikepdf.String(f"{SSN}-"))])
        ),
        SSN,
    ),
    "optional_content_name": (_optional_content, EMAIL),
    "marked_content_actual_text": (_marked_content("ActualText"), EMAIL),
    "marked_content_alt": (_marked_content("Alt"), EMAIL),
    "marked_content_expansion": (_marked_content("E"), EMAIL),
    "marked_content_property_list": (_property_list, EMAIL),
    "structure_tree_alt": (_structure, EMAIL),
    "attachment": (
        lambda pdf, page: pdf.attachments.__setitem__(
            "note.txt", pikepdf.AttachedFileSpec(pdf, f"write to {EMAIL}".encode(), mime_type="text/plain")
        ),
        EMAIL,
    ),
    "associated_file": (
        lambda pdf, page: pdf.Root.__setattr__(
            "AF",
            pikepdf.Array(
                [
                    pdf.make_indirect(
                        pikepdf.Dictionary(
                            Type=pikepdf.Name.Filespec,
                            F=pikepdf.String("a.txt"),
                            EF=pikepdf.Dictionary(F=pdf.make_stream(EMAIL.encode(), Type=pikepdf.Name.EmbeddedFile)),
                        )
                    )
                ]
            ),
        ),
        EMAIL,
    ),
    "reversed_drawing_order": (_reversed_glyphs, EMAIL),
    "line_finished_after_another": (_line_finished_after_another, EMAIL),
    "name_as_a_key": (catalog(Dests=pikepdf.Dictionary({"/" + EMAIL: pikepdf.Array([0, pikepdf.Name.Fit])})), EMAIL),
    "name_as_a_value": (lambda pdf, page: page.obj.__setattr__("Tag", pikepdf.Name("/" + EMAIL)), EMAIL),
    "content_comment": (_page_text(b"% contact " + EMAIL.encode() + b"\n"), EMAIL),
}


def _annotation_bytes(data: bytes):
    return _text_annotation("Contents", pikepdf.String(data))


SPELLINGS = {
    "octal_escapes": (_annotation_bytes(EMAIL.replace("@", "\100").encode()), EMAIL),
    "hex_string": (
        lambda pdf, page: annotation(pdf, page, Subtype=pikepdf.Name.Text, Contents=pikepdf.String(EMAIL.encode())),
        EMAIL,
    ),
    "pdfdoc_encoding": (_annotation_bytes(b"Ref \x93 " + SSN.encode()), SSN),  # 0x93 is the fi ligature
    "utf16_be_bom": (_annotation_bytes(b"\xfe\xff" + EMAIL.encode("utf-16-be")), EMAIL),
    "utf16_le_bom": (_annotation_bytes(b"\xff\xfe" + EMAIL.encode("utf-16-le")), EMAIL),
    "xml_character_references": (xmp(EMAIL.replace("@", "&#64;").replace(".", "&#x2E;")), EMAIL),
    "xml_entities": (xmp(EMAIL.replace("@", "&#64;").replace("m.", "m&#46;")), EMAIL),
    "percent_encoding": (_link(_uri("mailto:" + urllib.parse.quote(EMAIL, safe=""))), EMAIL),
    "nfkc_full_width": (_annotation_bytes(b"\xfe\xff" + "ＳＳＮ １２３-４５-６７８９".encode("utf-16-be")), SSN),
    "ligature": (_annotation_bytes(b"\xfe\xff" + "m.holloway@example.net ﬁle".encode("utf-16-be")), EMAIL),
    "soft_hyphen": (_annotation_bytes(b"\xfe\xff" + "m.hollo\u00adway@exam\u00adple.net".encode("utf-16-be")), EMAIL),
    "zero_width": (
        _annotation_bytes(b"\xfe\xff" + "m.hol\u200blo\u200dway@example.\u2060net".encode("utf-16-be")),
        EMAIL,
    ),
    "across_runs_and_lines": (
        _page_text(b"BT /F1 12 Tf 72 700 Td (Email: m.hollo) Tj (way@exa) Tj 0 -14 Td (mple.net) Tj ET\n"),
        EMAIL,
    ),
}

PICTURES = {
    "scan_with_ocr_layer": (drawn_picture(scan_image(), FULL_PAGE, OCR_LAYER), SSN),
    "scan_without_text": (drawn_picture(scan_image(), FULL_PAGE), SSN),
    "scan_jpeg": (drawn_picture(scan_image(), FULL_PAGE, jpeg=True), SSN),
    "photographed_id_in_typed_page": (drawn_picture(scan_image(size=(900, 300)), b"300 0 0 100 72 560", TYPED), SSN),
    "scan_turned_sideways": (drawn_picture(scan_image(turn=90), FULL_PAGE), SSN),
    "scan_upside_down": (drawn_picture(scan_image(turn=180), FULL_PAGE), SSN),
    "scan_skewed": (drawn_picture(scan_image(turn=3), FULL_PAGE), SSN),
}


def build(change) -> bytes:
    return _with(lambda pdf, page: change(pdf, page))


def earlier_revision_info() -> tuple[bytes, str]:
    return _appended(
        _with(
            lambda pdf, page: pdf.trailer.__setattr__(
                "Info", pdf.make_indirect(pikepdf.Dictionary(Author=pikepdf.String(EMAIL)))
            )
        )
    ), EMAIL


def illegible_scan() -> bytes:
    """A scan whose text a reader can make out but the engine cannot: a blurred photograph."""
    return build(drawn_picture(scan_image(blur=3.0), FULL_PAGE))


def page_outside_the_tree() -> bytes:
    """The typed page, and a bookmark whose destination is a page the page tree no longer holds (its page deleted,
    the bookmark left), drawing that illegible scan: no reader shows it, yet its content is in the file."""
    pdf = _base()
    scan = pdf.make_indirect(
        pikepdf.Dictionary(
            Type=pikepdf.Name.Page,
            MediaBox=[0, 0, 612, 792],
            Resources=pikepdf.Dictionary(XObject=pikepdf.Dictionary(Im0=image_xobject(pdf, scan_image(blur=3.0)))),
            Contents=pdf.make_stream(b"q " + FULL_PAGE + b" cm /Im0 Do Q\n"),
        )
    )
    item = pdf.make_indirect(pikepdf.Dictionary(Title=pikepdf.String("Scan"), Dest=[scan, pikepdf.Name.Fit]))
    pdf.Root.Outlines = pdf.make_indirect(
        pikepdf.Dictionary(Type=pikepdf.Name.Outlines, First=item, Last=item, Count=1)
    )
    item.Parent = pdf.Root.Outlines
    return _saved(pdf)


# -- drawings: the value shown on the rendered page by any means of drawing, none of which spells it as text -------

SHOWN = f"SSN {SSN}"
HEADING = b"BT /F1 12 Tf 72 740 Td (Rental application, Harbor Housing) Tj ET\n"


def _helvetica(**entries) -> pikepdf.Dictionary:
    return pikepdf.Dictionary(
        Type=pikepdf.Name.Font, Subtype=pikepdf.Name.Type1, BaseFont=pikepdf.Name.Helvetica, **entries
    )


# codes A, B, C ... drawing "0123456789-SN " through glyph names: the bytes shown spell no digit, no SSN
_CIPHER_GLYPHS = [
    "/zero",
    "/one",
    "/two",
    "/three",
    "/four",
    "/five",
    "/six",
    "/seven",
    "/eight",
    "/nine",
    "/hyphen",
    "/S",
    "/N",
    "/space",
]
_CIPHER_CHARS = "0123456789-SN "


def _cipher_font(pdf) -> pikepdf.Object:
    return pdf.make_indirect(
        _helvetica(
            Encoding=pikepdf.Dictionary(
                Type=pikepdf.Name.Encoding, Differences=[65, *map(pikepdf.Name, _CIPHER_GLYPHS)]
            )
        )
    )


def _ciphered(text: str) -> bytes:
    return bytes(65 + _CIPHER_CHARS.index(char) for char in text)


def text_picture(text: str, height: int, turn: float = 0) -> Image.Image:
    """``text`` in black on white, its glyphs ``height`` * 0.8 pixels tall, turned ``turn`` degrees."""
    font = ImageFont.truetype(str(FONTS / "Vera.ttf"), max(1, round(height * 0.8)))
    left, top, right, bottom = font.getbbox(text)
    image = Image.new("L", (right + 2 * max(2, height // 4), height), 255)
    ImageDraw.Draw(image).text((max(2, height // 4), (height - (bottom + top)) // 2), text, fill=0, font=font)
    return image.rotate(turn, expand=True, fillcolor=255) if turn else image


def _pictures(*placed: tuple[Image.Image, bytes]):
    """Images drawn where each placement (a cm matrix) says, under the typed heading."""

    def change(pdf, page):
        page.obj.Resources.XObject = pikepdf.Dictionary(
            {f"/Im{i}": image_xobject(pdf, image) for i, (image, _) in enumerate(placed)}
        )
        drawn = b"".join(b"q %s cm /Im%d Do Q\n" % (matrix, i) for i, (_, matrix) in enumerate(placed))
        page.obj.Contents = pdf.make_stream(HEADING + drawn)

    return change


def placement_matrix(image: Image.Image, x: float, y: float, scale: float) -> bytes:
    return b"%.2f 0 0 %.2f %.2f %.2f" % (image.width * scale, image.height * scale, x, y)


def _tiny_image_drawn_large(pdf, page):
    image = text_picture(SHOWN, 15)
    _pictures((image, placement_matrix(image, 72, 600, 4 * 72 / 150)))(pdf, page)


def _split_across_images(pdf, page):
    """Each half in its own image, the second's white margin over the first's."""
    first, second = text_picture("SSN 123-45-", 40), text_picture("6789", 40)
    scale = 72 / 150
    _pictures(
        (first, placement_matrix(first, 72, 600, scale)),
        (second, placement_matrix(second, 72 + (first.width - 10) * scale, 600, scale)),
    )(pdf, page)


def _turned(angle: float):
    def change(pdf, page):
        image = text_picture(SHOWN, 50, angle)
        _pictures((image, placement_matrix(image, 100, 400, 72 / 150)))(pdf, page)

    return change


def _dark_runs(image: Image.Image):
    """(start, end, row) of each run of dark pixels in each row of ``image``."""
    pixels = image.load()
    for y in range(image.height):
        x = 0
        while x < image.width:
            if pixels[x, y] < 128:
                start = x
                while x < image.width and pixels[x, y] < 128:
                    x += 1
                yield start, x, y
            x += 1


def _vector_outlines(pdf, page):
    """The glyphs as filled paths, no text and no image: each row of a 24-pixel rendering, run by run."""
    picture = text_picture(SHOWN, 60)
    scale = 0.3
    paths = [
        b"%.2f %.2f %.2f %.2f re"
        % (72 + start * scale, 600 + (picture.height - y - 1) * scale, (end - start) * scale, scale)
        for start, end, y in _dark_runs(picture)
    ]
    page.obj.Contents = pdf.make_stream(HEADING + b"0 g\n" + b"\n".join(paths) + b"\nf\n")


def _tiling_pattern(pdf, page):
    """A tiling pattern whose cell shows the value through a font whose /Differences make its bytes spell none."""
    cell = pdf.make_stream(
        b"BT /C1 14 Tf 4 12 Td (" + _ciphered(SHOWN) + b") Tj ET",
        Type=pikepdf.Name.Pattern,
        PatternType=1,
        PaintType=1,
        TilingType=1,
        BBox=[0, 0, 200, 40],
        XStep=200,
        YStep=40,
        Matrix=[1, 0, 0, 1, 72, 600],
        Resources=pikepdf.Dictionary(Font=pikepdf.Dictionary(C1=_cipher_font(pdf))),
    )
    page.obj.Resources.Pattern = pikepdf.Dictionary(P0=cell)
    page.obj.Contents = pdf.make_stream(HEADING + b"/Pattern cs /P0 scn 72 600 200 40 re f\n")


def page_text_through_cipher(pdf, page):
    """Page text in a font whose /Differences name the glyphs and that has no ToUnicode map."""
    page.obj.Resources.Font.C1 = _cipher_font(pdf)
    page.obj.Contents = pdf.make_stream(HEADING + b"BT /C1 12 Tf 72 700 Td (" + _ciphered(SHOWN) + b") Tj ET\n")


def _appearance(pdf, text: bytes, font, width: float) -> pikepdf.Stream:
    return pdf.make_stream(
        b"BT /A1 14 Tf 2 6 Td (" + text + b") Tj ET",
        Type=pikepdf.Name.XObject,
        Subtype=pikepdf.Name.Form,
        BBox=[0, 0, width, 24],
        Resources=pikepdf.Dictionary(Font=pikepdf.Dictionary(A1=font)),
    )


def _free_text_halves(pdf, page):
    """Two FreeText annotations side by side, each with half the value in its contents and its appearance."""
    font = pdf.make_indirect(_helvetica())
    for text, x, width in ((b"SSN 123-45-", 72, 86), (b"6789", 157, 40)):
        annot = annotation(
            pdf,
            page,
            Subtype=pikepdf.Name.FreeText,
            Contents=pikepdf.String(text.decode()),
            DA=pikepdf.String("/Helv 14 Tf 0 g"),
            Rect=[x, 600, x + width, 624],
        )
        annot.AP = pikepdf.Dictionary(N=_appearance(pdf, text, font, width))


def _widget_cipher_appearance(pdf, page):
    """A text field whose value says nothing, and whose appearance shows the value through a custom encoding."""
    field(
        Rect=[72, 600, 272, 624],
        V=pikepdf.String("see appearance"),
        AP=pikepdf.Dictionary(N=_appearance(pdf, _ciphered(SHOWN), _cipher_font(pdf), 200)),
    )(pdf, page)


def _lying_to_unicode(base_font: str):
    """Page text in a base-14 font, not embedded, whose ToUnicode map says each digit is a letter: the text layer
    spells no number while the page draws the value (named Helvetica, it shares its name with the heading's font)."""
    lies = b"".join(b"<%02X> <%04X>\n" % (ord(digit), ord("a") + i) for i, digit in enumerate("0123456789"))
    cmap = (
        b"/CIDInit /ProcSet findresource begin 12 dict begin begincmap /CMapName /Lies def\n"
        b"1 begincodespacerange <00> <FF> endcodespacerange\n10 beginbfchar\n"
        + lies
        + b"endbfchar endcmap CMapName currentdict /CMap defineresource pop end end\n"
    )

    def change(pdf, page):
        page.obj.Resources.Font.L1 = pdf.make_indirect(
            pikepdf.Dictionary(
                Type=pikepdf.Name.Font,
                Subtype=pikepdf.Name.Type1,
                BaseFont=pikepdf.Name(base_font),
                Encoding=pikepdf.Name.WinAnsiEncoding,
                ToUnicode=pdf.make_stream(cmap),
            )
        )
        page.obj.Contents = pdf.make_stream(HEADING + b"BT /L1 14 Tf 72 600 Td (" + SHOWN.encode() + b") Tj ET\n")

    return change


def on_a_turned_page(change):
    """``change`` on a page whose /Rotate turns it 90 degrees clockwise for display."""

    def turned(pdf, page):
        change(pdf, page)
        page.obj.Rotate = 90

    return turned


FIELD_WORDS = "Tenant agrees to the house rules"


def field_with_words(pdf, page):
    """A text field whose value and appearance hold the value among other words."""
    text = f"{FIELD_WORDS}, SSN {SSN}".encode()
    field(
        Rect=[72, 600, 472, 624],
        V=pikepdf.String(text.decode()),
        AP=pikepdf.Dictionary(N=_appearance(pdf, text, pdf.make_indirect(_helvetica()), 400)),
    )(pdf, page)


def _glyph_by_glyph(text: str, x: float, y: float) -> bytes:
    """``text`` in Helvetica 12, each glyph its own text object placed where the one before it ends (as Skia
    writes a page: content that starts a line at every glyph)."""
    ops = []
    for char in text:
        ops.append(b"BT /F1 12 Tf 1 0 0 1 %.2f %.2f Tm (%s) Tj ET\n" % (x, y, literal(char)))
        x += pdfmetrics.stringWidth(char, "Helvetica", 12)
    return b"".join(ops)


def _drawn_among_another_word(pdf, page):
    """The value drawn glyph by glyph, then another word drawn glyph by glyph over its digits a point lower: in
    reading order the two words' glyphs interleave, with the lines joined the value runs into the word; pdftotext
    reads each word whole, as a reader does (a web page printed by Chromium, bug1945.pdf of PyMuPDF's tests)."""
    x = 72 + pdfmetrics.stringWidth("SSN 1", "Helvetica", 12)
    page.obj.Contents = pdf.make_stream(HEADING + _glyph_by_glyph(SHOWN, 72, 600) + _glyph_by_glyph("Unit", x, 599))


def _multiline_field(*lines: str):
    """A multiline text field whose value and appearance break the value over two lines, as a viewer wraps it
    (PyMuPDF's widgettest.pdf)."""

    def change(pdf, page):
        shown = b"".join(b"0 -14 Td (%s) Tj " % line.encode() for line in lines)
        appearance = pdf.make_stream(
            b"BT /A1 12 Tf 2 40 Td " + shown + b"ET",
            Type=pikepdf.Name.XObject,
            Subtype=pikepdf.Name.Form,
            BBox=[0, 0, 200, 48],
            Resources=pikepdf.Dictionary(Font=pikepdf.Dictionary(A1=pdf.make_indirect(_helvetica()))),
        )
        field(
            Rect=[72, 560, 272, 608], Ff=4096, V=pikepdf.String("\r".join(lines)), AP=pikepdf.Dictionary(N=appearance)
        )(pdf, page)

    return change


# each: (change, the value, the angles a reader turns the page by to read it)
DRAWN = {
    "tiny_image_drawn_four_times_larger": (_tiny_image_drawn_large, SSN, (0,)),
    "value_split_across_two_images": (_split_across_images, SSN, (0,)),
    "vector_outlines_of_glyphs": (_vector_outlines, SSN, (0,)),
    "tiling_pattern_with_differences_font": (_tiling_pattern, SSN, (0,)),
    "two_free_text_annotations_each_half": (_free_text_halves, SSN, (0,)),
    "text_at_45_degrees_in_an_image": (_turned(45), SSN, (-45,)),
    "text_at_20_degrees_in_an_image": (_turned(20), SSN, (-20,)),
    "widget_appearance_with_custom_encoded_font": (_widget_cipher_appearance, SSN, (0,)),
    "base14_font_with_a_lying_tounicode_map": (_lying_to_unicode("/Courier"), SSN, (0,)),
    "base14_font_sharing_a_trusted_name_with_a_lying_map": (_lying_to_unicode("/Helvetica"), SSN, (0,)),
    "value_split_across_two_images_on_a_turned_page": (on_a_turned_page(_split_across_images), SSN, (90,)),
    "drawn_glyph_by_glyph_among_another_words_glyphs": (_drawn_among_another_word, SSN, (0,)),
    "wrapped_after_its_own_hyphen_in_a_field": (_multiline_field(f"SSN {SSN[:7]}", SSN[7:]), SSN, (0,)),
    "hyphenated_where_its_line_wraps_in_a_field": (_multiline_field(f"Email: {EMAIL[:15]}-", EMAIL[15:]), EMAIL, (0,)),
}
# DRAWN cases that leak today, with why (each test of them is an expected failure until it is fixed)
KNOWN_LEAKS: dict[str, str] = {}


# -- more ways of drawing: fonts that say nothing, shadings, masks, optional content, clipping, render modes -------


def _vera_glyphs() -> tuple[dict[str, int], dict[str, float]]:
    from reportlab.pdfbase.ttfonts import TTFontFile

    vera = TTFontFile(str(FONTS / "Vera.ttf"))
    return (
        {char: vera.charToGlyph[ord(char)] for char in _CIPHER_CHARS},
        {char: vera.charWidths[ord(char)] for char in _CIPHER_CHARS},
    )


def cid_font(pdf, to_unicode: bool | str) -> pikepdf.Object:
    """Vera embedded whole as a CID font (Type0, Identity-H, codes are glyph ids), with or without a ToUnicode
    map (``to_unicode`` a character: one that maps every glyph to it): without one, no text layer says what the codes
    spell."""
    glyphs, widths = _vera_glyphs()
    descriptor = pikepdf.Dictionary(
        Type=pikepdf.Name.FontDescriptor,
        FontName=pikepdf.Name.Vera,
        Flags=32,
        FontBBox=[-183, -236, 1287, 928],
        ItalicAngle=0,
        Ascent=760,
        Descent=-240,
        CapHeight=729,
        StemV=80,
        FontFile2=pdf.make_stream((FONTS / "Vera.ttf").read_bytes()),
    )
    descendant = pikepdf.Dictionary(
        Type=pikepdf.Name.Font,
        Subtype=pikepdf.Name.CIDFontType2,
        BaseFont=pikepdf.Name.Vera,
        CIDSystemInfo=pikepdf.Dictionary(
            Registry=pikepdf.String("Adobe"), Ordering=pikepdf.String("Identity"), Supplement=0
        ),
        FontDescriptor=pdf.make_indirect(descriptor),
        CIDToGIDMap=pikepdf.Name.Identity,
        W=[item for char in _CIPHER_CHARS for item in (glyphs[char], [round(widths[char])])],
    )
    font = pikepdf.Dictionary(
        Type=pikepdf.Name.Font,
        Subtype=pikepdf.Name.Type0,
        BaseFont=pikepdf.Name.Vera,
        Encoding=pikepdf.Name("/Identity-H"),
        DescendantFonts=[pdf.make_indirect(descendant)],
    )
    if to_unicode:
        spelled = {char: to_unicode if isinstance(to_unicode, str) else char for char in _CIPHER_CHARS}
        pairs = b"".join(b"<%04X> <%04X>\n" % (glyphs[char], ord(spelled[char])) for char in _CIPHER_CHARS)
        font.ToUnicode = pdf.make_stream(
            b"/CIDInit /ProcSet findresource begin 12 dict begin begincmap /CMapName /V def\n"
            b"1 begincodespacerange <0000> <FFFF> endcodespacerange\n%d beginbfchar\n"
            % len(_CIPHER_CHARS)
            + pairs
            + b"endbfchar endcmap CMapName currentdict /CMap defineresource pop end end\n"
        )
    return pdf.make_indirect(font)


def cid_codes(text: str) -> bytes:
    glyphs, _ = _vera_glyphs()
    return b"".join(glyphs[char].to_bytes(2, "big") for char in text)


def _type3_font(pdf) -> pikepdf.Object:
    """A Type3 font whose glyphs are procedures filling the runs of a 100-pixel rendering of Vera, named /g0, /g1 ...
    (no glyph list knows them) at codes A, B, C ...: nothing but the page's pixels says what it spells."""
    font = ImageFont.truetype(str(FONTS / "Vera.ttf"), 100)
    procs, widths = {}, []
    for index, char in enumerate(_CIPHER_CHARS):
        width = round(font.getlength(char))
        image = Image.new("L", (max(1, width), 120), 255)
        ImageDraw.Draw(image).text((0, 96), char, fill=0, font=font, anchor="ls")  # baseline 24 pixels up
        runs = [b"%d %d %d 1 re" % (start, 95 - y, end - start) for start, end, y in _dark_runs(image)]
        procs[f"/g{index}"] = pdf.make_stream(b"%d 0 d0\n" % width + b"\n".join(runs) + b"\nf\n")
        widths.append(width)
    return pdf.make_indirect(
        pikepdf.Dictionary(
            Type=pikepdf.Name.Font,
            Subtype=pikepdf.Name.Type3,
            FontBBox=[0, -30, 100, 100],
            FontMatrix=[0.01, 0, 0, 0.01, 0, 0],
            CharProcs=pikepdf.Dictionary(procs),
            FirstChar=65,
            LastChar=65 + len(_CIPHER_CHARS) - 1,
            Widths=widths,
            Resources=pikepdf.Dictionary(),
            Encoding=pikepdf.Dictionary(
                Type=pikepdf.Name.Encoding,
                Differences=[65, *(pikepdf.Name(f"/g{i}") for i in range(len(_CIPHER_CHARS)))],
            ),
        )
    )


def silent_text(
    before: bytes = b"",
    text_state: bytes = b"",
    after: bytes = b"",
    at: bytes = b"72 600 Td",
    size: int = 16,
    to_unicode: bool | str = False,
):
    """SHOWN in the CID font without a ToUnicode map (unless ``to_unicode``), between ``before`` and ``after``."""

    def change(pdf, page):
        page.obj.Resources.Font.V1 = cid_font(pdf, to_unicode)
        page.obj.Contents = pdf.make_stream(
            HEADING
            + before
            + b"BT /V1 %d Tf " % size
            + text_state
            + b" "
            + at
            + b" <"
            + cid_codes(SHOWN).hex().encode()
            + b"> Tj ET\n"
            + after
        )

    return change


def _type3_text(pdf, page):
    page.obj.Resources.Font.T3 = _type3_font(pdf)
    page.obj.Contents = pdf.make_stream(HEADING + b"BT /T3 16 Tf 72 600 Td (" + _ciphered(SHOWN) + b") Tj ET\n")


def _axial(pdf, dark: float = 0.0) -> pikepdf.Dictionary:
    """An axial shading from black to a dark grey across the value's line."""
    return pikepdf.Dictionary(
        ShadingType=2,
        ColorSpace=pikepdf.Name.DeviceGray,
        Coords=[72, 600, 300, 600],
        Function=pikepdf.Dictionary(FunctionType=2, Domain=[0, 1], C0=[dark], C1=[0.3], N=1),
        Extend=[True, True],
    )


def _shading_through_glyphs(pdf, page):
    """The value's glyphs as a clipping path (rendering mode 7), then a shading painted with ``sh``."""
    silent_text(before=b"q ", text_state=b"7 Tr", after=b"/Sh0 sh Q\n")(pdf, page)
    page.obj.Resources.Shading = pikepdf.Dictionary(Sh0=_axial(pdf))


def _shading_pattern_outlines(pdf, page):
    """The glyph outlines (as in vector_outlines_of_glyphs) filled with a shading pattern instead of a colour."""
    _vector_outlines(pdf, page)
    page.obj.Resources.Pattern = pikepdf.Dictionary(
        P0=pdf.make_indirect(pikepdf.Dictionary(Type=pikepdf.Name.Pattern, PatternType=2, Shading=_axial(pdf)))
    )
    data = page.obj.Contents.read_bytes().replace(b"0 g\n", b"/Pattern cs /P0 scn\n")
    page.obj.Contents = pdf.make_stream(data)


def _shown_through_soft_mask(pdf, page):
    """A solid black image whose /SMask is the picture of the value: the image's own pixels hold no text."""
    picture = text_picture(SHOWN, 50)
    mask = Image.eval(picture, lambda v: 255 - v)
    black = Image.new("L", picture.size, 0)
    image = image_xobject(pdf, black)
    image.SMask = image_xobject(pdf, mask)
    page.obj.Resources.XObject = pikepdf.Dictionary(Im0=image)
    page.obj.Contents = pdf.make_stream(
        HEADING + b"q " + placement_matrix(picture, 72, 600, 72 / 150) + b" cm /Im0 Do Q\n"
    )


def _luminosity_mask(pdf, grey: float) -> pikepdf.Dictionary:
    """An ExtGState whose soft mask is the luminosity of a page-sized rectangle of ``grey`` (1 shows, 0 hides)."""
    group = pdf.make_stream(
        b"%.1f g 0 0 612 792 re f" % grey,
        Type=pikepdf.Name.XObject,
        Subtype=pikepdf.Name.Form,
        BBox=[0, 0, 612, 792],
        Group=pikepdf.Dictionary(S=pikepdf.Name.Transparency, CS=pikepdf.Name.DeviceGray),
    )
    return pikepdf.Dictionary(
        Type=pikepdf.Name.ExtGState,
        SMask=pikepdf.Dictionary(Type=pikepdf.Name.Mask, S=pikepdf.Name.Luminosity, G=group),
    )


def _under_soft_mask(grey: float, text):
    def change(pdf, page):
        text(pdf, page)
        page.obj.Resources.ExtGState = pikepdf.Dictionary(GS0=_luminosity_mask(pdf, grey))
        body = page.obj.Contents.read_bytes()[len(HEADING) :]
        page.obj.Contents = pdf.make_stream(HEADING + b"q /GS0 gs\n" + body + b"Q\n")

    return change


def in_optional_content(on: bool, text):
    """``text``'s content inside marked content of an optional content group, ON or OFF by default."""

    def change(pdf, page):
        text(pdf, page)
        group = pdf.make_indirect(pikepdf.Dictionary(Type=pikepdf.Name.OCG, Name=pikepdf.String("Layer")))
        page.obj.Resources.Properties = pikepdf.Dictionary(L1=group)
        pdf.Root.OCProperties = pikepdf.Dictionary(
            OCGs=[group], D=pikepdf.Dictionary(**{"ON" if on else "OFF": [group], "Order": [group]})
        )
        body = page.obj.Contents.read_bytes()[len(HEADING) :]
        page.obj.Contents = pdf.make_stream(HEADING + b"/OC /L1 BDC\n" + body + b"EMC\n")

    return change


def _inverted_image(mask: bool):
    """The value's picture whose raw samples are inverted (text 1 or white) and read back by /Decode [1 0]: as an
    image mask (1 bit, painted in the fill colour) or as a grey image."""

    def change(pdf, page):
        picture = text_picture(SHOWN, 50)
        inverted = Image.eval(picture, lambda v: 255 - v)
        if mask:
            bits = inverted.point(lambda v: 255 if v >= 128 else 0).convert("1")
            image = pdf.make_stream(
                zlib.compress(bits.tobytes()),
                Type=pikepdf.Name.XObject,
                Subtype=pikepdf.Name.Image,
                Width=picture.width,
                Height=picture.height,
                ImageMask=True,
                BitsPerComponent=1,
                Decode=[1, 0],
                Filter=pikepdf.Name.FlateDecode,
            )
        else:
            image = image_xobject(pdf, inverted)
            image.Decode = [1, 0]
        page.obj.Resources.XObject = pikepdf.Dictionary(Im0=image)
        page.obj.Contents = pdf.make_stream(
            HEADING + b"q 0 g " + placement_matrix(picture, 72, 600, 72 / 150) + b" cm /Im0 Do Q\n"
        )

    return change


def _invisible_text_over_its_picture(pdf, page):
    """The value's picture with an invisible text layer (rendering mode 3) over it, as OCR software writes."""
    picture = text_picture(SHOWN, 50)
    _pictures((picture, placement_matrix(picture, 72, 600, 72 / 150)))(pdf, page)
    body = page.obj.Contents.read_bytes()
    page.obj.Contents = pdf.make_stream(body + b"BT 3 Tr /F1 14 Tf 76 606 Td (" + SHOWN.encode() + b") Tj ET\n")


def _form_drawn_twice(pdf, page):
    """A form XObject holding the value, drawn at two places of the page."""
    font = cid_font(pdf, False)
    form = pdf.make_stream(
        b"BT /V1 16 Tf 0 4 Td <" + cid_codes(SHOWN).hex().encode() + b"> Tj ET",
        Type=pikepdf.Name.XObject,
        Subtype=pikepdf.Name.Form,
        BBox=[0, 0, 200, 24],
        Resources=pikepdf.Dictionary(Font=pikepdf.Dictionary(V1=font)),
    )
    page.obj.Resources.XObject = pikepdf.Dictionary(Fm0=form)
    page.obj.Contents = pdf.make_stream(HEADING + b"q 1 0 0 1 72 600 cm /Fm0 Do Q\nq 1 0 0 1 300 450 cm /Fm0 Do Q\n")


def _over_a_dark_photograph(grain: int):
    """The value in white over a photograph whose dark part rises across it, grain over all (a news page's
    headline on its picture): no panel (the dark part's box is light along its top), and its dark is solid enough
    to be taken for a black box. ``grain`` seeds the noise: Tesseract reads the page's value right under some
    grains and misreads it, with confidence, under others (these three)."""

    def change(pdf, page):
        width, height = 720, 300
        photo = Image.new("L", (width, height), 215)
        ImageDraw.Draw(photo).polygon(
            [(0, round(height * 0.9)), (width, round(height * 0.1)), (width, height), (0, height)], fill=45
        )
        noise = numpy.random.default_rng(grain).normal(128, 10, (height, width))
        photo = ImageChops.add(photo, Image.fromarray(numpy.clip(noise, 0, 255).astype(numpy.uint8)), offset=-128)
        silent_text(before=b"q 345.6 0 0 144 60 560 cm /Im0 Do Q ", text_state=b"1 g", at=b"150 572 Td")(pdf, page)
        page.obj.Resources.XObject = pikepdf.Dictionary(Im0=image_xobject(pdf, photo))

    return change


_COS30, _SIN30 = 0.8660, 0.5

DRAWN.update(
    {
        "shading_painted_through_glyphs_used_as_a_clip": (_shading_through_glyphs, SSN, (0,)),
        "glyph_outlines_filled_with_a_shading_pattern": (_shading_pattern_outlines, SSN, (0,)),
        "image_shown_only_through_its_soft_mask": (_shown_through_soft_mask, SSN, (0,)),
        "text_under_a_soft_mask_that_shows_it": (_under_soft_mask(1.0, silent_text()), SSN, (0,)),
        "optional_content_on_by_default": (in_optional_content(True, silent_text()), SSN, (0,)),
        "text_as_a_clipping_path_then_painted": (
            silent_text(before=b"q ", text_state=b"7 Tr", after=b"0 g 0 0 612 792 re f Q\n"),
            SSN,
            (0,),
        ),
        "value_partly_clipped": (silent_text(before=b"q 0 601.2 612 189 re W n ", after=b"Q\n"), SSN, (0,)),
        "type3_font_of_glyph_procedures": (_type3_text, SSN, (0,)),
        "cid_font_identity_h_with_tounicode": (silent_text(to_unicode=True), SSN, (0,)),
        "cid_font_identity_h_without_tounicode": (silent_text(), SSN, (0,)),
        "image_mask_with_inverted_decode": (_inverted_image(mask=True), SSN, (0,)),
        "grey_image_with_inverted_decode": (_inverted_image(mask=False), SSN, (0,)),
        "invisible_text_over_a_picture_of_it": (_invisible_text_over_its_picture, SSN, (0,)),
        "stroke_only_text": (silent_text(text_state=b"1 Tr 0.6 w"), SSN, (0,)),
        "fill_and_stroke_text": (silent_text(text_state=b"2 Tr 0.4 w"), SSN, (0,)),
        "form_xobject_drawn_twice": (_form_drawn_twice, SSN, (0,)),
        "text_scaled_200_percent_horizontally": (silent_text(text_state=b"200 Tz", size=12), SSN, (0,)),
        "text_scaled_250_percent_horizontally": (silent_text(text_state=b"250 Tz", size=12), SSN, (0,)),
        "text_with_wide_character_spacing": (silent_text(text_state=b"6 Tc", size=12), SSN, (0,)),
        "white_text_on_a_dark_rectangle": (
            silent_text(before=b"0.15 g 60 590 260 36 re f ", text_state=b"1 g"),
            SSN,
            (0,),
        ),
        "white_text_on_a_tight_dark_panel": (
            silent_text(before=b"0.15 g 66 596 180 18 re f ", text_state=b"1 g"),
            SSN,
            (0,),
        ),
        "small_white_text_on_a_black_area": (  # no cell of its ink is more than one from solid black
            silent_text(before=b"0 g 60 560 320 80 re f ", text_state=b"1 g", size=6),
            SSN,
            (0,),
        ),
        "white_text_on_a_tight_dark_blue_panel": (
            silent_text(before=b"0 0 0.45 rg 66 596 180 18 re f ", text_state=b"1 g"),
            SSN,
            (0,),
        ),
        "cid_font_whose_tounicode_maps_every_glyph_to_a_space": (silent_text(to_unicode=" "), SSN, (0,)),
        **{
            f"white_text_over_a_dark_photograph_grain_{grain}": (_over_a_dark_photograph(grain), SSN, (0,))
            for grain in (3, 4, 11)
        },
        "text_turned_30_degrees_by_its_matrix": (
            silent_text(at=b"%.4f %.4f %.4f %.4f 120 500 Tm" % (_COS30, _SIN30, -_SIN30, _COS30)),
            SSN,
            (-30,),
        ),
    }
)


def _ruled_table(pdf, page):
    """A table of six rows of three cells (the value in the middle of the second column), its text in the CID font
    without a ToUnicode map, its rules (solid round it and down it, dotted across) touching the text: the engine,
    reading the page with its rules, reads a stray word or two of the table and doubts none of them."""
    page.obj.Resources.Font.V1 = cid_font(pdf, False)
    rows = [
        ("SN", "5531", "2024-11"),
        ("4250", "555-0142", "1200"),
        ("8830", SSN, "NN-S"),
        ("3107", "64-2288", "4417"),
        ("SN-5", "9031", "2019-06"),
        ("77", "1650-40", "S-9"),
    ]
    columns, top, height = (60, 160, 380, 540), 700, 15
    content = [HEADING, b"1 w 0 G\n"]
    for row, cells in enumerate(rows):
        for column, text in enumerate(cells):
            at = b"%.1f %d Td" % (columns[column] + 1.5, top - row * height - 12)
            content.append(b"BT /V1 12 Tf " + at + b" <" + cid_codes(text).hex().encode() + b"> Tj ET\n")
    for row in range(len(rows) + 1):
        dash = b"[] 0 d" if row in (0, len(rows)) else b"[1 1] 0 d"
        y = top - row * height
        content.append(b"%s %d %d m %d %d l S\n" % (dash, columns[0], y, columns[-1], y))
    bottom = top - len(rows) * height
    content += [b"[] 0 d %d %d m %d %d l S\n" % (x, top, x, bottom) for x in columns]
    page.obj.Contents = pdf.make_stream(b"".join(content))


def ruled_table(ruled: bool = True):
    """The table (``_ruled_table``), with its rules or without (the same text, which the engine reads)."""

    def change(pdf, page):
        _ruled_table(pdf, page)
        if not ruled:
            kept = [(o, op) for o, op in pikepdf.parse_content_stream(page) if str(op) not in ("m", "l", "S")]
            page.obj.Contents = pdf.make_stream(pikepdf.unparse_content_stream(kept))

    return change


def wide_text(scale: int):
    """The value drawn ``scale`` percent as wide as its font (Tz), in the CID font without a ToUnicode map."""
    return silent_text(text_state=b"%d Tz" % scale, size=12)


# glyphs four times taller than wide, in the CID font without a ToUnicode map (the engine reads no word of it as drawn)
condensed_text = silent_text(at=b"1 0 0 4 72 560 Tm", size=12)


def helvetica_value(pdf, page):
    page.obj.Contents = pdf.make_stream(HEADING + b"BT /F1 14 Tf 72 600 Td (" + SHOWN.encode() + b") Tj ET\n")


def _signature_appearance_clipped(pdf, page):
    """A signature widget (no value a rule reads) whose appearance draws the value outside its own box: a viewer
    clips it away; the appearance's text still spells it (pdftotext reads it)."""
    appearance = _page_font_appearance(
        pdf, page, b"BT /F1 10 Tf 2 30 Td (Signed by SSN " + SSN.encode() + b") Tj ET", 60
    )
    field(FT=pikepdf.Name.Sig, Rect=[72, 600, 132, 620], AP=appearance)(pdf, page)


# each: (change, the value) for a value in the file's objects that no reader sees on the page
HIDDEN = {
    "optional_content_off_by_default": (in_optional_content(False, helvetica_value), SSN),
    "signature_appearance_clipped_by_its_box": (_signature_appearance_clipped, SSN),
    "clipped_away_entirely": (
        lambda pdf, page: (
            helvetica_value(pdf, page),
            page.obj.__setattr__(
                "Contents",
                pdf.make_stream(
                    HEADING + b"q 500 100 4 4 re W n\n" + page.obj.Contents.read_bytes()[len(HEADING) :] + b"Q\n"
                ),
            ),
        ),
        SSN,
    ),
    "rendering_mode_invisible_with_nothing_drawn": (
        lambda pdf, page: page.obj.__setattr__(
            "Contents", pdf.make_stream(HEADING + b"BT 3 Tr /F1 14 Tf 72 600 Td (" + SHOWN.encode() + b") Tj ET\n")
        ),
        SSN,
    ),
    "soft_mask_of_zero": (_under_soft_mask(0.0, helvetica_value), SSN),
}


def pages(*changes) -> bytes:
    """A document of one page per change, each the typed application's page changed as it says."""
    pdf = pikepdf.new()
    sources = [pikepdf.open(io.BytesIO(build(change))) for change in changes]
    for source in sources:
        pdf.pages.append(source.pages[0])
    data = _saved(pdf)
    for source in sources:
        source.close()
    return data


def embedded_font(program: bytes):
    """A font resource the page does not use, its program embedded as /FontFile2."""

    def change(pdf, page):
        descriptor = pikepdf.Dictionary(
            Type=pikepdf.Name.FontDescriptor,
            FontName=pikepdf.Name("/Vera"),
            Flags=32,
            FontBBox=[0, 0, 1000, 1000],
            ItalicAngle=0,
            Ascent=900,
            Descent=-200,
            CapHeight=700,
            StemV=80,
            FontFile2=pdf.make_stream(program, Length1=len(program)),
        )
        page.obj.Resources.Font.F2 = pdf.make_indirect(
            pikepdf.Dictionary(
                Type=pikepdf.Name.Font,
                Subtype=pikepdf.Name.TrueType,
                BaseFont=pikepdf.Name("/Vera"),
                FirstChar=32,
                LastChar=32,
                Widths=[600],
                FontDescriptor=pdf.make_indirect(descriptor),
            )
        )

    return change
