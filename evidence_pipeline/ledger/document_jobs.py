"""Document jobs once accepted: reading them, and working them under a lease (start, stages, one-off events,
the fenced commit of their outputs or decision).

A document job is an `evidence_jobs` row with fidelity ``document`` (so it moves through the same compare-and-swap
states under the same fenced leases, retry budget, dead letters and `evidence replay` as a tenant-month) plus an
`evidence_document_jobs` row. Its `source_sha256` is the request digest and its `period` the month it was accepted
in. Accepting one is submissions.py's; grouping them into pages for the Dagster runs is pages.py's. Every write
here commits its audit event in the same transaction.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, bindparam, select

from evidence_pipeline.canonical import canonical
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.ledger import announcements
from evidence_pipeline.ledger import job_states as states
from evidence_pipeline.ledger.db import classified_errors, present
from evidence_pipeline.ledger.documents import find_event_in
from evidence_pipeline.ledger.jobs import Lease, failure_message
from evidence_pipeline.ledger.ledger import Ledger, event_body
from evidence_pipeline.ledger.rows import DocumentJob
from evidence_pipeline.models import EventType, TenantMonth

WORKER_VERSION = "documents/1"  # recorded as the job's renderer_version: what processes document jobs
EVIDENCE = "evidence"  # the operation of an evidence job: a tenant-month's bundle, made by a Dagster run


@dataclass(frozen=True)
class StageChange:
    """A staged job's move from ``prior`` to ``stage``, with the facts its `document.stage` event records."""

    prior: str
    stage: str
    details: dict[str, Any]


