"""A reviewer's decision on a part, and what a merge admits: parts approved by a contract review or by a reviewer.

`part.decide` (the request's tenant; args {artifact_id, decision: "approved" or "rejected", reason}) is a reviewer's
or an approver's signed action (actors/roles.py), recorded as a `part.decided` event of the tenant with the part's
digest and the signed request: `ledger verify` re-checks offline who decided, that they could, and that the event
says what they signed. The part must be a derived artifact of that tenant (its `document.derived` event), else
DOCUMENT_NOT_FOUND: another tenant's parts do not exist for this one.

Four-eyes holds by construction: a part is made by the tenant's client (an upload and a split, under an API token,
which can never act as an actor), never by an actor, so whoever decides on it is another identity than its author.
A decision approves no actor's work, so a reviewer may change their mind: the latest decision wins.

At a merge's admission, a part's decision is the latest, by ledger position, of its latest contract review's
`document.published` event and its latest `part.decided` event; the merge admits the part when that one approves it
(a rejection after an approval is MERGE_INPUT_NOT_APPROVED) and pins it in its request: a review as {artifact_id,
review_job_id, decision_sha256}, a reviewer's decision as {artifact_id, decision_event_id, decided_by}. The worker
re-checks the pin before it merges (``pin_holds``) and `evidence lineage` walks it (audit/lineage.py, with
``decision_problem``, document_formats.py).
"""

from __future__ import annotations

from sqlalchemy import Connection

from evidence_pipeline.actors.authorize import ActionGate
from evidence_pipeline.actors.registry import Registry
from evidence_pipeline.actors.roles import Action
from evidence_pipeline.actors.verify import AuthorizedAction
from evidence_pipeline.document_formats import DECISION, decision_problem
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.ledger.documents import find_event_in
from evidence_pipeline.ledger.rows import DocumentJob
from evidence_pipeline.models import EventType, LedgerEvent, TenantMonth, current_month
from evidence_pipeline.runtime import Runtime

DECISIONS = ("approved", "rejected")
MAX_REASON_CHARS = 500
_ARGS = frozenset({"artifact_id", "decision", "reason"})


def decide_part(gate: ActionGate, rt: Runtime, envelope: object) -> dict:
    """Record a reviewer's signed decision on one of the request tenant's parts; returns the event's details."""
    ledger = rt.document_records.ledger
    recorded: list[dict] = []

    def perform(conn: Connection, _registry: Registry, authorized: AuthorizedAction) -> LedgerEvent:
        tenant, args = authorized.tenant, authorized.args
        _check_request(tenant, args)
        derived = find_event_in(
            conn, ledger, tenant, EventType.DOCUMENT_DERIVED, name="artifact_id", value=args["artifact_id"]
        )
        if derived is None:
            raise EvidenceError(ReasonCode.DOCUMENT_NOT_FOUND, "no derived artifact of the tenant has this id")
        sha256 = derived.parsed["subject_sha256"]
        details = {
            "artifact_id": args["artifact_id"],
            "sha256": sha256,
            "decision": args["decision"],
            "reason": args["reason"],
            "authorization": authorized.envelope,
        }
        event = ledger._append(
            conn,
            TenantMonth(tenant, current_month()),
            EventType.PART_DECIDED,
            sha256,
            actor=authorized.actor,
            details=details,
        )
        recorded[:] = [details]  # the last run of the transaction is the one committed
        return event

    gate.run(envelope, Action.PART_DECIDE, perform)
    return recorded[0]


def _check_request(tenant: str | None, args: dict) -> None:
    reason = args.get("reason")
    if (
        tenant is None
        or args.keys() != _ARGS
        or not isinstance(args["artifact_id"], str)
        or args["decision"] not in DECISIONS
        or not isinstance(reason, str)
        or not 1 <= len(reason) <= MAX_REASON_CHARS
        or not reason.isprintable()
    ):
        raise EvidenceError(
            ReasonCode.ACTION_REQUEST_INVALID,
            "part.decide names its tenant and takes {artifact_id, "
            f"decision: approved|rejected, reason: 1..{MAX_REASON_CHARS} printable characters}}",
        )


