"""The one publication path of source data: every front end (`evidence source publish`, the tenant API's
`PUT /v1/sources/{period}`) prepares a file here and publishes it here.

``prepare`` reads and checks a file against the format (source_format.py; a file that breaks it is refused whole,
with its report, and nothing is stored); ``publish`` stores its canonical bytes as a put-once, content-addressed
revision with a claimed sequence (sources.py) and then records the `source.published` event (tenant, period,
sequence, digest, bytes, rows, who published it, correlation id). The bytes are durable before the event names
them; a retry of the same bytes converges on the same revision and the same event.

An operator publishes with a signed request: ``signed_by`` checks it before anything is stored and records the
event through the action gate, with the request, under the operator's name. A tenant publishes with its token
(``Publisher.token_id``); nothing of the token but its id is recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
from sqlalchemy import Connection

from evidence_pipeline.actors.authorize import ActionGate
from evidence_pipeline.actors.roles import Action
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.models import LedgerEvent, SourceRevision, TenantMonth
from evidence_pipeline.monthly import source_format, sources
from evidence_pipeline.runtime import Runtime
from evidence_pipeline.store import sha256_hex

# append(conn, actor, details) -> the event, or None when the revision has one already
Append = Callable[[Connection, str, dict], LedgerEvent | None]
# runs an append in a transaction that pinned the chain head before its reads; returns what append returned
Record = Callable[[Append], LedgerEvent | None]


@dataclass(frozen=True)
class Prepared:
    """A checked source file: its canonical bytes (what is stored) and what the event records of it."""

    tenant_month: TenantMonth
    data: bytes
    sha256: str
    rows: int


@dataclass(frozen=True)
class Publisher:
    """Who publishes: ``actor`` names the event's actor (an operator, or "intake" for a tenant's ``token_id``)."""

    actor: str
    correlation_id: str
    token_id: str | None = None
    idempotency_key: str | None = None


@dataclass(frozen=True)
class Publication:
    revision: SourceRevision
    rows: int
    created: bool  # this call published the revision; False: it was published before (the same bytes)
    event: dict  # the body of its `source.published` event

    def view(self) -> dict:
        details = self.event["details"]
        return {
            "tenant": self.revision.tenant_month.tenant,
            "period": self.revision.tenant_month.period,
            "sequence": self.revision.sequence,
            "sha256": self.revision.sha256,
            "bytes": self.revision.size,
            "rows": self.rows,
            "event_id": self.event["event_id"],
            "correlation_id": details["correlation_id"],
        }


def prepare(tenant_month: TenantMonth, data: bytes) -> Prepared:
    """The file's canonical bytes once every row passes; SourceRejected (SOURCE_INVALID with its report) or
    SOURCE_TOO_LARGE otherwise."""
    return _prepared(tenant_month, source_format.read_file(data, tenant_month))


def prepare_frame(tenant_month: TenantMonth, frame: pd.DataFrame) -> Prepared:
    """``prepare`` for rows already in a frame (the demo's generated months)."""
    return _prepared(tenant_month, sources.validate_frame(frame, tenant_month))


def _prepared(tenant_month: TenantMonth, checked: pd.DataFrame) -> Prepared:
    canonical = sources.canonical_csv(checked)
    return Prepared(tenant_month, canonical, sha256_hex(canonical), len(checked))


def publish(rt: Runtime, prepared: Prepared, publisher: Publisher, record: Record | None = None) -> Publication:
    """Store the revision, then record its event (``record``: in a transaction of its own unless given)."""
    tenant_month = prepared.tenant_month
    if rt.ledger.offboarded_tenants(tenant_month.tenant):
        raise EvidenceError(ReasonCode.TENANT_OFFBOARDED, f"tenant {tenant_month.tenant} was offboarded")
    revision = sources._store_revision(rt.sources, tenant_month, prepared.data)  # this module is its one caller
    events = rt.source_events
    details = {
        "sequence": revision.sequence,
        "bytes": revision.size,
        "rows": prepared.rows,
        "correlation_id": publisher.correlation_id,
    }
    if publisher.token_id is not None:
        details["token_id"] = publisher.token_id
    if publisher.idempotency_key is not None:
        details["idempotency_key"] = publisher.idempotency_key

    def append(conn: Connection, actor: str, extra: dict) -> LedgerEvent | None:
        return events.record(conn, tenant_month, revision.sha256, actor=actor, details=details | extra)

    event = (record or _own_transaction(rt, publisher.actor))(append)
    body = event.body if event is not None else events.event_of(tenant_month, revision.sha256)
    return Publication(revision, prepared.rows, event is not None, body)


def _own_transaction(rt: Runtime, actor: str) -> Record:
    def record(append: Append) -> LedgerEvent | None:
        def work(conn: Connection) -> LedgerEvent | None:
            rt.ledger.pin_chain_head(conn)
            return append(conn, actor, {})

        return rt.ledger._transact(work)

    return record


def signed_args(prepared: Prepared) -> dict:
    """What an operator's request to publish signs: the revision's identity, so it authorizes these bytes only."""
    return {"period": prepared.tenant_month.period, "sha256": prepared.sha256, "rows": prepared.rows}


def signed_by(gate: ActionGate, envelope: dict, prepared: Prepared) -> Record:
    """The Record of an operator's signed request (signed for ``prepared``), checked now, before anything is
    stored: a refused request (recorded as `action.refused`) publishes nothing."""

    def check(_conn, _registry, authorized) -> None:
        if authorized.args != signed_args(prepared) or authorized.tenant != prepared.tenant_month.tenant:
            raise EvidenceError(ReasonCode.ACTION_REQUEST_INVALID, "the request was signed for another revision")

    gate.run(envelope, Action.SOURCE_PUBLISH, check)  # nothing to record yet: the nonce stays unused

    def record(append: Append) -> LedgerEvent | None:
        return gate.run(
            envelope,
            Action.SOURCE_PUBLISH,
            lambda conn, _registry, authorized: append(conn, authorized.actor, {"authorization": authorized.envelope}),
        )

    return record