class DocumentJobs:
    def __init__(self, ledger: Ledger):
        self.ledger = ledger
        self.document_jobs = ledger.document_jobs
        # Run for every job: built once, with parameters (see JobTransitions._job_query).
        docs = self.document_jobs.c
        self._started_update = self.document_jobs.update().where(
            docs.job_id == bindparam("started_job_id"), docs.started_at.is_(None)
        )
        self._finished_update = self.document_jobs.update().where(docs.job_id == bindparam("finished_job_id"))

    # --- reading ----------------------------------------------------------------------------------------------

    def job(self, tenant: str, job_id: str) -> DocumentJob | None:
        """``tenant``'s document job with its state, or None."""
        with classified_errors(), self.ledger.engine.connect() as conn:
            return read_job(conn, self.ledger, tenant, job_id)

    def month_jobs(self, tenant: str, period: str) -> list[DocumentJob]:
        """``tenant``'s document jobs accepted in ``period`` (not its evidence requests), by job id."""
        docs, jobs = self.document_jobs.c, self.ledger.jobs.c
        query = (
            select(docs.job_id)
            .join(self.ledger.jobs, jobs.job_id == docs.job_id)
            .where(docs.tenant == tenant, jobs.period == period, docs.operation != EVIDENCE)
            .order_by(docs.job_id)
        )
        with classified_errors(), self.ledger.engine.connect() as conn:
            return [listed_job(conn, self.ledger, tenant, job_id) for job_id in conn.execute(query).scalars()]

    def recent_decisions(self, operation: str, limit: int) -> list[DocumentJob]:
        """The ``limit`` most recently finished jobs of ``operation`` whose outputs committed, newest first."""
        docs = self.document_jobs.c
        query = (
            select(docs.tenant, docs.job_id)
            .where(docs.operation == operation, docs.outputs.is_not(None))
            .order_by(docs.finished_at.desc(), docs.job_id)
            .limit(limit)
        )
        with classified_errors(), self.ledger.engine.connect() as conn:
            return [listed_job(conn, self.ledger, row.tenant, row.job_id) for row in conn.execute(query).all()]

    def latest_review(self, tenant: str, input_id: str) -> DocumentJob | None:
        """``tenant``'s most recently finished contract review of exactly ``input_id`` whose outputs committed."""
        docs = self.document_jobs.c
        query = (
            select(docs.job_id)
            .where(
                docs.tenant == tenant,
                docs.operation == "contract-review",
                docs.outputs.is_not(None),
                docs.request.contains(canonical(input_id), autoescape=True),
            )
            .order_by(docs.finished_at.desc())
        )
        with classified_errors(), self.ledger.engine.connect() as conn:
            for job_id in conn.execute(query).scalars():
                job = listed_job(conn, self.ledger, tenant, job_id)
                if job.request["inputs"] == [input_id]:
                    return job
        return None

    def waiting_evidence_jobs(self) -> list[DocumentJob]:
        """Accepted evidence jobs, oldest first: each needs (or has) its Dagster run."""
        docs, jobs = self.document_jobs.c, self.ledger.jobs.c
        query = (
            select(docs.tenant, docs.job_id)
            .join(self.ledger.jobs, jobs.job_id == docs.job_id)
            .where(jobs.state == states.ACCEPTED, docs.operation == EVIDENCE)
            .order_by(docs.accepted_at)
        )
        with classified_errors(), self.ledger.engine.connect() as conn:
            return [listed_job(conn, self.ledger, row.tenant, row.job_id) for row in conn.execute(query).all()]

    def stage(self, job: DocumentJob) -> str | None:
        """The stage the job's current lease last recorded, or None."""
        events = self.ledger.audit_events.c
        query = (
            select(events.body)
            .where(
                events.event_type == EventType.DOCUMENT_STAGE,
                events.subject_sha256 == job.request_sha256,
                events.tenant == job.tenant,
            )
            .order_by(events.seq.desc())
        )
        with classified_errors(), self.ledger.engine.connect() as conn:
            for body in conn.execute(query).scalars():  # jobs with the same request share the subject
                details = event_body(body)["details"]
                if (details["job_id"], details["lease_token"]) == (job.job_id, job.lease_token):
                    stage: str | None = details["stage"]
                    return stage
        return None

    # --- working ----------------------------------------------------------------------------------------------

    def mark_started(self, job_id: str) -> None:
        with classified_errors(), self.ledger.writing() as conn:
            self._mark_started(conn, job_id)

    def _mark_started(self, conn: Connection, job_id: str) -> None:
        conn.execute(self._started_update, {"started_job_id": job_id, "started_at": time.time()})

    def start(self, job: DocumentJob, owner: str, ttl_seconds: float, stage: StageChange | None) -> Lease | None:
        """Lease a document job for an attempt, committed with its start time and, for a staged operation, its
        first stage: one transaction, not three. None when the job already succeeded; acquire_lease's errors."""

        def started(conn: Connection, lease: Lease) -> None:
            self._mark_started(conn, job.job_id)
            if stage is not None:
                self._append_stage(conn, job, lease, stage, actor=owner)

        return self.ledger.acquire_lease(job.job_id, owner, ttl_seconds, then=started)

    def mark_finished(self, job_id: str) -> None:
        """A job closed by a failure (rejected or dead) has finished too."""
        with classified_errors(), self.ledger.writing() as conn:
            conn.execute(self._finished_update, {"finished_job_id": job_id, "finished_at": time.time()})

    def complete(
        self,
        job: DocumentJob,
        lease: Lease,
        *,
        event_type: str,
        subject_sha256: str,
        outputs: dict[str, Any],
        actor: str,
        rejected: str | None = None,
        derived: tuple[tuple[str, dict[str, Any]], ...] = (),
        stage: StageChange | None = None,
        message: str | None = None,
    ) -> int:
        """Commit a document job's outputs: its event, the outputs and job -> succeeded in one transaction, fenced
        by ``lease``; or, for a decision against the input (``rejected``, its reason code, and ``message``, what it
        means for this input: the code's meaning when None), the outputs and then `job.rejected`, job -> rejected.
        Each of ``derived`` ((output sha256, details naming its ``artifact_id``)) gets its `document.derived` event
        in the same transaction, unless an earlier job of the same content committed it; a staged job's last
        ``stage`` (committing) comes first. Returns the outputs event's ledger position."""

        def commit(conn: Connection) -> int:
            state = states.REJECTED if rejected else states.SUCCEEDED
            why = failure_message(rejected, message) if rejected else None
            self._fence(conn, lease, state=state, lease_expires_at=None, last_reason=rejected, last_message=why)
            if stage is not None:
                self._append_stage(conn, job, lease, stage, actor=actor)
            tenant_month = TenantMonth(job.tenant, job.period)
            for sha256, details in derived:
                if (
                    find_event_in(
                        conn,
                        self.ledger,
                        job.tenant,
                        EventType.DOCUMENT_DERIVED,
                        name="artifact_id",
                        value=details["artifact_id"],
                    )
                    is None
                ):
                    self.ledger._append(
                        conn,
                        tenant_month,
                        EventType.DOCUMENT_DERIVED,
                        sha256,
                        actor=actor,
                        details=details | {"job_id": job.job_id},
                    )
            event = self.ledger._append(
                conn,
                tenant_month,
                event_type,
                subject_sha256,
                actor=actor,
                details=outputs | {"job_id": job.job_id, "lease_token": lease.token},
            )
            ended = event
            if rejected:
                attempt = self.ledger._existing_job(conn, job.job_id).attempts
                ended = self.ledger._append(
                    conn,
                    tenant_month,
                    EventType.JOB_REJECTED,
                    job.request_sha256,
                    actor=actor,
                    details={"job_id": job.job_id, "reason": rejected, "attempt": attempt, "message": why},
                )
            conn.execute(
                self._finished_update,
                {
                    "finished_job_id": job.job_id,
                    "finished_at": time.time(),
                    "outputs": canonical(outputs | {"ledger_seq": event.seq}),
                },
            )
            announcements.job_ended(conn, self.ledger, job.job_id, state=state, reason=rejected, event=ended)
            return event.seq

        return self.ledger._transact(commit)

    def record_once(
        self,
        job: DocumentJob,
        lease: Lease,
        *,
        event_type: str,
        subject_sha256: str,
        name: str,
        details: dict[str, Any],
        actor: str,
    ) -> None:
        """Append the job's tenant's event of ``event_type`` identified by details[``name``], fenced by ``lease``,
        unless one is already committed."""

        def record(conn: Connection) -> None:
            self._fence(conn, lease)
            if find_event_in(conn, self.ledger, job.tenant, event_type, name=name, value=details[name]) is None:
                self.ledger._append(
                    conn, TenantMonth(job.tenant, job.period), event_type, subject_sha256, actor=actor, details=details
                )

        self.ledger._transact(record)

    def record_stage(self, job: DocumentJob, lease: Lease, stage: StageChange, actor: str) -> None:
        """A staged job's `document.stage` event, fenced by ``lease`` like every transition (the job's state stays
        running; the stage is what its status shows). Committed without waiting for the disk: the job's outcome,
        durable, covers it; a power loss before then may undo the stages of an attempt that then never ends,
        whose lease runs out and whose retry records its own."""

        def record(conn: Connection) -> None:
            self._fence(conn, lease)
            self._append_stage(conn, job, lease, stage, actor=actor)

        self.ledger._transact(record, durable=False)

    def _fence(self, conn: Connection, lease: Lease, **values: Any) -> None:
        """Update the job only while ``lease`` is its newest, unexpired lease; LEASE_FENCED otherwise."""
        if not self.ledger._update_held(conn, lease, **values):
            raise EvidenceError(
                ReasonCode.LEASE_FENCED, f"lease {lease.token} of job {lease.job_id[:12]} is no longer held"
            )

    def _append_stage(
        self, conn: Connection, job: DocumentJob, lease: Lease, stage: StageChange, *, actor: str
    ) -> None:
        self.ledger._append(
            conn,
            TenantMonth(job.tenant, job.period),
            EventType.DOCUMENT_STAGE,
            job.request_sha256,
            actor=actor,
            details={"job_id": job.job_id, "lease_token": lease.token, "prior": stage.prior, "stage": stage.stage}
            | stage.details,
        )