# --- a merge's admission ---------------------------------------------------------------------------------------


def approved_inputs(rt: Runtime, tenant: str, inputs: list[str]) -> dict:
    """A merge's admission: every input is a derivative whose latest decision approves it, and all derive from one
    original. Pins each input's approving decision in the request (module docstring)."""
    pins, originals = [], set()
    for artifact_id in inputs:
        derived = rt.document_records.find_event(tenant, EventType.DOCUMENT_DERIVED, "artifact_id", artifact_id)
        if derived is None:
            raise EvidenceError(ReasonCode.MERGE_INPUT_NOT_APPROVED, "a merge input is not a derived artifact")
        originals.add(derived.parsed["details"]["lineage"]["original_digest"])
        pins.append(approving_pin(rt, tenant, artifact_id))
    if len(originals) > 1:
        raise EvidenceError(ReasonCode.INPUTS_INVALID, "a merge's inputs must derive from one original")
    return {"reviews": pins}


def approving_pin(rt: Runtime, tenant: str, artifact_id: str) -> dict:
    """The pin of the part's latest decision, a review's or a reviewer's; MERGE_INPUT_NOT_APPROVED unless it
    approves the part."""
    review = rt.document_jobs.latest_review(tenant, artifact_id)
    published = (
        None
        if review is None
        else rt.document_records.find_event(tenant, EventType.DOCUMENT_PUBLISHED, "job_id", review.job_id, newest=True)
    )
    decided = rt.document_records.find_event(tenant, EventType.PART_DECIDED, "artifact_id", artifact_id, newest=True)
    if decided is None or (published is not None and published.seq > decided.seq):
        return review_pin(review, artifact_id)
    event = decided.parsed
    if event["details"]["decision"] != "approved":
        raise EvidenceError(ReasonCode.MERGE_INPUT_NOT_APPROVED, "a reviewer rejected a merge input")
    return {"artifact_id": artifact_id, "decision_event_id": event["event_id"], "decided_by": event["actor"]}


def review_pin(review: DocumentJob | None, artifact_id: str) -> dict:
    """What a merge records of an input's review: its job and decision digest; MERGE_INPUT_NOT_APPROVED unless the
    review committed an approval of exactly that input."""
    outputs = (review.outputs if review is not None else None) or {}
    decision = [a for a in outputs.get("artifacts", []) if a["name"] == DECISION]
    if (
        review is None
        or review.state != "succeeded"
        or review.request["inputs"] != [artifact_id]
        or (outputs.get("summary") or {}).get("decision") != "approved"
        or len(decision) != 1
    ):
        raise EvidenceError(ReasonCode.MERGE_INPUT_NOT_APPROVED, "a merge input has no approved review decision")
    return {"artifact_id": artifact_id, "review_job_id": review.job_id, "decision_sha256": decision[0]["sha256"]}


def pin_holds(rt: Runtime, tenant: str, pin: dict, sha256: str) -> None:
    """The worker's re-check of what admission pinned, before it merges the input of digest ``sha256``:
    MERGE_INPUT_NOT_APPROVED unless the pinned review or reviewer's decision still approves exactly those bytes."""
    if "review_job_id" in pin:
        review_pin(rt.document_jobs.job(tenant, pin["review_job_id"]), pin["artifact_id"])
        return
    event = rt.document_records.event(tenant, EventType.PART_DECIDED, pin["decision_event_id"])
    problem = "no such decision" if event is None else decision_problem(event.parsed, pin, sha256)
    if problem is not None:
        raise EvidenceError(ReasonCode.MERGE_INPUT_NOT_APPROVED, f"a merge input's pinned decision: {problem}")
