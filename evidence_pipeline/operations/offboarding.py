"""Tenant offboarding: stop the tenant's new work, erase what is not evidence, keep the evidence verifiable.

One `tenant.offboarded` ledger event records the decision (reason, actor), the tokens it revoked, every key it
erases from the private stores, and how long the evidence stays. It commits, with the revocation of the tenant's
API tokens, before anything is erased: a crash part-way leaves the record, and a second run finishes the erasure.
An object still under Object Lock retention is kept and listed with its date; the run after that date erases it
and records that in a `tenant.data_erased` event. Bundles, document job outputs and the ledger are evidence: they
stay (the archive's own retention decides when bundles may go), and the ledger stays verifiable.
"""

from __future__ import annotations

from datetime import datetime, timezone

from evidence_pipeline.documents import Documents
from evidence_pipeline.errors import ReasonCode
from evidence_pipeline.ledger import jobs as states
from evidence_pipeline.ledger.ledger import current_month, sha256_text
from evidence_pipeline.models import EventType, TenantMonth, validate_tenant_id
from evidence_pipeline.monthly.bundle import staging_key
from evidence_pipeline.store import ArtifactStore


def offboard_tenant(documents: Documents, tenant: str, reason: str, actor: str) -> dict:
    """Offboard ``tenant``; safe to run again (it converges). Returns what this run did and what stays."""
    validate_tenant_id(tenant)
    rt = documents.runtime
    now = datetime.now(timezone.utc)
    stores = _not_evidence(documents, tenant)
    erase, kept = {}, {}
    for name, (store, keys) in stores.items():
        erase[name], kept[name] = _due(store, keys, now)
    evidence = _evidence(rt.archive, tenant)
    details = {"reason": reason, "erase": erase, "kept_until_retention": kept, "evidence": evidence}
    record, first = documents.tokens.record_offboarding(tenant, actor, details)
    if not first:
        recorded = {key for keys in record["details"]["erase"].values() for key in keys}
        later = {name: [key for key in keys if key not in recorded] for name, keys in erase.items()}
        if any(later.values()):  # objects the first run kept (retention) or that appeared since
            rt.ledger.record(TenantMonth(tenant, current_month()), EventType.TENANT_DATA_ERASED, sha256_text(tenant),
                             actor, erase=later)
    stopped = _stop_work(documents, tenant, actor)
    erased = {name: sum(stores[name][0].erase(key) for key in keys) for name, keys in erase.items()}
    return {
        "tenant": tenant,
        "offboarded_at": record["recorded_at"],
        "first_run": first,
        "tokens_revoked": record["details"]["tokens_revoked"] if first else 0,
        **stopped,
        "erased": erased,
        "kept_until_retention": kept,
        "evidence": evidence,
    }


def _stop_work(documents: Documents, tenant: str, actor: str) -> dict[str, int]:
    """Cancel the tenant's open batches and reject its jobs that have not started: nothing of it is dispatched
    again. A job running under a live lease is left to fail on its own (its next pin is TENANT_OFFBOARDED)."""
    batches = [b for b in documents.batches.open_batches() if b["tenant"] == tenant]
    for batch in batches:
        documents.batches.stop_batch(tenant, batch["batch_id"], actor)
    rt = documents.runtime
    rejected = [
        job["job_id"] for job in rt.ledger.jobs_in(states.ACCEPTED) if job["tenant"] == tenant
        if rt.ledger.record_failure(job["job_id"], ReasonCode.TENANT_OFFBOARDED, False, actor, rt.retry_budget, 0)
    ]
    return {"batches_cancelled": len(batches), "jobs_rejected": len(rejected)}


def _not_evidence(documents: Documents, tenant: str) -> dict[str, tuple[ArtifactStore, list[str]]]:
    """The tenant's objects in each private store: its source revisions and closed document outcomes, previews,
    unsigned reports (found by the ledger's `report.rendered` events: staging is content-addressed) and uploads."""
    rt = documents.runtime
    rendered = sorted({e["subject_sha256"] for e in rt.ledger.events_of_type(EventType.REPORT_RENDERED, tenant)})
    return {
        "sources": (rt.sources, rt.sources.list(tenant)),
        "previews": (rt.previews, rt.previews.list(f"previews/{tenant}")),
        "staging": (rt.staging, [key for key in map(staging_key, rendered) if rt.staging.exists(key)]),
        "documents": (documents.store, documents.store.list(tenant)),
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
