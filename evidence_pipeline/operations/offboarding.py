"""Tenant offboarding: stop the tenant's new work, erase what is not evidence, keep the evidence verifiable.

Four-eyes between identities: an operator asks (`request_offboarding`, the signed `tenant.offboard` action, tenant T,
args {reason}), recorded as a `tenant.offboard_requested` event; an approver of another identity (another name and
key) decides (`offboard_tenant`, the signed `tenant.offboard.approve` action, tenant T, args {request}: the event id
of the request it approves). One `tenant.offboarded` event records the approved decision (the request, its reason
and operator, the approver's signed request), the tokens it revoked, every key it erases from the private stores,
and how long the evidence stays. It commits, with the revocation of the tenant's API tokens and the removal of its
webhook (its undelivered deliveries cancelled, their ids recorded), before anything is erased: a crash part-way
leaves the record, and a second approved run finishes the erasure. An object still under Object Lock retention is
kept and listed with its date; the run after that date erases it and records that in a `tenant.data_erased` event.
Bundles, document job outputs and the ledger are evidence: they stay (the archive's own retention decides when
bundles may go), and the ledger stays verifiable.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import Connection, select

from evidence_pipeline.actors.authorize import ActionGate
from evidence_pipeline.actors.registry import Registry
from evidence_pipeline.actors.roles import Action
from evidence_pipeline.actors.verify import AuthorizedAction
from evidence_pipeline.canonical import sha256_text
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.ledger import job_states as states
from evidence_pipeline.ledger import outbox
from evidence_pipeline.ledger.ledger import event_body
from evidence_pipeline.models import EventType, LedgerEvent, TenantMonth, current_month
from evidence_pipeline.monthly.bundle import staging_key
from evidence_pipeline.runtime import Runtime
from evidence_pipeline.store import ArtifactStore

MAX_REASON = 500


def request_offboarding(rt: Runtime, gate: ActionGate, envelope: object) -> dict:
    """Record an operator's signed request to offboard its tenant; returns the `tenant.offboard_requested` body."""
    requested = {}

    def perform(conn: Connection, _registry: Registry, authorized: AuthorizedAction) -> LedgerEvent:
        tenant, args = _tenant_of(authorized), authorized.args
        reason = args.get("reason")
        if args.keys() != {"reason"} or not isinstance(reason, str) or not _fair_reason(reason):
            raise EvidenceError(
                ReasonCode.ACTION_REQUEST_INVALID,
                f"tenant.offboard takes {{reason}}: 1-{MAX_REASON} printable characters",
            )
        if rt.tokens.offboarding(conn, tenant) is not None:
            raise EvidenceError(ReasonCode.TENANT_OFFBOARDED, f"tenant {tenant} is offboarded already")
        event = gate.ledger._append(
            conn,
            TenantMonth(tenant, current_month()),
            EventType.TENANT_OFFBOARD_REQUESTED,
            sha256_text(tenant),
            actor=authorized.actor,
            details={"reason": reason, "authorization": authorized.envelope},
        )
        requested.update(event.body)
        return event

    gate.run(envelope, Action.TENANT_OFFBOARD, perform)
    return requested


def pending_request(rt: Runtime, tenant: str) -> dict | None:
    """The tenant's latest offboarding request, while the tenant is not offboarded (what an approver approves)."""
    with rt.ledger.engine.connect() as conn:
        return None if rt.tokens.offboarding(conn, tenant) is not None else _latest_request(rt, conn, tenant)


def offboard_tenant(rt: Runtime, gate: ActionGate, envelope: object) -> dict:
    """Offboard the tenant of an approver's signed request; safe to run again with a new one (it converges).
    Returns what this run did and what stays."""
    tenant = _planned_tenant(gate, envelope)
    now = datetime.now(timezone.utc)
    stores = _not_evidence(rt, tenant)
    erase, kept = {}, {}
    for name, (store, keys) in stores.items():
        erase[name], kept[name] = _due(store, keys, now)
    evidence = _evidence(rt.archive, tenant)
    decided: dict[str, Any] = {}

    def perform(conn: Connection, registry: Registry, authorized: AuthorizedAction) -> LedgerEvent | None:
        args = authorized.args
        if _tenant_of(authorized) != tenant or args.keys() != {"request"}:
            raise EvidenceError(ReasonCode.ACTION_REQUEST_INVALID, "tenant.offboard.approve takes {request}")
        offboarded = rt.tokens.offboarding(conn, tenant)
        if offboarded is not None:  # a later run: it converges under the first decision
            decided.update(record=offboarded, first=False, actor=authorized.actor)
            return None
        request = _latest_request(rt, conn, tenant)
        if request is None or request["event_id"] != args["request"]:
            raise EvidenceError(
                ReasonCode.OFFBOARDING_NOT_REQUESTED, f"tenant {tenant} has no pending offboarding request of that id"
            )
        registry.require_other_identity(request["actor"], authorized.actor)
        details = {
            "reason": request["details"]["reason"],
            "requested": {"event_id": request["event_id"], "actor": request["actor"]},
            "erase": erase,
            "kept_until_retention": kept,
            "evidence": evidence,
            "authorization": authorized.envelope,
        }
        details |= outbox.remove_tenant(conn, tenant, time.time())  # nothing is sent for it from now on
        record, event = rt.tokens.record_offboarding(conn, tenant, authorized.actor, details)
        decided.update(record=record, first=True, actor=authorized.actor)
        return event

    gate.run(envelope, Action.TENANT_OFFBOARD_APPROVE, perform)
    record, first, actor = decided["record"], decided["first"], decided["actor"]
    if not first:
        recorded = {key for keys in record.details["erase"].values() for key in keys}
        later = {name: [key for key in keys if key not in recorded] for name, keys in erase.items()}
        if any(later.values()):  # objects the first run kept (retention) or that appeared since
            rt.ledger.record(
                TenantMonth(tenant, current_month()),
                EventType.TENANT_DATA_ERASED,
                sha256_text(tenant),
                actor,
                erase=later,
            )
    stopped = _stop_work(rt, tenant, actor)
    erased = {name: sum(stores[name][0].erase(key) for key in keys) for name, keys in erase.items()}
    return {
        "tenant": tenant,
        "offboarded_at": record.recorded_at,
        "first_run": first,
        "tokens_revoked": record.details["tokens_revoked"] if first else 0,
        **stopped,
        "erased": erased,
        "kept_until_retention": kept,
        "evidence": evidence,
    }


