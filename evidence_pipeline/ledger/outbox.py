"""The webhook outbox: deliveries announced in the transaction of the ledger event they announce, and their state.

Each announcing transaction calls one function here right after its event is appended, on the same connection,
and that function reads the tenant's webhook once: ``job_ended`` for every transition that ends a document job
(jobs.py ``_fail``, document_jobs.py ``complete``): a `job.<state>` delivery, and a `batch.finished` one when the
job was the last of its batch to end; ``batch_ended`` for a batch stopped before it was dispatched (batches.py);
``bundle_published`` for every bundle a tenant-month run commits (ledger.py ``publish``): `evidence.delivered`,
whoever asked for it (the schedule, a backfill, a landing, a tenant's evidence request, whose job then ends with
its own `job.succeeded`). Only a tenant with a webhook (migration 0012) gets rows; offboarding removes the webhook
and cancels what was not delivered (``remove_tenant``). Because every appending transaction contends for the
chain head, the batch check made after the append sees every sibling that committed before it.

A delivery's id is derived from the event it announces and its type: a transaction that runs again (a lost race)
writes the same id, and the body never changes between attempts. Bodies carry ids, kinds, codes, digests and
ledger positions only, never document content, file names, locations or messages.

Deliverers take due rows with a claim (compare-and-swap on ``claimed_until``), so two of them (the Dagster sensor and
`evidence webhook deliver`) never send one row at once; a claim that outlives a dead deliverer simply expires.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Collection
from datetime import datetime, timezone

from sqlalchemy import Connection, Float, Integer, String, Text, column, func, or_, select, table

from evidence_pipeline.errors import ReasonCode
from evidence_pipeline.ledger.db import classified_errors
from evidence_pipeline.ledger.jobs import ACCEPTED, RUNNING
from evidence_pipeline.ledger.ledger import Ledger, canonical, sha256_text
from evidence_pipeline.models import LedgerEvent

PENDING, DELIVERED, DEAD, CANCELLED = "pending", "delivered", "dead", "cancelled"
JOB_SUCCEEDED, JOB_REJECTED, JOB_DEAD = "job.succeeded", "job.rejected", "job.dead"
BATCH_FINISHED, EVIDENCE_DELIVERED = "batch.finished", "evidence.delivered"
WEBHOOK_EVENTS = (JOB_SUCCEEDED, JOB_REJECTED, JOB_DEAD, BATCH_FINISHED, EVIDENCE_DELIVERED)
_DELIVERY_IDS = uuid.UUID("7f0c7a52-5b0e-4d36-9d8e-1f6f5d3c2a10")  # the namespace of delivery ids (uuid5)

# The tables as migration 0012 creates them (lightweight: no reflection, so opening a ledger costs nothing more).
webhooks = table(
    "evidence_webhooks",
    column("tenant", String), column("url", String), column("secret", String), column("previous_secret", String),
    column("previous_until", Float), column("config_seq", Integer), column("updated_at", Float),
)
outbox = table(
    "evidence_webhook_outbox",
    column("delivery_id", String), column("tenant", String), column("event_type", String),
    column("event_seq", Integer), column("payload", Text), column("state", String), column("attempts", Integer),
    column("next_attempt_at", Float), column("claimed_until", Float), column("last_code", String),
    column("last_status", Integer), column("created_at", Float), column("updated_at", Float),
)


def job_ended(conn: Connection, ledger: Ledger, job_id: str, state: str, reason: str | None,
              event: LedgerEvent) -> None:
    """Announce the end of a document job (``state``: succeeded, rejected or dead) committed by ``event``."""
    docs = ledger.document_jobs.c
    job = conn.execute(select(docs.tenant, docs.operation, docs.batch_id).where(docs.job_id == job_id)).first()
    if job is None or subscription_in(conn, job.tenant) is None:
        return  # a tenant-month's own job (no tenant asked for it), or a tenant without a webhook
    data = {"job_id": job_id, "operation": job.operation, "state": state}
    _announce(conn, job.tenant, f"job.{state}", event, data | ({"reason": reason} if reason else {}))
    if job.batch_id:
        _batch_finished(conn, ledger, job.tenant, job.batch_id, event, ("dispatched", "cancelled"))


def batch_ended(conn: Connection, ledger: Ledger, tenant: str, batch_id: str, event: LedgerEvent,
                states: tuple[str, ...]) -> None:
    """Announce `batch.finished` if the batch is in one of ``states`` and none of its children is still to end."""
    if subscription_in(conn, tenant) is not None:
        _batch_finished(conn, ledger, tenant, batch_id, event, states)


def bundle_published(conn: Connection, event: LedgerEvent) -> None:
    """Announce `evidence.delivered` for the bundle whose `bundle.published` event is ``event``."""
    body = event.body
    if subscription_in(conn, body["tenant"]) is None:
        return
    details = body["details"]
    _announce(conn, body["tenant"], EVIDENCE_DELIVERED, event, {
        "period": body["period"], "supersedes": (details.get("supersedes") or {}).get("identity"),
        **{name: details[name] for name in ("identity", "report_sha256", "statement_sha256")},
    })


def remove_tenant(conn: Connection, tenant: str, now: float) -> dict:
    """Remove the tenant's webhook and cancel its deliveries not delivered (pending or dead: none is sent or
    replayed again), in the caller's transaction (the offboarding's); what its event records of this. A delivery
    already being sent when this commits may still arrive: its outcome is no longer recorded."""
    o = outbox.c
    current = subscription_in(conn, tenant)
    undelivered = (o.tenant == tenant, o.state.in_((PENDING, DEAD)))
    cancelled = conn.execute(select(o.delivery_id).where(*undelivered)
                             .order_by(o.created_at, o.delivery_id)).scalars().all()
    conn.execute(outbox.update().where(*undelivered).values(
        state=CANCELLED, last_code=str(ReasonCode.TENANT_OFFBOARDED), claimed_until=None, updated_at=now))
    conn.execute(webhooks.delete().where(webhooks.c.tenant == tenant))
    removed = None if current is None else {"url_sha256": sha256_text(current.url), "config_seq": current.config_seq}
    return {"webhook_removed": removed, "webhook_deliveries_cancelled": cancelled}


def _batch_finished(conn: Connection, ledger: Ledger, tenant: str, batch_id: str, event: LedgerEvent,
                    states: tuple[str, ...]) -> None:
    batches, docs, jobs = ledger.batches.c, ledger.document_jobs.c, ledger.jobs.c
    batch = conn.execute(select(batches.state, batches.jobs).where(batches.batch_id == batch_id)).first()
    if batch is None or batch.state not in states:
        return
    counts = dict(conn.execute(select(jobs.state, func.count()).join(ledger.document_jobs, docs.job_id == jobs.job_id)
                               .where(docs.batch_id == batch_id).group_by(jobs.state)).all())
    if counts.get(ACCEPTED, 0) or counts.get(RUNNING, 0):
        return
    _announce(conn, tenant, BATCH_FINISHED, event,
              {"batch_id": batch_id, "jobs": batch.jobs, "cancelled": batch.state == "cancelled", "counts": counts})


def _announce(conn: Connection, tenant: str, event_type: str, event: LedgerEvent, data: dict) -> None:
    delivery_id = "msg_" + uuid.uuid5(_DELIVERY_IDS, f"{event.body['event_id']}/{event_type}").hex
    if conn.execute(select(outbox.c.delivery_id).where(outbox.c.delivery_id == delivery_id)).first() is not None:
        return
    payload = {"type": event_type, "timestamp": event.body["recorded_at"],
               "data": data | {"tenant": tenant, "ledger_seq": event.seq}}
    now = time.time()
    conn.execute(outbox.insert().values(
        delivery_id=delivery_id, tenant=tenant, event_type=event_type, event_seq=event.seq,
        payload=canonical(payload), state=PENDING, attempts=0, next_attempt_at=now, created_at=now, updated_at=now))


def subscription_in(conn: Connection, tenant: str):
    """The tenant's webhook row as this transaction sees it, or None."""
    return conn.execute(select(webhooks).where(webhooks.c.tenant == tenant)).first()


