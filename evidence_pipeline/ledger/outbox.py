"""The webhook outbox over the ledger's core: the deliverer's side (take due deliveries with a claim, record each
attempt, list and replay them) and the offboarding's removal. The deliveries themselves are written by
announcements.py, in the transaction of the event they announce.

Deliverers take due rows with a claim (compare-and-swap on ``claimed_until``), so two of them (the Dagster sensor and
`evidence webhook deliver`) never send one row at once; a claim that outlives a dead deliverer simply expires.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import Any

from sqlalchemy import Connection, Row, func, or_, select

from evidence_pipeline.canonical import sha256_text, utc_iso
from evidence_pipeline.errors import ReasonCode
from evidence_pipeline.ledger.announcements import CANCELLED, DEAD, PENDING, outbox, subscription_in, webhooks
from evidence_pipeline.ledger.db import classified_errors
from evidence_pipeline.ledger.ledger import Ledger
from evidence_pipeline.ledger.rows import Delivery, ListedDelivery, Subscription


def remove_tenant(conn: Connection, tenant: str, now: float) -> dict[str, Any]:
    """Remove the tenant's webhook and cancel its deliveries not delivered (pending or dead: none is sent or
    replayed again), in the caller's transaction (the offboarding's); what its event records of this: details the
    offboarding merges into its event's (a part of a stored body, not a row). A delivery already being sent when
    this commits may still arrive: its outcome is no longer recorded."""
    o = outbox.c
    current = subscription_in(conn, tenant)
    undelivered = (o.tenant == tenant, o.state.in_((PENDING, DEAD)))
    cancelled = (
        conn.execute(select(o.delivery_id).where(*undelivered).order_by(o.created_at, o.delivery_id)).scalars().all()
    )
    conn.execute(
        outbox.update()
        .where(*undelivered)
        .values(state=CANCELLED, last_code=str(ReasonCode.TENANT_OFFBOARDED), claimed_until=None, updated_at=now)
    )
    conn.execute(webhooks.delete().where(webhooks.c.tenant == tenant))
    removed = None if current is None else {"url_sha256": sha256_text(current.url), "config_seq": current.config_seq}
    return {"webhook_removed": removed, "webhook_deliveries_cancelled": cancelled}


class Outbox:
    """The deliverer's side: take due deliveries, record each attempt, list and replay them."""

    def __init__(self, ledger: Ledger):
        self.ledger = ledger

    def subscription(self, tenant: str) -> Subscription | None:
        with classified_errors(), self.ledger.engine.connect() as conn:
            row = subscription_in(conn, tenant)
        return None if row is None else Subscription.of(row)

    def claim_due(self, now: float, claim_seconds: float, limit: int, busy: Collection[str] = ()) -> list[Delivery]:
        """Up to ``limit`` pending deliveries due by ``now``, one per tenant and none of a ``busy`` tenant's (one
        with an attempt in flight): each tenant's oldest, the tenants whose oldest is oldest first. Each is claimed
        until now + claim_seconds (a row another deliverer claimed meanwhile is left to it)."""
        o = outbox.c
        free = (o.state == PENDING, o.next_attempt_at <= now, or_(o.claimed_until.is_(None), o.claimed_until < now))
        ranked = (
            select(
                outbox,
                func.row_number().over(partition_by=o.tenant, order_by=(o.next_attempt_at, o.delivery_id)).label("nth"),
            )
            .where(*free, o.tenant.not_in(list(busy)))
            .subquery()
        )
        due = (
            select(*(ranked.c[name] for name in outbox.c.keys()))
            .where(ranked.c.nth == 1)
            .order_by(ranked.c.next_attempt_at, ranked.c.delivery_id)
            .limit(limit)
        )
        claimed = []
        with classified_errors(), self.ledger.writing(durable=False) as conn:
            for row in conn.execute(due).all():
                taken = conn.execute(
                    outbox.update()
                    .where(o.delivery_id == row.delivery_id, *free)
                    .values(claimed_until=now + claim_seconds)
                ).rowcount
                if taken:
                    claimed.append(Delivery.of(row))
        return claimed

    def record_attempt(
        self, delivery: Delivery, *, state: str, code: str | None, status: int | None, next_attempt_at: float
    ) -> None:
        """The outcome of one attempt at ``delivery`` (as claimed): its new state, why it failed, when next."""
        o = outbox.c
        with classified_errors(), self.ledger.writing() as conn:
            conn.execute(
                outbox.update()
                .where(o.delivery_id == delivery.delivery_id, o.state == PENDING)
                .values(
                    state=state,
                    attempts=delivery.attempts + 1,
                    last_code=code,
                    last_status=status,
                    next_attempt_at=next_attempt_at,
                    claimed_until=None,
                    updated_at=time.time(),
                )
            )

    def deliveries(
        self, tenant: str | None = None, states: tuple[str, ...] = (), delivery_id: str | None = None
    ) -> list[ListedDelivery]:
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
            return [_listed(row) for row in conn.execute(query)]


def reopen(conn: Connection, delivery_id: str, now: float) -> ListedDelivery | None:
    """Make a dead delivery pending again with a fresh budget, in the caller's transaction (the replay's); the
    delivery as it was, or None when there is no dead delivery of that id."""
    o = outbox.c
    row = conn.execute(select(outbox).where(o.delivery_id == delivery_id, o.state == DEAD)).first()
    if row is None:
        return None
    conn.execute(
        outbox.update()
        .where(o.delivery_id == delivery_id, o.state == DEAD)
        .values(state=PENDING, attempts=0, next_attempt_at=now, claimed_until=None, updated_at=now)
    )
    return _listed(row)


def _listed(row: Row[Any]) -> ListedDelivery:
    delivery = Delivery.of(row)
    return ListedDelivery(
        delivery_id=delivery.delivery_id,
        tenant=delivery.tenant,
        event_type=delivery.event_type,
        event_seq=delivery.event_seq,
        state=delivery.state,
        attempts=delivery.attempts,
        last_code=delivery.last_code,
        last_status=delivery.last_status,
        payload=delivery.payload,
        created_at=utc_iso(delivery.created_at),
        next_attempt_at=utc_iso(delivery.next_attempt_at) if delivery.state == PENDING else None,
    )
