"""A job's states, its retry budget and when its lease is live: one definition, below everything that reads or
fences a job.

A lease is live strictly before its expiry instant; at ``lease_expires_at`` it has expired. The Python check and
the SQL clauses below are the same rule, so a fenced UPDATE, a takeover, the lost-worker sweep and the metrics never
disagree about a lease at the boundary (evidence_pipeline_tests/ledger/test_leases.py checks them at that instant).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import or_

from evidence_pipeline.models import EventType

if TYPE_CHECKING:
    from sqlalchemy import ColumnElement

ACCEPTED, RUNNING, SUCCEEDED, REJECTED, DEAD = "accepted", "running", "succeeded", "rejected", "dead"
CLOSED = (REJECTED, DEAD)
DOCUMENT = "document"  # the fidelity of a document job (intake): its row in evidence_document_jobs says the rest
# The event a failed attempt appends, by the state it leaves the job in (accepted: it waits to be retried).
FAILED_AS = {ACCEPTED: EventType.JOB_ACCEPTED, REJECTED: EventType.JOB_REJECTED, DEAD: EventType.JOB_DEAD}


@dataclass(frozen=True)
class RetryBudget:
    """Transient failures are retried until both are spent: ``max_attempts`` failed attempts, and
    ``max_elapsed_seconds`` since acceptance (or the last replay). Then the job is dead.

    Both, so the budget is spent over time: a quick burst of retries (one run's op retries, one demo on a full
    disk) cannot kill a job before the outage had time to end, and a job accepted long ago that fails once has
    still been tried only once.
    """

    max_attempts: int = 4
    max_elapsed_seconds: float = 900.0
    # How long a job waits in retry_wait before its next attempt may be dispatched (its persisted next_attempt_at):
    # this after the first failure, twice as long after each later one. 0: no wait is recorded (a tenant-month
    # job's failures that Dagster's RetryPolicy retries within the run; its run's last try waits in retry_wait).
    retry_delay_seconds: float = 0.0

    def exhausted(self, attempts: int, elapsed_seconds: float) -> bool:
        return attempts >= self.max_attempts and elapsed_seconds >= self.max_elapsed_seconds

    def next_attempt_at(self, attempts: int, now: float) -> float | None:
        return now + self.retry_delay_seconds * 2 ** max(attempts - 1, 0) if self.retry_delay_seconds else None


def lease_live(expires_at: float | None, now: float) -> bool:
    """Whether a lease that expires at ``expires_at`` (None: no lease) is still live at ``now``."""
    return expires_at is not None and now < expires_at


def lease_live_clause(expires_at: ColumnElement[float], now: object) -> ColumnElement[bool]:
    """``lease_live`` in SQL (``now``: a value or a bound parameter)."""
    return expires_at > now


def lease_expired_clause(expires_at: ColumnElement[float], now: object) -> ColumnElement[bool]:
    """Not ``lease_live``, in SQL: no lease, or one whose expiry instant has come."""
    return or_(expires_at.is_(None), expires_at <= now)
