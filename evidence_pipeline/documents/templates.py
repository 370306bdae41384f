"""Redaction templates: an organization's and a program's rules merged into immutable, approved versions.

A template version is the canonical JSON of the merged rules, named by its sha256 (the same rules are the same
version). Its life is two ledger events, each an actor's signed action stored with its request:
`template.submitted` (the author, the effective time and the merged rules, hash-chained so they cannot change) and
`template.approved` (the approver, who must be another identity than the author). A redaction
job pins, at acceptance, the approved version whose effective time is the latest one not after that moment.

Rules (each has an ``id`` and a ``label``, and exactly one of):
  ``pattern``  an RE2 regular expression (Python's syntax without backreferences or lookaround: matching is
               linear in the text) searched, after normalization (matching.py), in page text, the text of images
               and every string of the file; the named group ``value`` (when present) is what is removed
  ``field``    a form field's fully qualified name: its value is removed
  ``region``   ``{"page": N, "rect": [x0, y0, x1, y1]}`` in PDF points: every glyph drawn inside is removed and
               the pixels of images under it are painted black
A program rule with the id of an organization rule replaces it; the merged rules are sorted by id.

A file may name the Tesseract languages its documents are in (``languages``: ``["eng", "jpn"]``, each one whose
data the engine has installed, OCR_LANGUAGE_UNAVAILABLE otherwise); the program's replace the organization's. Both
passes of a job read with exactly the languages of its pinned version (ocr.reading_in), English when none are
named; the merged template names them only when they are not that default, so a template that names none keeps
its version.
"""

from __future__ import annotations

import hashlib
import re
import time
from datetime import datetime, timezone

import re2
from sqlalchemy import Connection, select

from evidence_pipeline import jsonread
from evidence_pipeline.actors.authorize import ActionGate
from evidence_pipeline.actors.registry import Registry
from evidence_pipeline.actors.roles import Action
from evidence_pipeline.actors.verify import AuthorizedAction
from evidence_pipeline.canonical import canonical
from evidence_pipeline.documents import ocr
from evidence_pipeline.documents.matching import compile_pattern, normalize_glyphs
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.ledger.ledger import Ledger, event_body
from evidence_pipeline.models import EventType, LedgerEvent, TenantMonth, current_month

LABEL = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
RULE_ID = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
KINDS = ("organization", "program")
RULE_KINDS = ("pattern", "field", "region")
MAX_RULES = 200
MAX_LANGUAGES = 8  # each one read costs OCR time on every page it reads
MAX_TEMPLATE_BYTES = 64 * 1024
VERSION = re.compile(r"^[0-9a-f]{64}$")


def parse(data: bytes, kind: str) -> dict:
    """One template file (``kind`` organization or program), checked: TEMPLATE_INVALID says what is wrong."""
    doc = jsonread.loads(data, ReasonCode.TEMPLATE_INVALID, f"the {kind} template", MAX_TEMPLATE_BYTES)
    if not isinstance(doc, dict) or not {"kind", "name", "rules"} <= set(doc) <= {"kind", "name", "rules", "languages"}:
        raise EvidenceError(ReasonCode.TEMPLATE_INVALID, f"the {kind} template is {{kind, name, rules[, languages]}}")
    if doc["kind"] != kind:
        raise EvidenceError(ReasonCode.TEMPLATE_INVALID, f"expected a template of kind {kind}")
    if not isinstance(doc["name"], str) or not NAME.fullmatch(doc["name"]):
        raise EvidenceError(ReasonCode.TEMPLATE_INVALID, "a template name is a slug ^[a-z0-9][a-z0-9-]{0,62}$")
    rules = doc["rules"]
    if not isinstance(rules, list) or len(rules) > MAX_RULES:
        raise EvidenceError(ReasonCode.TEMPLATE_INVALID, f"rules is a list of at most {MAX_RULES}")
    ids = [_rule(rule) for rule in rules]
    if len(set(ids)) != len(ids):
        raise EvidenceError(ReasonCode.TEMPLATE_INVALID, f"the {kind} template names a rule id twice")
    if "languages" in doc:
        _languages(doc["languages"], kind)
    return doc


