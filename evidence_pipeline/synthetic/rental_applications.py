"""Synthetic rental applications (reportlab, then pikepdf for what reportlab does not write) and the templates of
two organizations x two programs that redact them: the tests', the demo's and the benchmark's.

Every planted value is in PLANTED, with where it hides: free text, a name split across text runs, a bank account
split across lines, a TrueType font with a subset encoding (ToUnicode), a kerned TJ array, a hex string, text in a
form XObject, a form field's value and appearance, document information and XMP metadata, a text annotation with
its popup, an attachment, a bookmark, an earlier revision (an incremental update that changed the income), and
pixels on a scanned page (SCAN_TEXT, in SCAN_BAND).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pikepdf
from PIL import Image, ImageDraw, ImageFont
from pypdf import PdfWriter
from pypdf.generic import ArrayObject, NameObject
from reportlab.lib.utils import ImageReader
from reportlab.pdfgen import canvas

import evidence_pipeline.monthly.render  # noqa: F401  (registers the bundled TrueType font, EvidenceSans)

FONTS = Path(__file__).parent.parent / "fonts"

NAME = "Margaret Holloway"
PLANTED = {
    "name": NAME,
    "national_id": "123-45-6789",
    "national_id_hex": "987-65-4321",
    "date_of_birth": "1987-03-14",
    "bank_account": "DE89 3704 0044 0532 0130 00",
    "income": "$4,250",
    "phone": "(555) 010-4477",
    "email": "m.holloway@example.net",
    "old_income": "$3,900",  # only in the earlier revision
}
SCAN_TEXT = "SSN 555-12-3456"  # pixels on the scanned page, drawn at (40, 40) of a 540 x 720 image at (36, 36)
SCAN_BAND = [36, 680, 576, 756]  # the page area of the image's top 76 pixel rows, where SCAN_TEXT is
NOTE = "Reviewed: documents complete"  # an annotation that holds nothing to remove (it stays, with its popup)


def application(scanned_page: bool = True, revision: bool = True) -> bytes:
    out = io.BytesIO()
    c = canvas.Canvas(out, pagesize=(612, 792), invariant=1)
    c.setTitle(f"Rental application of {NAME}")
    c.setAuthor(NAME)
    c.setFont("Helvetica", 12)
    c.drawString(72, 740, "Rental application - Harbor Housing")
    c.drawString(72, 710, "Applicant:")
    c.drawString(140, 710, "Margaret ")  # the name in two text runs
    c.drawString(140 + c.stringWidth("Margaret ", "Helvetica", 12), 710, "Holloway")
    c.drawString(72, 690, f"SSN: {PLANTED['national_id']}")
    c.drawString(72, 670, f"Date of birth: {PLANTED['date_of_birth']}")
    c.drawString(72, 650, "Bank account: DE89 3704 0044")  # split across two lines
    c.drawString(72, 636, "0532 0130 00")
    c.setFont("EvidenceSans", 12)
    c.drawString(72, 610, f"Monthly income: {PLANTED['income']}")
    c.drawString(72, 590, f"Email: {PLANTED['email']}")
    c.setFont("Helvetica", 12)
    c.drawString(72, 560, "References available on request.")
    c.bookmarkPage("p1")
    c.addOutlineEntry(f"Applicant {NAME}", "p1")
    c.acroForm.textfield(name="applicant_name", value=NAME, x=72, y=500, width=200, height=20)
    c.acroForm.textfield(name="city", value="Springfield", x=72, y=470, width=200, height=20)
    c.showPage()
    c.setFont("Helvetica", 12)
    c.drawString(72, 740, "Page two: employment and contact")
    c.beginForm("footer")  # a form XObject: text drawn through `Do`, here moved by the form's placement
    c.setFont("Helvetica", 9)
    c.drawString(0, 0, f"Contact {PLANTED['email']} for the employer reference")
    c.endForm()
    c.saveState()
    c.translate(72, 60)
    c.doForm("footer")
    c.restoreState()
    c.showPage()
    if scanned_page:
        c.drawImage(ImageReader(_scan()), 36, 36, width=540, height=720)
        c.showPage()
    c.save()
    pdf = pikepdf.open(io.BytesIO(out.getvalue()))
    _raw_text(pdf, pdf.pages[1])
    for rect, text in (([400, 700, 420, 720], f"Call {NAME} at {PLANTED['phone']}"), ([400, 600, 420, 620], NOTE)):
        note = pdf.make_indirect(
            pikepdf.Dictionary(
                Type=pikepdf.Name.Annot, Subtype=pikepdf.Name.Text, Rect=rect, Contents=pikepdf.String(text)
            )
        )
        popup = pdf.make_indirect(
            pikepdf.Dictionary(
                Type=pikepdf.Name.Annot, Subtype=pikepdf.Name.Popup, Rect=[430, rect[1] - 60, 560, rect[1]], Parent=note
            )
        )
        note.Popup = popup
        pdf.pages[0].Annots.extend([note, popup])
    pdf.attachments["paystub.txt"] = pikepdf.AttachedFileSpec(
        pdf, f"Pay stub for {NAME}: {PLANTED['income']}".encode(), mime_type="text/plain"
    )
    with pdf.open_metadata(set_pikepdf_as_editor=False) as meta:
        meta["dc:creator"] = [NAME]
        meta["dc:description"] = f"Application of {NAME}, born {PLANTED['date_of_birth']}"
    first = io.BytesIO()
    pdf.save(first, deterministic_id=True, compress_streams=False)  # the earlier income is legible in the bytes
    if not revision:
        return first.getvalue()
    return _incremental_income_change(first.getvalue())


def _raw_text(pdf: pikepdf.Pdf, page: pikepdf.Page) -> None:
    """A kerned TJ array and a hex string, which reportlab's canvas does not write, and a line that the next
    revision takes out again."""
    font = pdf.make_indirect(
        pikepdf.Dictionary(
            Type=pikepdf.Name.Font,
            Subtype=pikepdf.Name.Type1,
            BaseFont=pikepdf.Name.Helvetica,
            Encoding=pikepdf.Name.WinAnsiEncoding,
        )
    )
    page.Resources.Font.FRaw = font
    hexed = PLANTED["national_id_hex"].encode().hex().upper().encode()
    page.contents_add(
        pdf.make_stream(
            b"BT /FRaw 12 Tf 72 700 Td [(Phone: \\(55) -20 (5\\) 01) 35 (0-44) -10 (77)] TJ ET\n"
            b"BT /FRaw 12 Tf 72 680 Td (Second id: ) Tj <" + hexed + b"> Tj ET\n"
        )
    )
    page.contents_add(pdf.make_stream(b"BT /FRaw 10 Tf 72 650 Td (Earlier income: $3,900) Tj ET\n"))


def _incremental_income_change(data: bytes) -> bytes:
    """An incremental update that drops the earlier income line: the old revision stays in the file's bytes."""
    writer = PdfWriter(io.BytesIO(data), incremental=True)
    page = writer.pages[1]
    page[NameObject("/Contents")] = ArrayObject(list(page["/Contents"])[:-1])
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def _scan() -> Image.Image:
    image = Image.new("L", (540, 720), 255)
    ImageDraw.Draw(image).text((40, 40), SCAN_TEXT, fill=0)
    return image