class Outbox:
    """The deliverer's side: take due deliveries, record each attempt, list and replay them."""

    def __init__(self, ledger: Ledger):
        self.ledger = ledger

    def subscription(self, tenant: str) -> dict | None:
        with classified_errors(), self.ledger.engine.connect() as conn:
            row = subscription_in(conn, tenant)
        return None if row is None else dict(row._mapping)

    def claim_due(self, now: float, claim_seconds: float, limit: int, busy: Collection[str] = ()) -> list[dict]:
        """Up to ``limit`` pending deliveries due by ``now``, one per tenant and none of a ``busy`` tenant's (one
        with an attempt in flight): each tenant's oldest, the tenants whose oldest is oldest first. Each is claimed
        until now + claim_seconds (a row another deliverer claimed meanwhile is left to it)."""
        o = outbox.c
        free = (o.state == PENDING, o.next_attempt_at <= now, or_(o.claimed_until.is_(None), o.claimed_until < now))
        ranked = select(outbox, func.row_number().over(partition_by=o.tenant, order_by=(o.next_attempt_at,
                                                                                       o.delivery_id)).label("nth")
                        ).where(*free, o.tenant.not_in(list(busy))).subquery()
        due = (select(*(ranked.c[name] for name in outbox.c.keys())).where(ranked.c.nth == 1)
               .order_by(ranked.c.next_attempt_at, ranked.c.delivery_id).limit(limit))
        claimed = []
        with classified_errors(), self.ledger.writing(durable=False) as conn:
            for row in conn.execute(due).all():
                taken = conn.execute(outbox.update().where(o.delivery_id == row.delivery_id, *free)
                                     .values(claimed_until=now + claim_seconds)).rowcount
                if taken:
                    claimed.append(dict(row._mapping))
        return claimed

    def record_attempt(self, delivery: dict, state: str, code: str | None, status: int | None,
                       next_attempt_at: float) -> None:
        """The outcome of one attempt at ``delivery`` (as claimed): its new state, why it failed, when next."""
        o = outbox.c
        with classified_errors(), self.ledger.writing() as conn:
            conn.execute(outbox.update().where(o.delivery_id == delivery["delivery_id"], o.state == PENDING).values(
                state=state, attempts=delivery["attempts"] + 1, last_code=code, last_status=status,
                next_attempt_at=next_attempt_at, claimed_until=None, updated_at=time.time()))

    def deliveries(self, tenant: str | None = None, states: tuple[str, ...] = (),
                   delivery_id: str | None = None) -> list[dict]:
        """Deliveries (without their secrets' use: a row holds none), oldest first, filtered."""
        o = outbox.c
        query = select(outbox).order_by(o.created_at, o.delivery_id)
        if tenant is not None:
            query = query.where(o.tenant == tenant)
        if states:
            query = query.where(o.state.in_(states))
        if delivery_id is not None:
            query = query.where(o.delivery_id == delivery_id)
        with classified_errors(), self.ledger.engine.connect() as conn:
            return [_listed(row._mapping) for row in conn.execute(query)]


def reopen(conn: Connection, delivery_id: str, now: float) -> dict | None:
    """Make a dead delivery pending again with a fresh budget, in the caller's transaction (the replay's); the
    delivery as it was, or None when there is no dead delivery of that id."""
    o = outbox.c
    row = conn.execute(select(outbox).where(o.delivery_id == delivery_id, o.state == DEAD)).first()
    if row is None:
        return None
    conn.execute(outbox.update().where(o.delivery_id == delivery_id, o.state == DEAD).values(
        state=PENDING, attempts=0, next_attempt_at=now, claimed_until=None, updated_at=now))
    return _listed(row._mapping)


def _listed(row) -> dict:
    listed = {name: row[name] for name in ("delivery_id", "tenant", "event_type", "event_seq", "state", "attempts",
                                           "last_code", "last_status")}
    return listed | {"payload": row["payload"], "created_at": _iso(row["created_at"]),
                     "next_attempt_at": _iso(row["next_attempt_at"]) if row["state"] == PENDING else None}


def _iso(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, timezone.utc).isoformat(timespec="milliseconds")
