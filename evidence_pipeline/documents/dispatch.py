"""Dispatch: the batch dispatcher, and the end of an evidence job.

The batch dispatcher creates the child jobs of admitted batches, a page at a time, fairly across tenants.

It runs in the document sensor's tick (defs/documents.py), never in a request. Each call gives every tenant with
an open batch one page of children from its oldest batch; a page's children and the batch's cursor commit in one
transaction, so a repeated or concurrent call never creates a child twice, and a cancel stops it between pages.
"""

from __future__ import annotations

import json
import logging

from evidence_pipeline.documents.registry import operation, request_digest
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.ledger import jobs as states
from evidence_pipeline.ledger.rows import Batch, DocumentJob
from evidence_pipeline.models import EventType, TenantMonth
from evidence_pipeline.runtime import Runtime

_log = logging.getLogger(__name__)


def dispatch_batches(rt: Runtime, page_size: int, actor: str) -> int:
    """Create up to one page of child jobs per tenant; returns how many were created. A batch that cannot be paged
    now (its manifest unreadable, an operation no longer registered) is skipped and logged by its code: it must
    not stop every other tenant's dispatch."""
    policy = rt.settings.policy_version
    created, served = 0, set()
    for batch in rt.batches.open_batches():
        if batch.tenant in served:
            continue  # one page per tenant per call: a tenant's big batch cannot starve another's
        served.add(batch.tenant)
        try:
            created += _dispatch_page(rt, batch, page_size, policy, actor)
        except EvidenceError as error:
            _log.warning("batch %s not dispatched this time (%s)", batch.batch_id[:16], error.code)
    return created


def _dispatch_page(rt: Runtime, batch: Batch, page_size: int, policy: str, actor: str) -> int:
    manifest = json.loads(rt.document_store.get(batch.store_key, expected_sha256=batch.manifest_sha256))
    children = [
        (
            spec["idempotency_key"],
            request_digest(batch.tenant, operation(spec["operation"]), spec["inputs"], spec["options"], policy),
            spec["operation"],
            {"inputs": spec["inputs"], "options": spec["options"]} | spec.get("pinned", {}),
        )
        for spec in manifest[batch.dispatched : batch.dispatched + page_size]
    ]
    return len(children) if rt.batches.dispatch_batch_page(batch, children, policy, actor) else 0


def refuse_evidence_job(rt: Runtime, job: DocumentJob, code: str, actor: str) -> str | None:
    """Reject an accepted evidence job that must not run (``code``, terminal), before it has a run. Returns the job's
    new state, None if it did not move (another evaluation holds it)."""
    try:
        lease = rt.ledger.acquire_lease(job.job_id, actor, rt.settings.lease_seconds)
    except EvidenceError:
        return None
    return _close(rt, job.job_id, code, actor, lease)


def _close(rt: Runtime, job_id: str, code: str, actor: str, lease) -> str | None:
    state = rt.ledger.record_failure(
        job_id, code, retryable=False, actor=actor, budget=rt.retry_budget, attempt=1, lease_token=lease.token
    )
    rt.document_jobs.mark_finished(job_id)
    return state


def finish_evidence_job(rt: Runtime, tenant: str, job_id: str, run_id: str, succeeded: bool) -> str | None:
    """Record the end of an evidence job's Dagster run: the bundle the run published for the tenant-month (under a
    fenced lease, like every commit), or EVIDENCE_RUN_FAILED. Returns the job's new state, None if it did not
    move (already finished, or not an evidence job of ``tenant``)."""
    job = rt.document_jobs.job(tenant, job_id)
    if job is None or job.state != states.ACCEPTED:
        return None
    try:  # a lease first, so even a failure moves the lease token (a replayed job then gets a new run key)
        lease = rt.ledger.acquire_lease(job_id, run_id, rt.settings.lease_seconds)
    except EvidenceError:
        return None  # another evaluation is finishing it
    publication = rt.ledger.current_publication(TenantMonth(tenant, job.request["period"])) if succeeded else None
    if publication is None:
        return _close(rt, job_id, ReasonCode.EVIDENCE_RUN_FAILED, run_id, lease)
    bundle = {
        "location": rt.archive.uri(publication.bundle_key),
        "identity": publication.identity,
        "report_sha256": publication.report_sha256,
        "statement_sha256": publication.statement_sha256,
        "ledger_seq": publication.event_seq,
    }
    rt.document_jobs.complete(
        job,
        lease,
        event_type=EventType.EVIDENCE_DELIVERED,
        subject_sha256=publication.report_sha256,
        outputs={"run_id": run_id, "bundle": bundle},
        actor=run_id,
    )
    return states.SUCCEEDED
