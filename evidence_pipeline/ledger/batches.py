"""Batches: a tenant's manifest of job specs, admitted as one row (behind the same load checks as a job) and turned
into child jobs by the dispatcher a page at a time, each page in one transaction with the batch's cursor; stopping
a batch; its children's counts."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Connection, func, select

from evidence_pipeline.errors import ReasonCode
from evidence_pipeline.ledger import announcements
from evidence_pipeline.ledger.admission import Clock, JobLimits
from evidence_pipeline.ledger.db import LostRace, classified_errors, present
from evidence_pipeline.ledger.ledger import Ledger
from evidence_pipeline.ledger.rows import Batch
from evidence_pipeline.ledger.submissions import Submissions
from evidence_pipeline.models import EventType, TenantMonth, current_month


class Batches:
    def __init__(self, ledger: Ledger, submissions: Submissions):
        self.ledger = ledger
        self.submissions = submissions  # a batch's load check and its children's acceptance are theirs
        self.batches = ledger.batches
        self.document_jobs = ledger.document_jobs

    def check_batch_load(self, tenant: str, jobs: int, limits: JobLimits) -> None:
        """The load check of a new batch of ``jobs``, before its specs are checked one by one (thousands cost
        seconds). A batch of the same size on record may be this one repeated, which counts itself: create_batch's
        exact check answers that one."""
        b = self.batches.c
        with classified_errors(), self.ledger.engine.connect() as conn:
            if conn.execute(select(b.batch_id).where(b.tenant == tenant, b.jobs == jobs).limit(1)).first() is None:
                self.submissions.check_load(conn, tenant, now=time.time(), limits=limits, adding=jobs)

    def create_batch(
        self,
        tenant: str,
        batch_id: str,
        *,
        manifest_sha256: str,
        store_key: str,
        jobs: int,
        actor: str,
        limits: JobLimits,
        clock: Clock,
    ) -> tuple[Batch, bool]:
        """Record a batch (its manifest is already stored); no child job is created here. The same manifest again
        returns the first record. Returns (row, created)."""

        def create(conn: Connection) -> tuple[Batch, bool]:
            existing = self._batch(conn, tenant, batch_id)
            if existing is not None:
                return existing, False
            now = time.time()
            self.submissions.check_load(conn, tenant, now=now, limits=limits, adding=jobs)
            conn.execute(
                self.batches.insert().values(
                    batch_id=batch_id,
                    tenant=tenant,
                    manifest_sha256=manifest_sha256,
                    store_key=store_key,
                    jobs=jobs,
                    dispatched=0,
                    state="open",
                    created_at=now,
                    updated_at=now,
                )
            )
            self.ledger._append(
                conn,
                TenantMonth(tenant, current_month(now)),
                EventType.BATCH_ACCEPTED,
                manifest_sha256,
                actor=actor,
                details={"batch_id": batch_id, "jobs": jobs, **clock.details()},
            )
            return present(self._batch(conn, tenant, batch_id), ReasonCode.BATCH_NOT_FOUND, batch_id), True

        return self.ledger._transact(create)

    def batch(self, tenant: str, batch_id: str) -> Batch | None:
        with classified_errors(), self.ledger.engine.connect() as conn:
            return self._batch(conn, tenant, batch_id)

    def _batch(self, conn: Connection, tenant: str, batch_id: str) -> Batch | None:
        """``tenant``'s batch, or None (another tenant's does not exist)."""
        b = self.batches.c
        row = conn.execute(select(self.batches).where(b.batch_id == batch_id, b.tenant == tenant)).first()
        return None if row is None else Batch.of(row)

    def open_batches(self) -> list[Batch]:
        """Batches with children still to create, oldest first."""
        b = self.batches.c
        with classified_errors(), self.ledger.engine.connect() as conn:
            rows = conn.execute(select(self.batches).where(b.state == "open").order_by(b.created_at, b.batch_id))
            return [Batch.of(row) for row in rows]

    def dispatch_batch_page(
        self,
        batch: Batch,
        children: list[tuple[str, str, str, dict[str, Any]]],
        policy_version: str,
        actor: str,
    ) -> bool:
        """Create the next children of a batch, (idempotency key, request digest, operation, request) each, and
        advance its cursor, in one transaction: False when the batch moved meanwhile (cancelled, or another
        dispatcher advanced it), and then nothing is created."""
        b = self.batches.c
        dispatched = batch.dispatched + len(children)

        def dispatch(conn: Connection) -> bool:
            advanced = conn.execute(
                self.batches.update()
                .where(
                    b.batch_id == batch.batch_id,
                    b.state == "open",
                    b.dispatched == batch.dispatched,
                )
                .values(
                    dispatched=dispatched,
                    state="dispatched" if dispatched >= batch.jobs else "open",
                    updated_at=time.time(),
                )
            ).rowcount
            if not advanced:
                return False
            for key, request_sha256, operation, request in children:
                self.submissions.submit_in(
                    conn,
                    batch.tenant,
                    key,
                    request_sha256=request_sha256,
                    operation=operation,
                    request=request,
                    policy_version=policy_version,
                    actor=actor,
                    limits=None,
                    batch_id=batch.batch_id,
                    clock=Clock(None),
                )
            return True

        return self.ledger._transact(dispatch)

    def stop_batch(self, tenant: str, batch_id: str, actor: str) -> Batch | None:
        """Stop dispatching a batch (idempotent); returns the batch as stopped, or None if it is not the tenant's."""

        def stop(conn: Connection) -> Batch | None:
            batch = self._batch(conn, tenant, batch_id)
            if batch is None or batch.state == "cancelled":
                return batch
            b = self.batches.c
            stopped = conn.execute(
                self.batches.update()
                .where(
                    b.batch_id == batch_id,
                    b.state == batch.state,
                    b.dispatched == batch.dispatched,
                )
                .values(state="cancelled", updated_at=time.time())
            ).rowcount
            if not stopped:
                raise LostRace()  # a dispatcher advanced it meanwhile: look again
            event = self.ledger._append(
                conn,
                TenantMonth(tenant, current_month()),
                EventType.BATCH_CANCELLED,
                batch.manifest_sha256,
                actor=actor,
                details={"batch_id": batch_id, "undispatched": batch.jobs - batch.dispatched},
            )
            if batch.state == "open":  # a dispatched batch finished (and was announced) when its last child ended
                announcements.batch_ended(conn, self.ledger, tenant, batch_id, event=event, states=("cancelled",))
            return self._batch(conn, tenant, batch_id)

        return self.ledger._transact(stop)

    def batch_counts(self, batch_id: str) -> dict[str, int]:
        """Child jobs of a batch by state."""
        docs, jobs = self.document_jobs.c, self.ledger.jobs.c
        query = (
            select(jobs.state, func.count())
            .join(self.document_jobs, jobs.job_id == docs.job_id)
            .where(docs.batch_id == batch_id)
            .group_by(jobs.state)
        )
        with classified_errors(), self.ledger.engine.connect() as conn:
            return {state: count for state, count in conn.execute(query)}

    def cancelled_children(self, batch_id: str) -> int:
        docs, jobs = self.document_jobs.c, self.ledger.jobs.c
        query = (
            select(func.count())
            .select_from(self.document_jobs)
            .join(self.ledger.jobs, jobs.job_id == docs.job_id)
            .where(docs.batch_id == batch_id, jobs.last_reason == ReasonCode.JOB_CANCELLED)
        )
        with classified_errors(), self.ledger.engine.connect() as conn:
            return conn.execute(query).scalar_one()

    def batch_children_in(self, batch_id: str, state: str) -> list[str]:
        docs, jobs = self.document_jobs.c, self.ledger.jobs.c
        query = (
            select(docs.job_id)
            .join(self.ledger.jobs, jobs.job_id == docs.job_id)
            .where(docs.batch_id == batch_id, jobs.state == state)
            .order_by(docs.accepted_at)
        )
        with classified_errors(), self.ledger.engine.connect() as conn:
            return list(conn.execute(query).scalars())
