"""`contract-review`: a lease contract checked against a pinned ruleset, a decision recorded, an approval signed.

Fields come from the AcroForm first (a field named like the ruleset's, e.g. ``tenant_2``) and from the text second
(a line ``Tenant 2: …``). A contract missing required fields, or failing a rule, is a decision (`rejected`, with
the missing fields and failed rules named, REVIEW_POLICY_REJECTED), not a crash; a document that cannot be
reviewed at all (no form and no text, or text that does not extract) is REVIEW_INPUT_INVALID. An approved
contract gets the service's PAdES approval signature (the worker appends it, `SIGNED`). Deterministic: the same
contract under the same ruleset gives the same ``decision.json`` bytes.
"""

from __future__ import annotations

import re
from datetime import date, timedelta
from decimal import Decimal, InvalidOperation

from pyhanko.pdf_utils.misc import PdfError
from pypdf import PdfReader, apply_configuration
from pypdf.errors import LimitReachedError

from evidence_pipeline.document_formats import DECISION
from evidence_pipeline.documents import canary
from evidence_pipeline.documents import ruleset as rulesets
from evidence_pipeline.documents.gate import LIMITS, PARSE_ERRORS
from evidence_pipeline.documents.registry import Operation, ProcessorInput, ProcessorResult, register
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.ledger.document_jobs import WORKER_VERSION
from evidence_pipeline.signing.dsse import canonical_json
from evidence_pipeline.signing.pdf_reader import open_pdf

SIGNED = "approved.pdf"  # the contract as uploaded, plus the service's approval signature (an incremental update)
DECISION_SCHEMA = "evidence-review-decision/v1"
MAX_TEXT_CHARS = 2_000_000  # all pages' extracted text together
MAX_REPEATED = 20  # tenant_1 … tenant_20
MAX_VALUE_CHARS = 500  # a field's value as the decision records it
_MONEY = re.compile(r"^(?:[A-Z]{3} ?|\$)?(\d{1,9}(?:,\d{3})*|\d+)(\.\d{2})?$")
# What pypdf's and pyHanko's readers raise on a hostile (if gated) document; font maps can divide by zero, too.
_EXTRACTION_ERRORS = (LimitReachedError, RecursionError, ArithmeticError, PdfError, *PARSE_ERRORS)


def review_contract(inputs: list[ProcessorInput], options: dict[str, str], pinned: dict) -> ProcessorResult:
    (document,) = inputs
    ruleset = rulesets.load(options["ruleset"], options["ruleset_sha256"])
    fields, decision = evaluate(document.file, ruleset)
    body = {
        "schema": DECISION_SCHEMA,
        "decision": decision["decision"],
        "ruleset": {"version": ruleset.version, "sha256": ruleset.sha256},
        "worker_version": WORKER_VERSION,
        "input": {"document_id": document.document_id, "sha256": document.sha256, "bytes": document.size},
        "fields": fields,
        "missing": decision["missing"],
        "rules": decision["rules"],
    }
    approved = decision["decision"] == "approved"
    summary = {
        "decision": decision["decision"],
        "ruleset": ruleset.version,
        "ruleset_sha256": ruleset.sha256,
        "missing": decision["missing"],
        "failed_rules": [r["id"] for r in decision["rules"] if r["outcome"] == "fail"],
    }
    return ProcessorResult(
        {DECISION: canonical_json(body) + b"\n"},
        summary,
        signed=SIGNED if approved else None,
        rejected=None if approved else ReasonCode.REVIEW_POLICY_REJECTED.value,
        message=None if approved else _rejection(summary),
    )


def _rejection(summary: dict) -> str:
    """ "rejected under lease-review/2026.1: missing landlord; failed rules: none": field names and rule ids,
    never a value from the document."""
    return (
        f"rejected under {summary['ruleset']}: missing {', '.join(summary['missing']) or 'none'}; "
        f"failed rules: {', '.join(summary['failed_rules']) or 'none'}"
    )


def evaluate(file, ruleset: rulesets.Ruleset) -> tuple[dict[str, dict], dict]:
    """(the fields found, the decision) of a gated contract under ``ruleset``: what a job and a shadow run review."""
    fields, text = extract(file, ruleset)
    return fields, decide(ruleset, fields, text)