def organization_template(name: str = "harbor-housing", **extra_rules: str) -> bytes:
    rules = [
        {"id": "national-id", "label": "national_id", "pattern": r"\b\d{3}-\d{2}-\d{4}\b"},
        {
            "id": "date-of-birth",
            "label": "date_of_birth",
            "pattern": r"(?i)(?:date of birth:|born)\s*(?P<value>\d{4}-\d{2}-\d{2})",
        },
        {"id": "bank-account", "label": "bank_account", "pattern": r"\b[A-Z]{2}\d{2}(?:\s*\d{4}){4}\s*\d{2}\b"},
        {"id": "phone", "label": "phone", "pattern": r"\(\d{3}\)\s*\d{3}-\d{4}"},
        {"id": "email", "label": "email", "pattern": r"[\w.+-]+@[\w-]+\.[\w.]+"},
    ] + [{"id": rule_id, "label": "custom", "pattern": pattern} for rule_id, pattern in extra_rules.items()]
    return json.dumps({"kind": "organization", "name": name, "rules": rules}).encode()


def program_template(name: str = "family-units", scanned_page: int | None = 3) -> bytes:
    rules = [
        {"id": "applicant-name", "label": "name", "field": "applicant_name"},
        {"id": "income", "label": "income", "pattern": r"(?i)income:\s*(?P<value>\$[\d,]+)"},
    ]
    if scanned_page:
        rules.append(
            {"id": "scanned-page", "label": "scanned_page", "region": {"page": scanned_page, "rect": SCAN_BAND}}
        )
    return json.dumps({"kind": "program", "name": name, "rules": rules}).encode()