def _languages(languages, kind: str) -> None:
    if (
        not isinstance(languages, list)
        or not 0 < len(languages) <= MAX_LANGUAGES
        or not all(isinstance(name, str) for name in languages)
        or len(set(languages)) != len(languages)
    ):
        raise EvidenceError(
            ReasonCode.TEMPLATE_INVALID,
            f"the {kind} template's languages are a list of 1-{MAX_LANGUAGES} distinct Tesseract language names",
        )
    ocr.checked_languages(languages)


def _rule(rule) -> str:
    if not isinstance(rule, dict) or not isinstance(rule.get("id"), str) or not RULE_ID.fullmatch(rule["id"]):
        raise EvidenceError(ReasonCode.TEMPLATE_INVALID, "every rule has an id ^[a-z0-9][a-z0-9_.-]{0,63}$")
    where = f"rule {rule['id']}"
    kinds = [k for k in RULE_KINDS if k in rule]
    if len(kinds) != 1 or set(rule) != {"id", "label", kinds[0]}:
        raise EvidenceError(
            ReasonCode.TEMPLATE_INVALID, f"{where} has an id, a label and one of pattern, field, region"
        )
    if not isinstance(rule["label"], str) or not LABEL.fullmatch(rule["label"]):
        raise EvidenceError(ReasonCode.TEMPLATE_INVALID, f"{where}: a label is ^[a-z][a-z0-9_]{{0,31}}$")
    value = rule[kinds[0]]
    if kinds[0] == "pattern":
        if not isinstance(value, str) or not 0 < len(value) <= 500:
            raise EvidenceError(ReasonCode.TEMPLATE_INVALID, f"{where}: a pattern is 1-500 characters")
        try:
            compiled = compile_pattern(value)
        except re2.error:
            raise EvidenceError(
                ReasonCode.TEMPLATE_INVALID,
                f"{where}: the pattern is not an RE2 expression (no backreferences or lookaround)",
            ) from None
        if compiled.fullmatch(""):
            raise EvidenceError(ReasonCode.TEMPLATE_INVALID, f"{where}: the pattern matches the empty string")
        if normalize_glyphs(value) != value:
            # text is matched normalized: what normalization changes is never in it, and the second pass, which
            # reads text as written too, would refuse every document that shows it
            changed = next((f"U+{ord(c):04X}" for c in value if normalize_glyphs(c) != c), "a combining sequence")
            raise EvidenceError(
                ReasonCode.TEMPLATE_INVALID,
                f"{where}: the pattern holds {changed}, which text is normalized away from before it is matched "
                "(NFKC, invisible characters dropped); write the pattern as normalized text",
            )
    elif kinds[0] == "field":
        if not isinstance(value, str) or not 0 < len(value) <= 200:
            raise EvidenceError(ReasonCode.TEMPLATE_INVALID, f"{where}: a field is a name of 1-200 characters")
    elif not (
        isinstance(value, dict)
        and set(value) == {"page", "rect"}
        and isinstance(value["page"], int)
        and value["page"] >= 1
        and isinstance(value["rect"], list)
        and len(value["rect"]) == 4
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value["rect"])
        and value["rect"][0] < value["rect"][2]
        and value["rect"][1] < value["rect"][3]
    ):
        raise EvidenceError(ReasonCode.TEMPLATE_INVALID, f"{where}: a region is {{page >= 1, rect [x0, y0, x1, y1]}}")
    return rule["id"]


def merge(organization: dict, program: dict) -> dict:
    """The deterministic merge: program rules replace organization rules of the same id; sorted by id."""
    rules = {rule["id"]: rule for rule in organization["rules"]} | {rule["id"]: rule for rule in program["rules"]}
    if not rules:
        raise EvidenceError(ReasonCode.TEMPLATE_INVALID, "the merged template has no rules")
    merged = {
        "organization": organization["name"],
        "program": program["name"],
        "rules": [rules[rule_id] for rule_id in sorted(rules)],
    }
    named = program.get("languages", organization.get("languages", list(ocr.LANGUAGES)))
    return merged | ({"languages": named} if tuple(named) != ocr.LANGUAGES else {})


