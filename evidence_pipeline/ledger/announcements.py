"""The webhook outbox's tables and the deliveries announced in the transaction of the ledger event they announce.

Below the ledger's core: the core's transitions (jobs.py ``_fail``, ledger.py ``publish``) and the pieces
(document_jobs.py ``complete``, batches.py) call one function here right after their event is appended, on the same
connection, and that function reads the tenant's webhook once: ``job_ended`` for every transition that ends a
document job: a `job.<state>` delivery, and a `batch.finished` one when the job was the last of its batch to end;
``batch_ended`` for a batch stopped before it was dispatched; ``bundle_published`` for every bundle a tenant-month
run commits: `evidence.delivered`, whoever asked for it (the schedule, a backfill, a landing, a tenant's evidence
request, whose job then ends with its own `job.succeeded`). Only a tenant with a webhook (migration 0012) gets rows.
Because every appending transaction contends for the chain head, the batch check made after the append sees every
sibling that committed before it. The tables it reads besides its own come from the caller (``JobTables``: the
Ledger), so nothing here imports the core.

A delivery's id is derived from the event it announces and its type: a transaction that runs again (a lost race)
writes the same id, and the body never changes between attempts. Bodies carry ids, kinds, codes, digests and
ledger positions only, never document content, file names, locations or messages.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Protocol

from sqlalchemy import Connection, Float, Integer, Row, String, Table, Text, column, func, select, table

from evidence_pipeline.canonical import canonical
from evidence_pipeline.ledger.job_states import ACCEPTED, RUNNING
from evidence_pipeline.models import LedgerEvent

PENDING, DELIVERED, DEAD, CANCELLED = "pending", "delivered", "dead", "cancelled"
JOB_SUCCEEDED, JOB_REJECTED, JOB_DEAD = "job.succeeded", "job.rejected", "job.dead"
BATCH_FINISHED, EVIDENCE_DELIVERED = "batch.finished", "evidence.delivered"
WEBHOOK_EVENTS = (JOB_SUCCEEDED, JOB_REJECTED, JOB_DEAD, BATCH_FINISHED, EVIDENCE_DELIVERED)
_DELIVERY_IDS = uuid.UUID("7f0c7a52-5b0e-4d36-9d8e-1f6f5d3c2a10")  # the namespace of delivery ids (uuid5)

# The tables as migration 0012 creates them (lightweight: no reflection, so opening a ledger costs nothing more).
webhooks = table(
    "evidence_webhooks",
    column("tenant", String),
    column("url", String),
    column("secret", String),
    column("previous_secret", String),
    column("previous_until", Float),
    column("config_seq", Integer),
    column("updated_at", Float),
)
outbox = table(
    "evidence_webhook_outbox",
    column("delivery_id", String),
    column("tenant", String),
    column("event_type", String),
    column("event_seq", Integer),
    column("payload", Text),
    column("state", String),
    column("attempts", Integer),
    column("next_attempt_at", Float),
    column("claimed_until", Float),
    column("last_code", String),
    column("last_status", Integer),
    column("created_at", Float),
    column("updated_at", Float),
)


class JobTables(Protocol):
    """The ledger's tables an announcement reads (the Ledger has them, reflected)."""

    jobs: Table
    document_jobs: Table
    batches: Table


def job_ended(
    conn: Connection, ledger: JobTables, job_id: str, *, state: str, reason: str | None, event: LedgerEvent
) -> None:
    """Announce the end of a document job (``state``: succeeded, rejected or dead) committed by ``event``."""
    docs = ledger.document_jobs.c
    job = conn.execute(select(docs.tenant, docs.operation, docs.batch_id).where(docs.job_id == job_id)).first()
    if job is None or subscription_in(conn, job.tenant) is None:
        return  # a tenant-month's own job (no tenant asked for it), or a tenant without a webhook
    data = {"job_id": job_id, "operation": job.operation, "state": state}
    _announce(conn, job.tenant, f"job.{state}", event, data | ({"reason": reason} if reason else {}))
    if job.batch_id:
        _batch_finished(conn, ledger, job.tenant, job.batch_id, event=event, states=("dispatched", "cancelled"))


def batch_ended(
    conn: Connection, ledger: JobTables, tenant: str, batch_id: str, *, event: LedgerEvent, states: tuple[str, ...]
) -> None:
    """Announce `batch.finished` if the batch is in one of ``states`` and none of its children is still to end."""
    if subscription_in(conn, tenant) is not None:
        _batch_finished(conn, ledger, tenant, batch_id, event=event, states=states)


def bundle_published(conn: Connection, event: LedgerEvent) -> None:
    """Announce `evidence.delivered` for the bundle whose `bundle.published` event is ``event``."""
    body = event.body
    if subscription_in(conn, body["tenant"]) is None:
        return
    details = body["details"]
    _announce(
        conn,
        body["tenant"],
        EVIDENCE_DELIVERED,
        event,
        {
            "period": body["period"],
            "supersedes": (details.get("supersedes") or {}).get("identity"),
            **{name: details[name] for name in ("identity", "report_sha256", "statement_sha256")},
        },
    )


def _batch_finished(
    conn: Connection, ledger: JobTables, tenant: str, batch_id: str, *, event: LedgerEvent, states: tuple[str, ...]
) -> None:
    batches, docs, jobs = ledger.batches.c, ledger.document_jobs.c, ledger.jobs.c
    batch = conn.execute(select(batches.state, batches.jobs).where(batches.batch_id == batch_id)).first()
    if batch is None or batch.state not in states:
        return
    by_state = (
        select(jobs.state, func.count())
        .join(ledger.document_jobs, docs.job_id == jobs.job_id)
        .where(docs.batch_id == batch_id)
        .group_by(jobs.state)
    )
    counts: dict[str, int] = {state: count for state, count in conn.execute(by_state)}
    if counts.get(ACCEPTED, 0) or counts.get(RUNNING, 0):
        return
    _announce(
        conn,
        tenant,
        BATCH_FINISHED,
        event,
        {"batch_id": batch_id, "jobs": batch.jobs, "cancelled": batch.state == "cancelled", "counts": counts},
    )


def _announce(conn: Connection, tenant: str, event_type: str, event: LedgerEvent, data: dict[str, Any]) -> None:
    delivery_id = "msg_" + uuid.uuid5(_DELIVERY_IDS, f"{event.body['event_id']}/{event_type}").hex
    if conn.execute(select(outbox.c.delivery_id).where(outbox.c.delivery_id == delivery_id)).first() is not None:
        return
    payload = {
        "type": event_type,
        "timestamp": event.body["recorded_at"],
        "data": data | {"tenant": tenant, "ledger_seq": event.seq},
    }
    now = time.time()
    conn.execute(
        outbox.insert().values(
            delivery_id=delivery_id,
            tenant=tenant,
            event_type=event_type,
            event_seq=event.seq,
            payload=canonical(payload),
            state=PENDING,
            attempts=0,
            next_attempt_at=now,
            created_at=now,
            updated_at=now,
        )
    )


def subscription_in(conn: Connection, tenant: str) -> Row[*tuple[Any, ...]] | None:
    """The tenant's webhook row as this transaction sees it, or None."""
    return conn.execute(select(webhooks).where(webhooks.c.tenant == tenant)).first()
