"""Jobs that wait to be worked again: attempts lost with their worker, and tenant-month jobs in retry_wait.

A tenant-month job whose run spent Dagster's in-run retries on a transient failure waits in retry_wait (accepted,
with a persisted next_attempt_at) as a document job does, under the same budget (Runtime.retry_wait_budget), and
the tenant-month retry sensor (defs/retries.py) asks for its run once it is due. A job whose lease expired while it
ran lost its worker: that attempt is recorded (WORKER_LOST) and the job waits in retry_wait, or is dead.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Select, and_, or_, select

from evidence_pipeline.ledger import job_states as states
from evidence_pipeline.ledger.db import classified_errors
from evidence_pipeline.ledger.job_states import RetryBudget
from evidence_pipeline.ledger.ledger import Ledger
from evidence_pipeline.ledger.rows import Job


def expired_leases(ledger: Ledger) -> Select[Any, Any]:
    """(job_id, lease_token) of every job still running under a lease that has expired: its worker is gone."""
    jobs = ledger.jobs.c
    return select(jobs.job_id, jobs.lease_token).where(
        jobs.state == states.RUNNING, states.lease_expired_clause(jobs.lease_expires_at, time.time())
    )


def record_lost_attempts(
    ledger: Ledger, expired: Select[Any, Any], budget: RetryBudget, actor: str
) -> list[tuple[str, str]]:
    """Record the attempt of each job ``expired`` selects (a narrowing of expired_leases) as lost (WORKER_LOST):
    it waits in retry_wait or is dead. Returns (job id, new state) of the jobs it moved."""
    with classified_errors(), ledger.engine.connect() as conn:
        found = conn.execute(expired).all()
    moved = [(row.job_id, ledger.record_lost_attempt(row.job_id, row.lease_token, actor, budget)) for row in found]
    return [(job_id, state) for job_id, state in moved if state is not None]


class TenantMonthRetries:
    """The tenant-month (monthly evidence) jobs that wait for a run of their own."""

    def __init__(self, ledger: Ledger):
        self.ledger = ledger

    def record_lost_attempts(self, budget: RetryBudget, actor: str) -> list[tuple[str, str]]:
        jobs = self.ledger.jobs.c
        return record_lost_attempts(
            self.ledger, expired_leases(self.ledger).where(jobs.fidelity != states.DOCUMENT), budget, actor
        )

    def due(self, idle_seconds: float) -> list[Job]:
        """The tenant-month jobs to run now, oldest change first: those in retry_wait whose next_attempt_at has come,
        those an operator replayed (accepted, no attempt yet), and those left between two tries of a run that died
        (a failed try, no wait, no lease, untouched for ``idle_seconds``; also what runs before retry_wait existed
        left behind). Only live jobs are read (the state
        index): the cost follows the work waiting, not the history."""
        jobs = self.ledger.jobs.c
        now = time.time()
        query = (
            select(self.ledger.jobs)
            .where(
                jobs.state == states.ACCEPTED,
                jobs.fidelity != states.DOCUMENT,
                or_(
                    jobs.next_attempt_at <= now,
                    and_(jobs.attempts == 0, jobs.replay_of.is_not(None)),
                    and_(jobs.attempts > 0, jobs.next_attempt_at.is_(None), jobs.updated_at < now - idle_seconds),
                ),
            )
            .order_by(jobs.updated_at)
        )
        with classified_errors(), self.ledger.engine.connect() as conn:
            return [Job.of(row) for row in conn.execute(query)]