def languages(merged: dict) -> tuple[str, ...]:
    """The languages a job under this merged template reads in."""
    return tuple(merged.get("languages", ocr.LANGUAGES))


def version_id(merged: dict) -> str:
    return hashlib.sha256(canonical(merged).encode("utf-8")).hexdigest()


def submit(gate: ActionGate, envelope: object, organization: bytes, program: bytes) -> tuple[dict, bool]:
    """Record a new template version (`template.submitted`), an operator's signed action: the request (tenant T,
    args {version_id, effective_at}) names the merged rules by their version id. The same rules again return the
    existing version and record nothing. Returns (version, created). The texts are parsed only once the request
    is authenticated: an unsigned caller never makes the service parse (and compile the patterns of) anything."""
    found, parsed = [], []

    def perform(conn: Connection, _registry: Registry, authorized: AuthorizedAction) -> LedgerEvent | None:
        ledger, tenant = gate.ledger, _tenant_of(authorized)
        if not parsed:  # once, however often the transaction runs
            parsed.append(merge(parse(organization, "organization"), parse(program, "program")))
        merged = parsed[0]
        vid = version_id(merged)
        args = authorized.args
        if args.keys() != {"version_id", "effective_at"} or args["version_id"] != vid:
            raise EvidenceError(ReasonCode.ACTION_REQUEST_INVALID, "the request does not name these rules' version")
        effective = _moment(args["effective_at"])
        if _events(ledger, conn, tenant, EventType.TEMPLATE_SUBMITTED, vid):
            found[:] = [_versions(ledger, conn, tenant, vid)[0], False]
            return None
        details = {
            "version_id": vid,
            "effective_at": effective,
            "template": merged,
            "authorization": authorized.envelope,
        }
        event = ledger._append(
            conn,
            TenantMonth(tenant, current_month()),
            EventType.TEMPLATE_SUBMITTED,
            vid,
            actor=authorized.actor,
            details=details,
        )
        found[:] = [_versions(ledger, conn, tenant, vid)[0], True]
        return event

    gate.run(envelope, Action.TEMPLATE_SUBMIT, perform)
    return found[0], found[1]


def approve(gate: ActionGate, envelope: object) -> tuple[dict, bool]:
    """Approve a submitted version (`template.approved`), an approver's signed action (tenant T, args
    {version_id}); an identity of the author may not (TEMPLATE_SELF_APPROVAL: two names on one key are one
    identity). Returns (version, created)."""
    found = []

    def perform(conn: Connection, registry: Registry, authorized: AuthorizedAction) -> LedgerEvent | None:
        ledger, tenant = gate.ledger, _tenant_of(authorized)
        if authorized.args.keys() != {"version_id"}:
            raise EvidenceError(ReasonCode.ACTION_REQUEST_INVALID, "template.approve takes {version_id}")
        vid = _known(authorized.args["version_id"])
        [version_found] = _versions(ledger, conn, tenant, vid) or [None]
        if version_found is None:
            raise EvidenceError(ReasonCode.TEMPLATE_NOT_FOUND, "no such template version of this tenant")
        found[:] = [version_found, False]
        if version_found["approved_by"] is not None:
            return None
        if registry.same_identity(version_found["author"], authorized.actor):
            raise EvidenceError(
                ReasonCode.TEMPLATE_SELF_APPROVAL,
                "the author of a template version cannot approve it, under any name of the same key",
            )
        event = ledger._append(
            conn,
            TenantMonth(tenant, current_month()),
            EventType.TEMPLATE_APPROVED,
            vid,
            actor=authorized.actor,
            details={"version_id": vid, "authorization": authorized.envelope},
        )
        found[:] = [_versions(ledger, conn, tenant, vid)[0], True]
        return event

    gate.run(envelope, Action.TEMPLATE_APPROVE, perform)
    return found[0], found[1]