def _planned_tenant(gate: ActionGate, envelope: object) -> str:
    """The tenant of a request the gate lets through (checked now, nothing recorded, its nonce left for perform,
    which checks it again): no erasure is planned, no store listed, for a request that is not authenticated and
    authorized; a refusal is recorded as the gate's refusals are."""
    named: list[str] = []

    def check(_conn: Connection, _registry: Registry, authorized: AuthorizedAction) -> None:
        named[:] = [_tenant_of(authorized)]

    gate.run(envelope, Action.TENANT_OFFBOARD_APPROVE, check)
    return named[0]


def _tenant_of(authorized: AuthorizedAction) -> str:
    if authorized.tenant is None:
        raise EvidenceError(ReasonCode.ACTION_REQUEST_INVALID, "an offboarding action names its tenant")
    return authorized.tenant


def _fair_reason(reason: str) -> bool:
    return 0 < len(reason.strip()) <= MAX_REASON and reason.isprintable()


def _latest_request(rt: Runtime, conn: Connection, tenant: str) -> dict | None:
    events = rt.ledger.audit_events.c
    body = conn.execute(
        select(events.body)
        .where(events.tenant == tenant, events.event_type == str(EventType.TENANT_OFFBOARD_REQUESTED))
        .order_by(events.seq.desc())
        .limit(1)
    ).scalar()
    return None if body is None else event_body(body)


def _stop_work(rt: Runtime, tenant: str, actor: str) -> dict[str, int]:
    """Cancel the tenant's open batches and reject its jobs that have not started: nothing of it is dispatched
    again. A job running under a live lease is left to fail on its own (its next pin is TENANT_OFFBOARDED)."""
    batches = [b for b in rt.batches.open_batches() if b.tenant == tenant]
    for batch in batches:
        rt.batches.stop_batch(tenant, batch.batch_id, actor)
    rejected = [
        job.job_id
        for job in rt.ledger.jobs_in(states.ACCEPTED)
        if job.tenant == tenant
        if rt.ledger.record_failure(
            job.job_id, ReasonCode.TENANT_OFFBOARDED, retryable=False, actor=actor, budget=rt.retry_budget, attempt=0
        )
    ]
    return {"batches_cancelled": len(batches), "jobs_rejected": len(rejected)}


def _not_evidence(rt: Runtime, tenant: str) -> dict[str, tuple[ArtifactStore, list[str]]]:
    """The tenant's objects in each private store: its source revisions and closed document outcomes, previews,
    unsigned reports (found by the ledger's `report.rendered` events: staging is content-addressed) and uploads."""
    rendered = sorted({e["subject_sha256"] for e in rt.ledger.events_of_type(EventType.REPORT_RENDERED, tenant)})
    return {
        "sources": (rt.sources, rt.sources.list(tenant)),
        "previews": (rt.previews, rt.previews.list(f"previews/{tenant}")),
        "staging": (rt.staging, [key for key in map(staging_key, rendered) if rt.staging.exists(key)]),
        "documents": (rt.document_store, rt.document_store.list(tenant)),
    }


def _due(store: ArtifactStore, keys: list[str], now: datetime) -> tuple[list[str], dict[str, str]]:
    """(keys that may be erased now, {key: retained-until} for those still under retention)."""
    due, kept = [], {}
    for key in keys:
        until = store.retained_until(key)
        if until is not None and until > now:
            kept[key] = until.isoformat()
        else:
            due.append(key)
    return due, kept


def _evidence(archive: ArtifactStore, tenant: str) -> dict:
    """What stays: the tenant's bundles and document job outputs, and when the last of their retention ends."""
    bundles = archive.list(f"bundles/{tenant}")
    outputs = archive.list(f"documents/{tenant}")
    dates = [until for until in map(archive.retained_until, bundles + outputs) if until is not None]
    return {
        "bundles": len({key.rsplit("/", 1)[0] for key in bundles}),
        "document_job_outputs": len(outputs),
        # None: the archive has no Object Lock; the evidence stays until an operator removes it
        "retained_until": max(dates).isoformat() if dates else None,
    }