def listed_job(conn: Connection, ledger: Ledger, tenant: str, job_id: str) -> DocumentJob:
    """``read_job`` of a job a query just found."""
    return present(read_job(conn, ledger, tenant, job_id), ReasonCode.JOB_NOT_FOUND, f"no job {job_id[:12]}")


def read_job(conn: Connection, ledger: Ledger, tenant: str, job_id: str) -> DocumentJob | None:
    """``tenant``'s document job with its state, read on ``conn`` (inside a caller's transaction, or not)."""
    docs, jobs = ledger.document_jobs.c, ledger.jobs.c
    query = (
        select(
            ledger.document_jobs,
            jobs.state,
            jobs.attempts,
            jobs.last_reason,
            jobs.last_message,
            jobs.period,
            jobs.lease_token,
            jobs.policy_version,
            jobs.next_attempt_at,
        )
        .join(ledger.jobs, jobs.job_id == docs.job_id)
        .where(docs.job_id == job_id, docs.tenant == tenant)
    )
    row = conn.execute(query).first()
    return None if row is None else DocumentJob.of(row)


def stage_of(job: DocumentJob, recorded: str | None) -> str:
    """What a job's status shows as its stage: accepted (retry_wait after a transient failure, until its
    next_attempt_at and then until a page run leases it), the stage a running
    job last ``recorded`` (running when it records none), completed, rejected or dead."""
    if job.state == states.ACCEPTED:
        return "retry_wait" if job.attempts else "accepted"
    return _FINAL_STAGES.get(job.state) or recorded or states.RUNNING


_FINAL_STAGES = {states.SUCCEEDED: "completed", states.REJECTED: "rejected", states.DEAD: "dead"}
