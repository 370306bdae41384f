"""Deterministic synthetic lease renewals (reportlab) with a known set of defects, for `contract-review`.

Contract ``n`` always has the same bytes: its values come from a generator seeded with ``n``, reportlab runs in
invariant mode with its dates pinned, and only base-14 fonts are used. Every defect in DEFECTS says what the review
must decide, so the tests (and demos and benchmarks) know the answer for each contract. Fields are either AcroForm
text fields (labels printed beside them) or ``Label: value`` lines of text, as a contract may carry them.
"""

from __future__ import annotations

import io
import random
from dataclasses import dataclass, field
from datetime import date, timedelta

from reportlab.lib.pagesizes import A4
from reportlab.pdfgen import canvas

from evidence_pipeline.monthly.render import pinned_epoch

CLAUSES = {
    "Security deposit": "The deposit of one month's rent is held in a separate account and returned within 30 days.",
    "Maintenance and repairs": "The landlord keeps the structure and systems in repair; the tenant reports defects.",
    "Termination": "Either party may terminate with 60 days' written notice at the end of the term.",
    "Governing law": "This agreement is governed by the laws of the state where the property is located.",
    "Pets": "Pets are allowed with the landlord's written consent.",
}
STREETS = ("Maple Avenue", "Harbor Road", "Elm Street", "Cedar Lane", "Lakeview Drive", "Station Square")
LANDLORDS = ("Maple Homes LLC", "Harborview Properties Inc", "Northgate Rentals LLC", "Cedar Realty Trust")
PEOPLE = (
    "Ana Ortiz",
    "Ben Carter",
    "Chloe Nguyen",
    "David Okafor",
    "Emma Schulz",
    "Farid Haddad",
    "Grace Kim",
    "Hugo Lambert",
    "Ines Duarte",
    "Jonas Berg",
    "Kira Ivanova",
    "Liam Walsh",
    "Maya Rossi",
    "Noah Patel",
)


@dataclass(frozen=True)
class Expected:
    decision: str  # approved, rejected, or a reason code the review fails with (REVIEW_INPUT_INVALID)
    missing: tuple[str, ...] = ()
    failed_rules: tuple[str, ...] = ()


# defect -> what the review of lease-review/2026.1 decides
DEFECTS: dict[str, Expected] = {
    "none": Expected("approved"),
    "text_only": Expected("approved"),
    "form_overrides_text": Expected("approved"),  # the text says a rent of 0; the form field wins
    "missing_landlord": Expected("rejected", missing=("landlord",)),
    "missing_term_end": Expected("rejected", missing=("term_end",)),
    "signer_without_name": Expected("rejected", missing=("signer_2",), failed_rules=("every-party-has-a-signer",)),
    "tenant_without_signer": Expected("rejected", failed_rules=("every-party-has-a-signer",)),
    "term_end_before_start": Expected("rejected", failed_rules=("dates-consistent", "term-within-bounds")),
    "signed_after_term_start": Expected("rejected", failed_rules=("dates-consistent",)),
    "term_too_long": Expected("rejected", failed_rules=("term-within-bounds",)),
    "zero_rent": Expected("rejected", failed_rules=("rent-positive",)),
    "malformed_date": Expected("rejected", failed_rules=("values-well-formed",)),
    "missing_clause": Expected("rejected", failed_rules=("required-clauses",)),
    "no_text": Expected("REVIEW_INPUT_INVALID"),
}


@dataclass(frozen=True)
class Contract:
    number: int
    defect: str
    pdf: bytes
    expected: Expected
    values: dict[str, str] = field(repr=False)


def lease_contract(number: int, defect: str | None = None, pages: int = 1) -> Contract:
    """Contract ``number``; its defect cycles through DEFECTS unless named. ``pages`` above 1 adds schedules of
    house rules after the terms (a long lease; the decision is the same)."""
    defect = defect or list(DEFECTS)[number % len(DEFECTS)]
    rng = random.Random(f"lease:{number}")
    start = date(2027, 1 + rng.randrange(12), 1)
    months = rng.choice((12, 12, 24, 6))
    end = _add_months(start, months) - timedelta(days=1)
    tenants = rng.sample(PEOPLE, rng.choice((1, 2, 2, 3)))
    landlord, agent = rng.choice(LANDLORDS), rng.choice([p for p in PEOPLE if p not in tenants])
    values = {
        "property_id": f"PRP-{number:05d}",
        "property_address": f"{rng.randint(1, 400)} {rng.choice(STREETS)}, Springfield",
        "landlord": landlord,
        **{f"tenant_{i}": name for i, name in enumerate(tenants, 1)},
        "signer_1": f"{agent} ({landlord})",
        **{f"signer_{i}": f"{name} ({name})" for i, name in enumerate(tenants, 2)},
        "term_start": start.isoformat(),
        "term_end": end.isoformat(),
        "monthly_rent": f"USD {rng.randint(900, 3500)}.00",
        "signature_date": (start - timedelta(days=rng.randint(10, 40))).isoformat(),
    }
    clauses = [name for name in CLAUSES if name != "Pets" or rng.random() < 0.5]
    _apply(defect, values, clauses, start)
    return Contract(number, defect, _render(number, defect, values, clauses, pages), DEFECTS[defect], values)