def extract(file, ruleset: rulesets.Ruleset) -> tuple[dict[str, dict], str]:
    """({field: {"value", "source"}}, the text): form fields first, then ``Label: value`` lines of the text.
    REVIEW_INPUT_INVALID when nothing can be extracted (pypdf fails, or neither a form nor any text)."""
    try:
        file.seek(0)
        with apply_configuration(**LIMITS):
            reader = PdfReader(file, strict=True)
            form = {name: str(value) for name, value in (reader.get_form_text_fields() or {}).items() if value}
            text, size = [], 0
            for page in reader.pages:
                text.append(page.extract_text() or "")
                size += len(text[-1])
                if size > MAX_TEXT_CHARS:
                    raise EvidenceError(ReasonCode.REVIEW_INPUT_INVALID, "the text is too long to review")
        open_pdf(file)  # the approval signature is appended with pyHanko: it must read it too
    except _EXTRACTION_ERRORS as error:
        raise EvidenceError(
            ReasonCode.REVIEW_INPUT_INVALID, f"the contract's fields and text do not extract ({type(error).__name__})"
        ) from None
    joined = "\n".join(text)
    if not form and not joined.strip():
        raise EvidenceError(ReasonCode.REVIEW_INPUT_INVALID, "the document has neither form fields nor text")
    lines = {}
    for line in joined.splitlines():
        label, colon, value = line.partition(":")
        if colon and value.strip():
            lines.setdefault(label.strip().casefold(), value.strip())
    found = {}
    for name, label in _names(ruleset):
        if form.get(name, "").strip():
            found[name] = {"value": form[name].strip()[:MAX_VALUE_CHARS], "source": "form"}
        elif label.casefold() in lines:
            found[name] = {"value": lines[label.casefold()][:MAX_VALUE_CHARS], "source": "text"}
    return found, joined


def _names(ruleset: rulesets.Ruleset):
    """(form field name, text label) of every field the ruleset can read, repeated ones numbered."""
    for field in ruleset.fields:
        if field.repeated:
            for n in range(1, MAX_REPEATED + 1):
                yield f"{field.name}_{n}", f"{field.label} {n}"
        else:
            yield field.name, field.label


def decide(ruleset: rulesets.Ruleset, found: dict[str, dict], text: str) -> dict:
    """The decision: every required field present and every rule passed, or `rejected` naming what is not."""
    values = {name: entry["value"] for name, entry in found.items()}
    missing = [
        f"{field.name}_1" if field.repeated else field.name
        for field in ruleset.fields
        if (f"{field.name}_1" if field.repeated else field.name) not in values
    ]
    signers = _signers(ruleset, values)
    missing += [name for name, (person, _) in signers.items() if not person]  # a signer line without a name
    parsed = _parse_values(ruleset, values)
    rules = [_check(rule, values, parsed, signers, text) for rule in ruleset.rules]
    approved = not missing and all(r["outcome"] == "pass" for r in rules)
    return {"decision": "approved" if approved else "rejected", "missing": sorted(set(missing)), "rules": rules}


def _signers(ruleset: rulesets.Ruleset, values: dict[str, str]) -> dict[str, tuple[str, str]]:
    """Each value of a signer field -> (name, party signed for), from ``Jane Doe (Maple Homes LLC)``."""
    signer_fields = {field.name for field in ruleset.fields if field.type == "signer"}
    signers = {}
    for name, value in values.items():
        if name in signer_fields or name.rpartition("_")[0] in signer_fields:
            signers[name] = signer(value) or (value, "")
    return signers


def signer(value: str) -> tuple[str, str] | None:
    """(name, party) of ``Name (Party)``: one pair of parentheses, at the end, around a party. Split, not matched:
    the regex it replaces (a lazy name, then spaces, then the party) backtracked quadratically over a value of spaces
    (40,000 took 4 s)."""
    head, opened, party = value.removesuffix(")").partition("(")
    if not value.endswith(")") or not opened or not party or "(" in party or ")" in head + party:
        return None
    return head.strip(), party.strip()


