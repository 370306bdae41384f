"""Accepting document and evidence jobs: once per idempotency key (a different request under a known key is a
recorded conflict), behind the load checks that refuse new work (a tenant's quota of outstanding jobs, its own
queue's age, every tenant's jobs together), each committed with its `job.accepted` event."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Connection, Select, func, select

from evidence_pipeline.canonical import canonical
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.ledger import job_states as states
from evidence_pipeline.ledger.admission import Clock, JobLimits, serialize_admissions
from evidence_pipeline.ledger.db import classified_errors
from evidence_pipeline.ledger.document_jobs import WORKER_VERSION, listed_job, read_job
from evidence_pipeline.ledger.job_states import DOCUMENT
from evidence_pipeline.ledger.jobs import document_job_id
from evidence_pipeline.ledger.ledger import Ledger
from evidence_pipeline.ledger.rows import DocumentJob
from evidence_pipeline.models import EventType, TenantMonth, current_month


class Submissions:
    def __init__(self, ledger: Ledger):
        self.ledger = ledger
        self.document_jobs = ledger.document_jobs

    def submit_job(
        self,
        tenant: str,
        idempotency_key: str,
        *,
        request_sha256: str,
        operation: str,
        request: dict[str, Any],
        policy_version: str,
        actor: str,
        limits: JobLimits | None,
        clock: Clock,
    ) -> tuple[DocumentJob, bool]:
        """Accept a job once per (tenant, batch, idempotency key). Returns (job, created). The same key with another
        request digest is IDEMPOTENCY_CONFLICT, recorded in the ledger with both digests and nothing else. A new
        key is refused while the queue is older than its objective (INTAKE_BACKPRESSURE) or the tenant has its
        quota of outstanding jobs (TENANT_QUOTA_EXCEEDED); a key already accepted is always answered. A batch's
        children (``limits`` None) were admitted with their batch."""
        job, created = self.ledger._transact(
            lambda conn: self.submit_in(
                conn,
                tenant,
                idempotency_key,
                request_sha256=request_sha256,
                operation=operation,
                request=request,
                policy_version=policy_version,
                actor=actor,
                limits=limits,
                batch_id="",
                clock=clock,
            )
        )
        if created is None:
            raise EvidenceError(
                ReasonCode.IDEMPOTENCY_CONFLICT, "this Idempotency-Key was used for a different request"
            )
        return job, created

    def submit_in(
        self,
        conn: Connection,
        tenant: str,
        idempotency_key: str,
        *,
        request_sha256: str,
        operation: str,
        request: dict[str, Any],
        policy_version: str,
        actor: str,
        limits: JobLimits | None,
        batch_id: str,
        clock: Clock,
    ) -> tuple[DocumentJob, bool | None]:
        """submit_job inside the caller's transaction (a batch's dispatch creates its children in its own):
        (job, created), created None for an idempotency conflict."""
        job_id = document_job_id(tenant, idempotency_key, batch_id)
        existing = read_job(conn, self.ledger, tenant, job_id)
        now = time.time()
        tenant_month = TenantMonth(tenant, clock.period or current_month(now))
        if existing is not None:
            if existing.request_sha256 == request_sha256:
                return existing, False
            self.ledger._append(
                conn,
                tenant_month,
                EventType.JOB_IDEMPOTENCY_CONFLICT,
                request_sha256,
                actor=actor,
                details={
                    "job_id": job_id,
                    "request_sha256": request_sha256,
                    "accepted_request_sha256": existing.request_sha256,
                },
            )
            return existing, None
        if limits is not None:
            self.check_load(conn, tenant, now=now, limits=limits)
        conn.execute(
            self.ledger.jobs.insert().values(
                job_id=job_id,
                tenant=tenant,
                period=tenant_month.period,
                source_sha256=request_sha256,
                renderer_version=WORKER_VERSION,
                policy_version=policy_version,
                fidelity=DOCUMENT,
                state=states.ACCEPTED,
                attempts=0,
                lease_token=0,
                budget_started_at=now,
                created_at=now,
                updated_at=now,
            )
        )
        conn.execute(
            self.document_jobs.insert().values(
                job_id=job_id,
                tenant=tenant,
                batch_id=batch_id,
                idempotency_key=idempotency_key,
                request_sha256=request_sha256,
                operation=operation,
                request=canonical(request),
                accepted_at=now,
            )
        )
        self.ledger._append(
            conn,
            tenant_month,
            EventType.JOB_ACCEPTED,
            request_sha256,
            actor=actor,
            details={"job_id": job_id, "fidelity": DOCUMENT, "operation": operation, **clock.details()}
            | ({"batch_id": batch_id} if batch_id else {}),
        )
        return listed_job(conn, self.ledger, tenant, job_id), True

    def check_load(self, conn: Connection, tenant: str, *, now: float, limits: JobLimits, adding: int = 1) -> None:
        """Refuse ``adding`` new jobs of ``tenant``, inside the transaction that would accept them: backpressure on
        its own queue's age (another tenant's backlog never refuses this one) or on every tenant's outstanding jobs
        together, then its quota. Jobs that could never fit are REQUEST_EXCEEDS_QUOTA, never "try again later"."""
        if adding > limits.max_outstanding:
            raise EvidenceError(
                ReasonCode.REQUEST_EXCEEDS_QUOTA,
                f"{adding} jobs at once can never fit the tenant's "
                f"job quota of {limits.max_outstanding} outstanding jobs: submit fewer at a time",
            )
        if adding > limits.max_queued:
            raise EvidenceError(
                ReasonCode.REQUEST_EXCEEDS_QUOTA,
                f"{adding} jobs at once can never fit the service's "
                f"queue of {limits.max_queued} jobs: submit fewer at a time",
            )
        serialize_admissions(conn)
        oldest = conn.execute(self._oldest_unstarted().where(self.document_jobs.c.tenant == tenant)).scalar()
        if oldest is not None and now - oldest > limits.max_queue_age_seconds:
            raise EvidenceError(ReasonCode.INTAKE_BACKPRESSURE, "your queue is behind its objective; try again later")
        if self._outstanding(conn) + adding > limits.max_queued:
            raise EvidenceError(ReasonCode.INTAKE_BACKPRESSURE, "the service is overloaded; try again later")
        if self._outstanding(conn, tenant) + adding > limits.max_outstanding:
            raise EvidenceError(ReasonCode.TENANT_QUOTA_EXCEEDED, f"at most {limits.max_outstanding} outstanding jobs")

    def _outstanding(self, conn: Connection, tenant: str | None = None) -> int:
        """Accepted or running jobs, and the jobs of open batches not dispatched yet (they are accepted work),
        of ``tenant`` or of all."""
        docs, jobs, b = self.document_jobs.c, self.ledger.jobs.c, self.ledger.batches.c
        created = (
            select(func.count())
            .select_from(self.document_jobs)
            .join(self.ledger.jobs, jobs.job_id == docs.job_id)
            .where(jobs.state.in_((states.ACCEPTED, states.RUNNING)))
        )
        undispatched: Select[int] = select(func.coalesce(func.sum(b.jobs - b.dispatched), 0)).where(b.state == "open")
        if tenant is not None:
            created, undispatched = created.where(docs.tenant == tenant), undispatched.where(b.tenant == tenant)
        return conn.execute(created).scalar_one() + conn.execute(undispatched).scalar_one()

    def oldest_unstarted_age(self) -> float | None:
        """Seconds since the oldest accepted, never started document job was accepted (the queue-age objective)."""
        with classified_errors(), self.ledger.engine.connect() as conn:
            oldest = conn.execute(self._oldest_unstarted()).scalar()
        return None if oldest is None else time.time() - oldest

    def _oldest_unstarted(self) -> Select[float]:
        docs, jobs = self.document_jobs.c, self.ledger.jobs.c
        return (
            select(func.min(docs.accepted_at))
            .join(self.ledger.jobs, jobs.job_id == docs.job_id)
            .where(jobs.state == states.ACCEPTED, docs.started_at.is_(None))
        )
