"""Who may call the tenant API: API tokens (only their sha256 is stored) and the offboarding record that ends a
tenant's tokens for good. Each write commits its audit event in the same transaction."""

from __future__ import annotations

import secrets
import time
from typing import Any

from sqlalchemy import Connection, bindparam, select

from evidence_pipeline.canonical import sha256_text
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.ledger.db import classified_errors
from evidence_pipeline.ledger.ledger import Ledger, event_body
from evidence_pipeline.ledger.rows import Offboarding
from evidence_pipeline.models import EventType, LedgerEvent, TenantMonth, current_month

TOKEN_PREFIX = "evt_"


class Tokens:
    def __init__(self, ledger: Ledger):
        self.ledger = ledger
        self.tokens = ledger.api_tokens
        tokens, registry = self.tokens.c, ledger.tenants.c
        # every request of the tenant API runs it: built once, no statement construction per request; one statement
        # that also reads the token's tenant's standing in the registry
        self._live_token = (
            select(
                tokens.tenant,
                tokens.token_id,
                registry.tenant.label("registered"),
                registry.offboarded_seq,
            )
            .select_from(self.tokens.outerjoin(ledger.tenants, registry.tenant == tokens.tenant))
            .where(tokens.token_sha256 == bindparam("sha256"), tokens.revoked_at.is_(None))
        )

    def issue_token(
        self, conn: Connection, tenant: str, actor: str, details: dict[str, Any]
    ) -> tuple[str, str, LedgerEvent]:
        """A new API token for ``tenant`` in the caller's transaction (the action gate's): (token id, token, its
        `token.issued` event). Only the token's sha256 is stored; the event names the token id."""
        if self.offboarding(conn, tenant) is not None:
            raise EvidenceError(ReasonCode.TENANT_OFFBOARDED, f"tenant {tenant} was offboarded")
        registry = self.ledger.tenants
        if conn.execute(select(registry.c.tenant).where(registry.c.tenant == tenant)).first() is None:
            raise EvidenceError(
                ReasonCode.TENANT_UNKNOWN, f"tenant {tenant} is not registered: `evidence tenant add` it first"
            )
        token_id = "tok_" + secrets.token_hex(12)
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)  # 256 bits of randomness
        now = time.time()
        conn.execute(
            self.tokens.insert().values(
                token_id=token_id, tenant=tenant, token_sha256=sha256_text(token), created_at=now
            )
        )
        event = self.ledger._append(
            conn,
            TenantMonth(tenant, current_month(now)),
            EventType.TOKEN_ISSUED,
            sha256_text(token_id),
            actor=actor,
            details=details | {"token_id": token_id},
        )
        return token_id, token, event

    def revoke_token(
        self, conn: Connection, token_id: str, actor: str, details: dict[str, Any]
    ) -> tuple[str, LedgerEvent | None]:
        """Revoke a token in the caller's transaction: (its tenant, its `token.revoked` event; None when it was
        revoked before)."""
        row = conn.execute(select(self.tokens).where(self.tokens.c.token_id == token_id)).first()
        if row is None:
            raise EvidenceError(ReasonCode.TOKEN_NOT_FOUND, "no such token id")
        if row.revoked_at is not None:
            return row.tenant, None
        return row.tenant, self._revoke(conn, row.tenant, token_id, actor=actor, now=time.time(), details=details)

    def _revoke(
        self, conn: Connection, tenant: str, token_id: str, *, actor: str, now: float, details: dict[str, Any]
    ) -> LedgerEvent:
        conn.execute(self.tokens.update().where(self.tokens.c.token_id == token_id).values(revoked_at=now))
        return self.ledger._append(
            conn,
            TenantMonth(tenant, current_month(now)),
            EventType.TOKEN_REVOKED,
            sha256_text(token_id),
            actor=actor,
            details=details | {"token_id": token_id},
        )

    def tenant_of_token(self, token: str) -> str | None:
        """The tenant a live token belongs to, or None (unknown or revoked)."""
        caller = self.caller_of_token(token)
        return None if caller is None else caller[0]

    def caller_of_token(self, token: str) -> tuple[str, str] | None:
        """(tenant, token id) of a live token, or None (unknown or revoked). A token admits only a tenant the
        registry holds: TENANT_UNKNOWN when its tenant was never registered (a token issued before issuing
        required it), TENANT_OFFBOARDED when it was offboarded."""
        with classified_errors(), self.ledger.reading() as conn:
            row = conn.execute(self._live_token, {"sha256": sha256_text(token)}).first()
        if row is None:
            return None
        if row.registered is None:
            raise EvidenceError(
                ReasonCode.TENANT_UNKNOWN, "the token's tenant is not registered (`evidence tenant add`)"
            )
        if row.offboarded_seq is not None:
            raise EvidenceError(ReasonCode.TENANT_OFFBOARDED, "the token's tenant was offboarded")
        return row.tenant, row.token_id

    def record_offboarding(
        self, conn: Connection, tenant: str, actor: str, details: dict[str, Any]
    ) -> tuple[Offboarding, LedgerEvent | None]:
        """Revoke the tenant's live tokens, append `tenant.offboarded` and mark the tenant offboarded in the registry,
        in the caller's transaction (the action gate's). Once per tenant: an offboarded tenant gets its first
        offboarding back, and no event. Returns (the offboarding, the event)."""
        first = self.offboarding(conn, tenant)
        if first is not None:
            return first, None
        now = time.time()
        live = (
            conn.execute(
                select(self.tokens.c.token_id).where(self.tokens.c.tenant == tenant, self.tokens.c.revoked_at.is_(None))
            )
            .scalars()
            .all()
        )
        for token_id in live:
            self._revoke(conn, tenant, token_id, actor=actor, now=now, details={})
        event = self.ledger._append(
            conn,
            TenantMonth(tenant, current_month(now)),
            EventType.TENANT_OFFBOARDED,
            sha256_text(tenant),
            actor=actor,
            details=details | {"tokens_revoked": len(live)},
        )
        registry = self.ledger.tenants
        conn.execute(registry.update().where(registry.c.tenant == tenant).values(offboarded_seq=event.seq))
        return Offboarding.of_body(event.body), event

    def offboarding(self, conn: Connection, tenant: str) -> Offboarding | None:
        """The tenant's offboarding (its `tenant.offboarded` event), or None."""
        events = self.ledger.audit_events.c
        body = conn.execute(
            select(events.body).where(events.tenant == tenant, events.event_type == EventType.TENANT_OFFBOARDED)
        ).scalar()
        return None if body is None else Offboarding.of_body(event_body(body))

    def ping(self) -> None:
        """Does the ledger database take writes (intake's health probe)? A write transaction that changes no row
        of the table every request reads: it takes the writers' lock (so it is bounded by that lock's wait) and
        fails on a read-only or unwritable database."""
        with classified_errors(), self.ledger.writing(durable=False) as conn:
            conn.execute(self.tokens.update().where(self.tokens.c.token_id == "").values(revoked_at=None))
