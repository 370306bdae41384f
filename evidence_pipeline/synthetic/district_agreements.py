"""The four-part district agreement, a signed bundle for the signature check, split and merge (the demo's and the
tests'): pages made with reportlab and lease_contracts' text-only leases, signed with pyHanko in a visible
signature field on its signature page."""

from __future__ import annotations

import io
from dataclasses import dataclass

from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
from pyhanko.sign import fields
from pypdf import PdfReader, PdfWriter
from reportlab.lib.pagesizes import A4
from reportlab.pdfgen import canvas

from evidence_pipeline.signing.keys import Keyring
from evidence_pipeline.signing.pades import sign_pdf
from evidence_pipeline.synthetic.lease_contracts import lease_contract

SIGNATURE_PAGE = 5


@dataclass(frozen=True)
class Part:
    name: str
    pages: str
    approved: bool  # what contract review decides for it


# The district agreement: four parts, of which the data-processing addendum has no lease fields (review rejects it).
PARTS = (
    Part("master-agreement", "1-2", True),
    Part("data-processing-addendum", "3-4", False),
    Part("signature-page", "5", True),
    Part("exhibits", "6-7", True),
)


def text_page(*lines: str) -> bytes:
    out = io.BytesIO()
    page = canvas.Canvas(out, pagesize=A4, invariant=1)
    for n, line in enumerate(lines):
        page.drawString(72, 770 - 16 * n, line)
    page.showPage()
    page.save()
    return out.getvalue()


def _concatenate(documents: list[bytes]) -> bytes:
    writer = PdfWriter()
    for data in documents:
        for page in PdfReader(io.BytesIO(data)).pages:
            writer.add_page(page)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def district_agreement() -> bytes:
    """Seven pages, unsigned, with an empty signature field on the signature page (page 5)."""
    pages = [
        lease_contract(0, "text_only").pdf,
        text_page("Master agreement, continued", "Schedule of services"),
        text_page("Data processing addendum", "Processing of student records"),
        text_page("Data processing addendum, continued", "Subprocessors"),
        lease_contract(1, "text_only").pdf,
        lease_contract(2, "text_only").pdf,
        text_page("Exhibits, continued", "Exhibit B: price list"),
    ]
    return with_signature_field(_concatenate(pages), "DistrictSignature", SIGNATURE_PAGE)


def with_signature_field(pdf: bytes, name: str, page: int) -> bytes:
    """An incremental update adding an empty, visible signature field on ``page`` (1-based)."""
    writer = IncrementalPdfFileWriter(io.BytesIO(pdf), strict=True)
    fields.append_signature_field(writer, fields.SigFieldSpec(name, on_page=page - 1, box=(72, 60, 272, 110)))
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def sign(pdf: bytes, keyring: Keyring, field: str = "DistrictSignature") -> bytes:
    return sign_pdf(pdf, keyring, field_name=field, reason="District agreement").getvalue()
