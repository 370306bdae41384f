"""What the ledger's tables repeat from the hashed event bodies, so that `ledger verify` can check every copy.

The hash chain and the Merkle checkpoints cover only `evidence_audit_events.body`. Everything else the database
stores about an event is a copy or a function of bodies and must match them:

- `evidence_audit_events`: every column other than the chain's own (`seq`, `body`, `prev_hash`, `event_hash`)
  copies a body field (EVENT_COLUMNS);
- `evidence_publications`: each row copies its `bundle.published` event's details, column by column, and every such
  event has exactly one row;
- `evidence_jobs`: `job_id` is the hash of the identity columns (for a document job: of its tenant, idempotency key
  and batch in `evidence_document_jobs`, whose request digest is the row's `source_sha256`), the identity columns
  match the job's `job.accepted` event, and the state columns (JOB_STATE_COLUMNS) are the fold of the job's
  events. The lease expiry, the retry-budget start and the timestamps are operational clocks that no event
  records.
- `evidence_job_attempts`: each row is the ended attempt its `job.replayed` event names (replay_of, with the
  previous state and reason), and every such event since revision 0011 (those naming an attempt_id) has exactly
  one row. Its message, tries and clocks are copies of the job's row as the attempt ended.

- `evidence_tenants`: one row per tenant with a `tenant.registered` event, naming that event and, once the tenant
  has one, its `tenant.offboarded` event. `registered_at` is an operational clock.

`evidence_publication_claims` (who is publishing a tenant-month right now) is operational state too, like a lease
expiry: no event records it and the commit deletes it. What it protects, the linear corrections chain, is in the
hashed `bundle.published` events, and `Ledger.verify_chain` checks it there.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

from sqlalchemy import Row

from evidence_pipeline.ledger import job_states as states
from evidence_pipeline.ledger.job_states import DOCUMENT
from evidence_pipeline.ledger.jobs import JobKey, document_job_id
from evidence_pipeline.ledger.rows import Job, PublicationRecord
from evidence_pipeline.models import EventType

EVENT_COLUMNS = ("event_id", "event_type", "tenant", "period", "subject_sha256")
BODY_FIELDS = frozenset({*EVENT_COLUMNS, "actor", "recorded_at", "details"})
JOB_STATE_COLUMNS = ("state", "attempts", "lease_token", "lease_owner", "last_reason", "attempt_id", "replay_of")
_SUCCESS_EVENTS = (EventType.BUNDLE_PUBLISHED, EventType.DOCUMENT_PUBLISHED, EventType.EVIDENCE_DELIVERED)
TENANT_EVENTS = (EventType.TENANT_REGISTERED, EventType.TENANT_OFFBOARDED)
_FAILURE_STATES = {event: state for state, event in states.FAILED_AS.items()}


def is_event_body(body: object) -> bool:
    return (
        isinstance(body, dict)
        and body.keys() == BODY_FIELDS
        and isinstance(body["details"], dict)
        and all(isinstance(body[name], str) for name in BODY_FIELDS - {"details"})
    )


def publication_matches(row: PublicationRecord, details: dict[str, Any]) -> bool:
    """A publications row is a projection of its `bundle.published` event's details."""
    return all(details.get(column) == value for column, value in asdict(row).items() if column != "event_seq")


def job_matches(row: Job, events: Iterable[dict[str, Any]], document_job: Row[Any] | None = None) -> bool:
    """A jobs row is derived from its identity and from the events that name its job_id, oldest first;
    ``document_job`` is its evidence_document_jobs row, if it has one."""
    if row.fidelity == DOCUMENT:
        if (
            document_job is None
            or document_job.request_sha256 != row.source_sha256
            or row.job_id != (document_job_id(row.tenant, document_job.idempotency_key, document_job.batch_id))
        ):
            return False
    elif JobKey(**{name: getattr(row, name) for name in JobKey.__dataclass_fields__}).job_id != row.job_id:
        return False
    derived: dict[str, Any] = {
        "state": None,
        "attempts": 0,
        "lease_token": 0,
        "lease_owner": None,
        "last_reason": None,
        "attempt_id": None,
        "replay_of": None,
    }
    for body in events:
        kind, details = body["event_type"], body["details"]
        if kind == EventType.JOB_ACCEPTED and "reason" not in details:  # the acceptance that created the row
            if (body["tenant"], body["period"], body["subject_sha256"], details.get("fidelity")) != (
                row.tenant,
                row.period,
                row.source_sha256,
                row.fidelity,
            ):
                return False
            derived["state"] = states.ACCEPTED
        elif kind == EventType.JOB_RUNNING:
            derived.update(
                state=states.RUNNING,
                lease_token=details.get("lease_token"),
                lease_owner=body["actor"],
                attempts=details.get("attempt"),
            )
        elif kind in _SUCCESS_EVENTS:
            derived.update(state=states.SUCCEEDED, last_reason=None)
        elif kind in _FAILURE_STATES:
            derived.update(
                state=_FAILURE_STATES[kind], attempts=details.get("attempt"), last_reason=details.get("reason")
            )
        elif kind == EventType.JOB_REPLAYED:  # a new attempt; since 0011 (attempt_id) it starts with no reason
            derived.update(state=states.ACCEPTED, attempts=0)
            if "attempt_id" in details:
                derived.update(last_reason=None, attempt_id=details["attempt_id"], replay_of=details["replay_of"])
    return all(getattr(row, column) == derived[column] for column in JOB_STATE_COLUMNS)


def attempt_matches(row: dict[str, Any], replay: dict[str, Any]) -> bool:
    """An evidence_job_attempts row is the ended attempt its `job.replayed` event (``replay``) names, as it ended."""
    details = replay["details"]
    return replay["event_type"] == EventType.JOB_REPLAYED and (
        row["job_id"],
        row["attempt_id"],
        row["replayed_by"],
        row["state"],
        row["reason"],
        row["input_sha256"],
        row["policy_version"],
    ) == (
        details["job_id"],
        details["replay_of"],
        details["attempt_id"],
        details["previous_state"],
        details["previous_reason"],
        replay["subject_sha256"],
        details["policy_version"],
    )


def registry_matches(rows: Iterable[dict[str, Any]], tenant_events: dict[str, dict[str, int]]) -> bool:
    """The registry rows are exactly the registered tenants, each naming its first `tenant.registered` event and
    its first `tenant.offboarded` event (None while it has none). ``tenant_events``: tenant -> {type: seq}."""
    derived = {
        tenant: (seqs[EventType.TENANT_REGISTERED], seqs.get(EventType.TENANT_OFFBOARDED))
        for tenant, seqs in tenant_events.items()
        if EventType.TENANT_REGISTERED in seqs
    }
    return {row["tenant"]: (row["registered_seq"], row["offboarded_seq"]) for row in rows} == derived
