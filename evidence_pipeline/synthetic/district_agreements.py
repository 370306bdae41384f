"""The four-part district agreement, a signed bundle for the signature check, split, review and merge (the demo's
and the tests'): a district services agreement of seven text pages made with reportlab, signed with pyHanko in a
visible signature field on its signature page.

Every page states the agreement's header (its id, the district, the provider and the term) as ``Label: value``
lines, which the district-agreement ruleset (rulesets/district-agreement-2026.1.json) reads from each part on its
own. The data-processing addendum runs for as long as the provider holds student records: it states no end date,
so the ruleset rejects it and a reviewer decides on it.
"""

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

SIGNATURE_PAGE = 5
RULESET = "district-agreement/2026.1"  # what reviews each part


@dataclass(frozen=True)
class Part:
    name: str
    pages: str
    approved: bool  # what contract review under RULESET decides for it


# The district agreement: four parts, of which the data-processing addendum states no end date (review rejects it).
PARTS = (
    Part("master-agreement", "1-2", True),
    Part("data-processing-addendum", "3-4", False),
    Part("signature-page", "5", True),
    Part("exhibits", "6-7", True),
)

_IDENTITY = (
    "Agreement ID: DSA-2026-0147",
    "District: Riverside Unified School District",
    "Provider: Brightpath Learning Systems Inc.",
    "Effective date: 2026-07-01",
)
_HEADER = (*_IDENTITY, "End date: 2029-06-30")
_ADDENDUM_HEADER = (*_IDENTITY, "Term: while the Provider holds student records")


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
        text_page(
            "District services agreement",
            "Master agreement",
            *_HEADER,
            "",
            "1. Services. The Provider delivers the learning platform and its support",
            "   to the District's schools as the schedule of services describes.",
            "2. Term. The agreement runs from the effective date to the end date.",
            "3. Fees. The District pays the fees of Exhibit B, invoiced each quarter.",
        ),
        text_page(
            "Master agreement, continued",
            *_HEADER,
            "",
            "Schedule of services",
            "- platform access for every enrolled student and teacher",
            "- onboarding and training for school staff",
            "4. Termination. Either party may end the agreement on 90 days' notice.",
        ),
        text_page(
            "Data processing addendum",
            *_ADDENDUM_HEADER,
            "",
            "Processing of student records",
            "The Provider processes student records only to deliver the services,",
            "under the District's instructions, and never sells or discloses them.",
        ),
        text_page(
            "Data processing addendum, continued",
            *_ADDENDUM_HEADER,
            "",
            "Subprocessors",
            "The Provider names each subprocessor to the District 30 days in advance.",
            "On the end of processing it returns or deletes every student record.",
        ),
        text_page(
            "Signature page",
            *_HEADER,
            "",
            "Signed for the District by its superintendent, and for the Provider",
            "by its chief executive, in the signature field below.",
        ),
        text_page(
            "Exhibits",
            *_HEADER,
            "",
            "Exhibit A: service levels",
            "Availability 99.5% each school month; support answers within one school day.",
        ),
        text_page(
            "Exhibits, continued",
            *_HEADER,
            "",
            "Exhibit B: price list",
            "Per enrolled student, per school year: USD 18.00.",
        ),
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
