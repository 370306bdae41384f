"""Webhooks set for a tenant and the jobs whose ends they announce."""

from __future__ import annotations

from collections import Counter

import pytest

from evidence_pipeline.actors.roles import Action
from evidence_pipeline.config import Settings
from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.ledger import Ledger
from evidence_pipeline.ledger.admission import Clock, JobLimits
from evidence_pipeline.ledger.document_jobs import EVIDENCE
from evidence_pipeline.ledger.jobs import Lease
from evidence_pipeline.ledger.rows import DocumentJob
from evidence_pipeline.models import EventType
from evidence_pipeline.webhooks.subscriptions import set_webhook
from evidence_pipeline_tests.support.jobs import ONE_TRY
from evidence_pipeline_tests.support.pieces import pieces_of
from evidence_pipeline_tests.support.signers import signers_of

TENANT, QUIET = "acme", "quiet"  # QUIET has no webhook
SHA = "ab" * 32
LIMITS = JobLimits(max_outstanding=100, max_queue_age_seconds=3600, max_queued=1000)


def subscribe(ledger: Ledger, settings: Settings, url: str, tenant: str = TENANT) -> dict:
    signers = signers_of(ledger)
    signers.register_tenants([tenant])
    return set_webhook(
        signers.gate,
        pieces_of(ledger).tokens,
        settings,
        url,
        signers.sign("olga", Action.WEBHOOK_SET, {"url": url}, tenant),
    )


def add_job(
    ledger: Ledger, tenant: str, key: str, operation: str = "inspect", request: dict | None = None
) -> DocumentJob:
    job, _ = pieces_of(ledger).submissions.submit_job(
        tenant,
        key,
        request_sha256=SHA,
        operation=operation,
        request=request or {"inputs": [key]},
        policy_version="policy-test",
        actor="intake",
        limits=None,
        clock=Clock(None),
    )
    return pieces_of(ledger).document_jobs.job(tenant, job.job_id)


def succeed(
    ledger: Ledger, job: DocumentJob, event_type: str = EventType.DOCUMENT_PUBLISHED, outputs: dict | None = None
):
    lease = ledger.acquire_lease(job.job_id, "worker", 60)
    pieces_of(ledger).document_jobs.complete(
        job, lease, event_type=event_type, subject_sha256=SHA, outputs=outputs or {"outputs": []}, actor="worker"
    )


def _fail(ledger: Ledger, job: DocumentJob, reason: str, retryable: bool) -> str:
    lease = ledger.acquire_lease(job.job_id, "worker", 60)
    return ledger.record_failure(
        job.job_id,
        reason,
        retryable=retryable,
        actor="worker",
        budget=ONE_TRY,
        attempt=1,
        lease_token=lease.token,
        message="a message",
    )


def end_jobs_of_every_kind(ledger: Ledger) -> None:
    """For TENANT: a job that succeeds, one rejected, one dead, an evidence request that ends (its month's bundle is
    announced by the bundle's publication, not by the request), a batch of two that finishes; for QUIET (no
    webhook) a job that ends; and a commit that is fenced (it never happened)."""
    succeed(ledger, add_job(ledger, TENANT, "ok"))
    assert _fail(ledger, add_job(ledger, TENANT, "bad"), "DOCUMENT_ENCRYPTED", False) == "rejected"
    assert _fail(ledger, add_job(ledger, TENANT, "lost"), "STORE_UNAVAILABLE", True) == "dead"
    bundle = {
        "location": "/private/archive/acme/2026-04",
        "identity": "id" * 32,
        "report_sha256": SHA,
        "statement_sha256": "cd" * 32,
        "ledger_seq": 1,
    }
    succeed(
        ledger,
        add_job(ledger, TENANT, "month", EVIDENCE, {"period": "2026-04"}),
        EventType.EVIDENCE_DELIVERED,
        {"run_id": "run-1", "bundle": bundle},
    )
    succeed(ledger, add_job(ledger, QUIET, "ok"))
    fenced = add_job(ledger, TENANT, "fenced")
    with pytest.raises(EvidenceError) as error:
        pieces_of(ledger).document_jobs.complete(
            fenced,
            Lease(fenced.job_id, 99, "stale", 0.0),
            event_type=EventType.DOCUMENT_PUBLISHED,
            subject_sha256=SHA,
            outputs={"outputs": []},
            actor="stale",
        )
    assert error.value.code == "LEASE_FENCED"
    batches = pieces_of(ledger).batches
    batch, _ = batches.create_batch(
        TENANT,
        "bat_one",
        manifest_sha256=SHA,
        store_key="acme/batches/x.json",
        jobs=2,
        actor="intake",
        limits=LIMITS,
        clock=Clock(None),
    )
    children = [(f"child-{n}", SHA, "inspect", {"inputs": [f"c{n}"]}) for n in range(2)]
    assert batches.dispatch_batch_page(batch, children, "policy-test", "dispatcher")
    first, second = (
        pieces_of(ledger).document_jobs.job(TENANT, job_id)
        for job_id in batches.batch_children_in("bat_one", "accepted")
    )
    succeed(ledger, first)
    assert not [row for row in pieces_of(ledger).outbox.deliveries(TENANT) if row.event_type == "batch.finished"]
    _fail(ledger, second, "DOCUMENT_ENCRYPTED", False)


EXPECTED = Counter({"job.succeeded": 3, "job.rejected": 2, "job.dead": 1, "batch.finished": 1})