def _parse_values(ruleset: rulesets.Ruleset, values: dict[str, str]) -> dict[str, object]:
    """Each present date or money value parsed (None when it does not parse)."""
    parsed: dict[str, object] = {}
    for field in ruleset.fields:
        if field.type in ("text", "signer") or field.repeated or field.name not in values:
            continue
        parsed[field.name] = (_date if field.type == "date" else _money)(values[field.name])
    return parsed


def _date(value: str) -> date | None:
    try:
        return date.fromisoformat(value) if re.fullmatch(r"\d{4}-\d{2}-\d{2}", value) else None
    except ValueError:
        return None


def _money(value: str) -> Decimal | None:
    match = _MONEY.fullmatch(value.replace(" ", "") if value.startswith("$") else value)
    if not match:
        return None
    try:
        return Decimal(match[1].replace(",", "") + (match[2] or ""))
    except InvalidOperation:
        return None


def _check(rule: dict, values: dict, parsed: dict, signers: dict, text: str) -> dict:
    """One rule's finding: pass, fail (with what failed) or not_evaluated (its inputs are missing or malformed)."""
    check = rule["check"]
    if check == "well_formed":
        bad = sorted(name for name, value in parsed.items() if value is None)
        bad += sorted(name for name, (_, party) in signers.items() if not party)
        return _finding(rule, not bad, "malformed: " + ", ".join(bad) if bad else "")
    if check == "dates_in_order":
        dates = [parsed.get(name) for name in rule["fields"]]
        if any(d is None for d in dates):
            return _finding(rule, None, "a date is missing or malformed")
        ordered = all(a <= b for a, b in zip(dates, dates[1:])) and dates[-2] < dates[-1]
        return _finding(rule, ordered, "" if ordered else " ≤ ".join(rule["fields"]) + " does not hold")
    if check == "term_months":
        start, end = parsed.get(rule["start"]), parsed.get(rule["end"])
        if start is None or end is None:
            return _finding(rule, None, "the term is missing or malformed")
        months = _months(start, end)
        within = rule["min"] <= months <= rule["max"]
        return _finding(rule, within, f"{months} months, allowed {rule['min']}..{rule['max']}")
    if check == "positive":
        amount = parsed.get(rule["field"])
        if amount is None:
            return _finding(rule, None, f"{rule['field']} is missing or malformed")
        return _finding(rule, amount > 0, "" if amount > 0 else f"{rule['field']} is not positive")
    if check == "parties_signed":
        parties = [
            name
            for prefix in rule["parties"]
            for name in sorted(values)
            if name == prefix or re.fullmatch(rf"{re.escape(prefix)}_\d+", name)
        ]
        signed = {party.casefold() for person, party in signers.values() if person}
        unsigned = [name for name in parties if values[name].casefold() not in signed]
        return _finding(rule, not unsigned, "no signer for: " + ", ".join(unsigned) if unsigned else "")
    # clauses_present: a clause is present when its heading appears in the text
    absent = [clause for clause in rule["clauses"] if clause.casefold() not in text.casefold()]
    return _finding(rule, not absent, "absent: " + ", ".join(absent) if absent else "")


def _finding(rule: dict, passed: bool | None, detail: str) -> dict:
    outcome = "not_evaluated" if passed is None else "pass" if passed else "fail"
    return {"id": rule["id"], "outcome": outcome, "detail": detail}


def _months(start: date, end: date) -> int:
    """Whole months from ``start`` to the day after ``end`` (the term's last day): 2026-01-01..2026-12-31 is 12."""
    after = end + timedelta(days=1)
    return (after.year - start.year) * 12 + after.month - start.month - (1 if after.day < start.day else 0)


CONTRACT_REVIEW = register(
    Operation(
        name="contract-review",
        processor=review_contract,
        options={"ruleset": rulesets.versions()},
        inputs=(1, 1),
        pin=lambda options: rulesets.pin(options["ruleset"]),
        route=canary.route,
        staged=True,
        outcomes=frozenset({ReasonCode.REVIEW_INPUT_INVALID, ReasonCode.REVIEW_POLICY_REJECTED}),
    )
)
