"""The tenant registry: the `evidence_tenants` table beside the ledger, read by the registry sensor.

Registering a tenant appends its `tenant.registered` event and inserts its row in one transaction; offboarding
marks the row in the transaction of its `tenant.offboarded` event (Tokens.record_offboarding, tokens.py). An
offboarded tenant is never registered again. Rows are in registration order (their event's position), the order
the sensor adds tenants as Dagster partitions, and so the order the schedule's range runs expand in.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from sqlalchemy import ColumnElement, Connection, Row, Select, select

from evidence_pipeline.canonical import sha256_text, utc_iso
from evidence_pipeline.ledger.db import classified_errors
from evidence_pipeline.ledger.ledger import Ledger
from evidence_pipeline.ledger.rows import ListedTenant
from evidence_pipeline.models import EventType, LedgerEvent, TenantMonth, current_month, validate_tenant_id

REGISTERED, EXISTING, OFFBOARDED = "registered", "existing", "offboarded"
ACTIVE = "active"  # a standing: registered and not offboarded
_CHUNK = 500  # tenants per IN (...) lookup: well under every driver's parameter limit


class TenantRegistry:
    def __init__(self, ledger: Ledger):
        self.ledger = ledger
        self.table = ledger.tenants

    def register(
        self, conn: Connection, tenants: Iterable[str], actor: str, details: dict[str, Any]
    ) -> tuple[dict[str, str], LedgerEvent | None]:
        """Register ``tenants`` (validated slugs) in the caller's transaction (the action gate's), each event with
        ``details``: (tenant -> REGISTERED (this call), EXISTING (registered before) or OFFBOARDED (refused: an
        offboarded tenant never comes back), the last event appended or None)."""
        wanted = list(dict.fromkeys(validate_tenant_id(tenant) for tenant in tenants))
        t, events = self.table.c, self.ledger.audit_events.c
        outcome = dict.fromkeys((row.tenant for row in _among(conn, select(t.tenant), t.tenant, wanted)), EXISTING)
        offboarded = {
            row.tenant
            for row in _among(
                conn,
                select(events.tenant).where(events.event_type == EventType.TENANT_OFFBOARDED),
                events.tenant,
                wanted,
            )
        }
        now = time.time()
        outcome |= dict.fromkeys(offboarded, OFFBOARDED)
        event = None
        for tenant in wanted:
            if tenant in outcome:
                continue
            event = self.ledger._append(
                conn,
                TenantMonth(tenant, current_month(now)),
                EventType.TENANT_REGISTERED,
                sha256_text(tenant),
                actor=actor,
                details=details,
            )
            conn.execute(self.table.insert().values(tenant=tenant, registered_seq=event.seq, registered_at=now))
            outcome[tenant] = REGISTERED
        return {tenant: outcome[tenant] for tenant in wanted}, event

    def active(self) -> list[str]:
        """The registered tenants that were not offboarded, in registration order: what the sensor adds."""
        t = self.table.c
        query = select(t.tenant).where(t.offboarded_seq.is_(None)).order_by(t.registered_seq)
        with classified_errors(), self.ledger.engine.connect() as conn:
            return list(conn.execute(query).scalars())

    def standing(self, tenants: Iterable[str]) -> dict[str, str]:
        """tenant -> ACTIVE or OFFBOARDED for each of ``tenants`` the registry holds; a tenant it lacks is absent
        (unknown: a Dagster partition or a folder name is no registration)."""
        t = self.table.c
        with classified_errors(), self.ledger.engine.connect() as conn:
            rows = _among(conn, select(t.tenant, t.offboarded_seq), t.tenant, list(set(tenants)))
        return {row.tenant: ACTIVE if row.offboarded_seq is None else OFFBOARDED for row in rows}

    def listing(self) -> list[ListedTenant]:
        """Every registered tenant, offboarded ones included, in registration order, with its ledger positions."""
        t = self.table.c
        with classified_errors(), self.ledger.engine.connect() as conn:
            rows = conn.execute(select(self.table).order_by(t.registered_seq)).all()
        return [
            ListedTenant(
                tenant=row.tenant,
                registered_at=utc_iso(row.registered_at, timespec="seconds"),
                registered_seq=row.registered_seq,
                offboarded_seq=row.offboarded_seq,
            )
            for row in rows
        ]


def _among(
    conn: Connection, query: Select[*tuple[Any, ...]], column: ColumnElement[Any], tenants: list[str]
) -> list[Row[*tuple[Any, ...]]]:
    """The rows of ``query`` whose ``column`` is one of ``tenants``, looked up a chunk at a time."""
    found: list[Row[*tuple[Any, ...]]] = []
    for start in range(0, len(tenants), _CHUNK):
        found += conn.execute(query.where(column.in_(tenants[start : start + _CHUNK]))).all()
    return found
