"""A job's states and when its lease is live: one definition, below everything that reads or fences a job.

A lease is live strictly before its expiry instant; at ``lease_expires_at`` it has expired. The Python check and
the SQL clauses below are the same rule, so a fenced UPDATE, a takeover, the lost-worker sweep and the metrics never
disagree about a lease at the boundary (evidence_pipeline_tests/test_leases.py checks them at that instant).
"""

from __future__ import annotations

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


def lease_live(expires_at: float | None, now: float) -> bool:
    """Whether a lease that expires at ``expires_at`` (None: no lease) is still live at ``now``."""
    return expires_at is not None and now < expires_at


def lease_live_clause(expires_at: ColumnElement[float], now: object) -> ColumnElement[bool]:
    """``lease_live`` in SQL (``now``: a value or a bound parameter)."""
    return expires_at > now


def lease_expired_clause(expires_at: ColumnElement[float], now: object) -> ColumnElement[bool]:
    """Not ``lease_live``, in SQL: no lease, or one whose expiry instant has come."""
    return or_(expires_at.is_(None), expires_at <= now)