def _tenant_of(authorized: AuthorizedAction) -> str:
    if authorized.tenant is None:
        raise EvidenceError(ReasonCode.ACTION_REQUEST_INVALID, "a template action names its tenant")
    return authorized.tenant


def _moment(text: object) -> str:
    try:
        moment = datetime.fromisoformat(text) if isinstance(text, str) else None
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise EvidenceError(ReasonCode.ACTION_REQUEST_INVALID, "effective_at is an ISO 8601 time with its offset")
    return moment.astimezone(timezone.utc).isoformat(timespec="seconds")


def versions(ledger: Ledger, tenant: str) -> list[dict]:
    """Every version of the tenant, in the order submitted."""
    with ledger.engine.connect() as conn:
        return _versions(ledger, conn, tenant)


def version(ledger: Ledger, tenant: str, vid: str) -> dict:
    with ledger.engine.connect() as conn:
        [found] = _versions(ledger, conn, tenant, _known(vid)) or [None]
    if found is None:
        raise EvidenceError(ReasonCode.TEMPLATE_NOT_FOUND, "no such template version of this tenant")
    return found


def approved_version(ledger: Ledger, tenant: str, vid: str) -> dict:
    """A version a job may run under: submitted and approved (what a job pinned at acceptance)."""
    found = version(ledger, tenant, vid)
    if found["approved_by"] is None:
        raise EvidenceError(ReasonCode.TEMPLATE_NOT_IN_EFFECT, "the template version is not approved")
    return found


def in_effect(ledger: Ledger, tenant: str, at: float | None = None) -> dict:
    """The approved version with the latest effective time not after ``at`` (later approval wins a tie)."""
    moment = datetime.fromtimestamp(time.time() if at is None else at, timezone.utc)
    candidates = [
        v
        for v in versions(ledger, tenant)
        if v["approved_by"] is not None and datetime.fromisoformat(v["effective_at"]) <= moment
    ]
    if not candidates:
        raise EvidenceError(ReasonCode.TEMPLATE_NOT_IN_EFFECT, "no approved redaction template is in effect")
    return max(candidates, key=lambda v: (v["effective_at"], v["approval_seq"]))


def pin(ledger: Ledger, tenant: str) -> dict:
    """What a redaction job records at acceptance: the version in effect now, with its rules (the worker checks
    that they hash to the version id)."""
    found = in_effect(ledger, tenant)
    return {"template_version": found["version_id"], "template": found["template"]}


def _known(vid) -> str:
    if not isinstance(vid, str) or not VERSION.fullmatch(vid):
        raise EvidenceError(ReasonCode.TEMPLATE_NOT_FOUND, "a template version id is 64 hex digits")
    return vid


def _events(ledger: Ledger, conn: Connection, tenant: str, event_type: str, vid: str | None = None) -> list:
    events = ledger.audit_events.c
    query = select(events.seq, events.body).where(events.tenant == tenant, events.event_type == str(event_type))
    if vid is not None:
        query = query.where(events.subject_sha256 == vid)
    return [(seq, event_body(body)) for seq, body in conn.execute(query.order_by(events.seq))]


def _versions(ledger: Ledger, conn: Connection, tenant: str, vid: str | None = None) -> list[dict]:
    approvals = {
        body["subject_sha256"]: (seq, body)
        for seq, body in _events(ledger, conn, tenant, EventType.TEMPLATE_APPROVED, vid)
    }
    found = []
    for _, body in _events(ledger, conn, tenant, EventType.TEMPLATE_SUBMITTED, vid):
        details = body["details"]
        seq, approval = approvals.get(details["version_id"], (None, None))
        found.append(
            {
                "version_id": details["version_id"],
                "author": body["actor"],
                "submitted_at": body["recorded_at"],
                "effective_at": details["effective_at"],
                "approved_by": approval["actor"] if approval else None,
                "approved_at": approval["recorded_at"] if approval else None,
                "approval_seq": seq,
                "template": details["template"],
            }
        )
    return found
