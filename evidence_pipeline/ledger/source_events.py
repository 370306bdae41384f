"""Source publications in the ledger: one `source.published` event per tenant-month and digest, appended in the
caller's transaction (the publication's own, or the action gate's for an operator's signed request)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, select

from evidence_pipeline.ledger.db import classified_errors
from evidence_pipeline.ledger.ledger import Ledger, event_body
from evidence_pipeline.models import EventType, LedgerEvent, TenantMonth


class SourceEvents:
    def __init__(self, ledger: Ledger):
        self.ledger = ledger

    def published(self, conn: Connection, tenant_month: TenantMonth, sha256: str) -> dict[str, Any] | None:
        """The body of the `source.published` event of this revision, or None."""
        events = self.ledger.audit_events.c
        body = conn.execute(
            select(events.body)
            .where(
                events.event_type == EventType.SOURCE_PUBLISHED,
                events.subject_sha256 == sha256,
                events.tenant == tenant_month.tenant,
                events.period == tenant_month.period,
            )
            .order_by(events.seq)
            .limit(1)
        ).scalar()
        return None if body is None else event_body(body)

    def record(
        self, conn: Connection, tenant_month: TenantMonth, sha256: str, *, actor: str, details: dict[str, Any]
    ) -> LedgerEvent | None:
        """Append the revision's event, unless it has one (None). The caller pinned the chain head before its
        reads, so a concurrent append of the same event makes this transaction run again and find it."""
        if self.published(conn, tenant_month, sha256) is not None:
            return None
        return self.ledger._append(conn, tenant_month, EventType.SOURCE_PUBLISHED, sha256, actor=actor, details=details)

    def event_of(self, tenant_month: TenantMonth, sha256: str) -> dict[str, Any] | None:
        with classified_errors(), self.ledger.engine.connect() as conn:
            return self.published(conn, tenant_month, sha256)