def scanned_page(number: int, size: tuple[int, int] = (1275, 1650)) -> Image.Image:
    """A typed page as a scanner at 150 dpi sees it: 30-pixel lines of text, one with a national id."""
    image = Image.new("L", size, 255)
    draw = ImageDraw.Draw(image)
    font = ImageFont.truetype(str(FONTS / "Vera.ttf"), 30)
    lines = [
        f"Scanned page {number}: employment and landlord references",
        f"SSN 123-{number % 90 + 10:02d}-4567",
        "Previous address: 12 Harbor Street, Springfield",
        "Signed by the applicant on arrival",
    ]
    for index, line in enumerate(lines):
        draw.text((110, 140 + 60 * index), line, fill=0, font=font)
    return image


def scanned_application(pages: int, scanned: frozenset[int] | None = None) -> bytes:
    """``long_application``'s typed pages, except the page numbers in ``scanned`` (all of them when None): those are
    JPEG scans of a page (`scanned_page`), as a scanner writes them."""
    typed = pikepdf.open(io.BytesIO(long_application(pages)))
    for number, page in enumerate(typed.pages, 1):
        if scanned is not None and number not in scanned:
            continue
        jpeg = io.BytesIO()
        scan = scanned_page(number)
        scan.save(jpeg, "JPEG", quality=80)
        image = typed.make_stream(
            jpeg.getvalue(),
            Type=pikepdf.Name.XObject,
            Subtype=pikepdf.Name.Image,
            Width=scan.width,
            Height=scan.height,
            ColorSpace=pikepdf.Name.DeviceGray,
            BitsPerComponent=8,
            Filter=pikepdf.Name.DCTDecode,
        )
        page.obj.Resources = pikepdf.Dictionary(XObject=pikepdf.Dictionary(Scan=image))
        page.obj.Contents = typed.make_stream(b"q 612 0 0 792 0 0 cm /Scan Do Q\n")
    out = io.BytesIO()
    typed.save(out, deterministic_id=True)
    return out.getvalue()


def long_application(pages: int) -> bytes:
    """An application of ``pages`` pages of typed text, each with a national id, a phone number and an income line
    (the benchmark's input)."""
    out = io.BytesIO()
    c = canvas.Canvas(out, pagesize=(612, 792), invariant=1)
    for number in range(pages):
        c.setFont("Helvetica", 10)
        for line in range(40):
            y = 760 - line * 18
            if line % 10 == 3:
                c.drawString(
                    72,
                    y,
                    f"Reference {number}-{line}: SSN 123-{number % 90 + 10:02d}-{line + 1000:04d}, "
                    f"phone (555) 010-{line + 4000:04d}",
                )
            elif line % 10 == 7:
                c.drawString(72, y, f"Monthly income: ${line * 100 + 1000:,}")
            else:
                c.drawString(72, y, f"Page {number + 1}, line {line + 1}: employment history and landlord notes.")
        c.showPage()
    c.save()
    return out.getvalue()
