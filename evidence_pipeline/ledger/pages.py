"""Dispatch pages: accepted document jobs grouped, per tenant and oldest first, into pages that one Dagster run
works each (the sensor's run key is a page id and its generation); and the attempts lost when a run died under
its leases. Evidence jobs are not paged: each gets a run of its own."""

from __future__ import annotations

import time
from collections import defaultdict

from sqlalchemy import Connection, and_, func, or_, select

from evidence_pipeline.canonical import canonical, sha256_text
from evidence_pipeline.ledger import job_states as states
from evidence_pipeline.ledger.db import classified_errors
from evidence_pipeline.ledger.document_jobs import EVIDENCE, DocumentJobs, listed_job
from evidence_pipeline.ledger.job_states import RetryBudget
from evidence_pipeline.ledger.ledger import Ledger
from evidence_pipeline.ledger.retries import expired_leases, record_lost_attempts
from evidence_pipeline.ledger.rows import DocumentJob


class Pages:
    def __init__(self, ledger: Ledger, jobs: DocumentJobs):
        self.ledger = ledger
        self.jobs = jobs  # a job closed by its lost attempt is marked finished there
        self.document_jobs = ledger.document_jobs

    def assign_pages(self, page_size: int) -> None:
        """Put accepted, unpaged jobs into pages of at most ``page_size`` jobs of one tenant each, oldest first."""
        docs, jobs = self.document_jobs.c, self.ledger.jobs.c

        def assign(conn: Connection) -> None:
            rows = conn.execute(
                select(docs.job_id, docs.tenant)
                .join(self.ledger.jobs, jobs.job_id == docs.job_id)
                .where(jobs.state == states.ACCEPTED, docs.page_id.is_(None), docs.operation != EVIDENCE)
                .order_by(docs.accepted_at)
            ).all()
            by_tenant: dict[str, list[str]] = defaultdict(list)
            for row in rows:
                by_tenant[row.tenant].append(row.job_id)
            for job_ids in by_tenant.values():
                for start in range(0, len(job_ids), page_size):
                    page = job_ids[start : start + page_size]
                    page_id = sha256_text(canonical(sorted(page)))
                    conn.execute(
                        self.document_jobs.update()
                        .where(docs.job_id.in_(page), docs.page_id.is_(None))
                        .values(page_id=page_id)
                    )

        self.ledger._transact(assign)

    def open_pages(self) -> list[tuple[str, str, int]]:
        """(page id, tenant, generation) of every page that still has work: accepted jobs (those in retry_wait once
        their next_attempt_at has come), or running ones whose lease expired (their run died). Oldest page first.
        The generation (the lease tokens of that work) grows with every attempt and survives `evidence replay`, so
        a run key of page id + generation names one dispatch of one page."""
        docs, jobs = self.document_jobs.c, self.ledger.jobs.c
        now = time.time()
        due = or_(jobs.next_attempt_at.is_(None), jobs.next_attempt_at <= now)  # not waiting in retry_wait
        lost = and_(jobs.state == states.RUNNING, states.lease_expired_clause(jobs.lease_expires_at, now))
        workable = or_(and_(jobs.state == states.ACCEPTED, due), lost)
        query = (
            select(docs.page_id, docs.tenant, func.sum(jobs.lease_token).label("generation"))
            .join(self.ledger.jobs, jobs.job_id == docs.job_id)
            .where(workable, docs.page_id.is_not(None))
            .group_by(docs.page_id, docs.tenant)
            .order_by(func.min(docs.accepted_at))
        )
        with classified_errors(), self.ledger.engine.connect() as conn:
            return [(row.page_id, row.tenant, int(row.generation)) for row in conn.execute(query)]

    def page_jobs(self, page_id: str) -> list[DocumentJob]:
        """The jobs of a page (any state), in acceptance order."""
        docs = self.document_jobs.c
        with classified_errors(), self.ledger.engine.connect() as conn:
            rows = conn.execute(
                select(docs.job_id, docs.tenant).where(docs.page_id == page_id).order_by(docs.accepted_at)
            ).all()
            return [listed_job(conn, self.ledger, row.tenant, row.job_id) for row in rows]

    def record_lost_attempts(self, budget: RetryBudget, actor: str) -> list[tuple[str, str]]:
        """Every document job whose lease expired while it ran is a failed attempt (record_lost_attempt): it waits
        in retry_wait or is dead, and no page is dispatched for a job whose budget is spent. Returns (job id, new
        state) of each."""
        docs = self.document_jobs.c
        expired = (
            expired_leases(self.ledger)
            .join(self.document_jobs, docs.job_id == self.ledger.jobs.c.job_id)
            .where(docs.operation != EVIDENCE)
        )
        moved = record_lost_attempts(self.ledger, expired, budget, actor)
        for job_id, state in moved:
            if state in states.CLOSED:
                self.jobs.mark_finished(job_id)
        return moved