def _apply(defect: str, values: dict[str, str], clauses: list[str], start: date) -> None:
    if defect == "missing_landlord":
        del values["landlord"]
    elif defect == "missing_term_end":
        del values["term_end"]
    elif defect == "signer_without_name":
        values["signer_2"] = f"({values['tenant_1']})"
    elif defect == "tenant_without_signer":
        values["tenant_2" if "tenant_2" not in values else "tenant_9"] = "Oscar Lindqvist"
    elif defect == "term_end_before_start":
        values["term_end"] = (start - timedelta(days=1)).isoformat()
    elif defect == "signed_after_term_start":
        values["signature_date"] = (start + timedelta(days=3)).isoformat()
    elif defect == "term_too_long":
        values["term_end"] = (_add_months(start, 60) - timedelta(days=1)).isoformat()
    elif defect == "zero_rent":
        values["monthly_rent"] = "USD 0.00"
    elif defect == "malformed_date":
        values["term_start"] = f"{start.year}-13-01"
    elif defect == "missing_clause":
        clauses.remove("Termination")


def _add_months(day: date, months: int) -> date:
    total = day.month - 1 + months
    return day.replace(year=day.year + total // 12, month=total % 12 + 1)


LABELS = {
    "property_id": "Property ID",
    "property_address": "Property address",
    "landlord": "Landlord",
    "term_start": "Term start",
    "term_end": "Term end",
    "monthly_rent": "Monthly rent",
    "signature_date": "Signature date",
}


def _label(name: str) -> str:
    prefix, _, n = name.rpartition("_")
    return f"{prefix.capitalize()} {n}" if prefix in ("tenant", "signer") else LABELS[name]


HOUSE_RULES = (
    "Quiet hours run from ten in the evening until seven in the morning on every day of the week",
    "Common areas are kept clear of bicycles, furniture and personal belongings at all times",
    "Waste is sorted into the marked containers and taken out on the published collection days",
    "Balconies are not used for storage, open flames or the drying of laundry over the railing",
    "Repairs requested in writing are scheduled within ten working days unless urgent",
)


def _render(number: int, defect: str, values: dict[str, str], clauses: list[str], pages: int = 1) -> bytes:
    out = io.BytesIO()
    with pinned_epoch(2026, 12):
        pdf = canvas.Canvas(out, pagesize=A4, invariant=1)
        pdf.setTitle(f"Lease renewal {number:05d}")
        if defect != "no_text":
            form = defect not in ("text_only",)
            y = 790
            pdf.setFont("Helvetica-Bold", 14)
            pdf.drawString(60, y, "Residential Lease Renewal")
            pdf.setFont("Helvetica", 10)
            for name, value in values.items():
                y -= 22
                if form:
                    pdf.drawString(60, y, f"{_label(name)}:")
                    pdf.acroForm.textfield(
                        name=name,
                        value=value,
                        x=200,
                        y=y - 4,
                        width=320,
                        height=16,
                        fontName="Helvetica",
                        fontSize=9,
                        borderWidth=0,
                    )
                else:
                    pdf.drawString(60, y, f"{_label(name)}: {value}")
            if defect == "form_overrides_text":
                y -= 22
                pdf.drawString(60, y, "Monthly rent: 0")
            for heading in clauses:
                y -= 30
                pdf.setFont("Helvetica-Bold", 11)
                pdf.drawString(60, y, heading)
                pdf.setFont("Helvetica", 9)
                pdf.drawString(60, y - 14, CLAUSES[heading])
        pdf.showPage()
        for page in range(2, pages + 1):  # schedules: plain sentences, no `Label: value` line and no clause heading
            pdf.setFont("Helvetica", 9)
            for line in range(60 if defect != "no_text" else 0):
                rule = HOUSE_RULES[(page + line) % len(HOUSE_RULES)]
                pdf.drawString(60, 800 - line * 12.5, f"Schedule {page} rule {line + 1} {rule} (lease {number:05d})")
            pdf.showPage()
        pdf.save()
    return out.getvalue()
