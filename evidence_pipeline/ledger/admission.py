"""What intake's admissions (a document, a job, a batch) share in the ledger: the request's clock that their events
record, the limits that refuse new jobs, and the lock under which a quota's check and its write commit one after
another."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, text


@dataclass(frozen=True)
class Clock:
    """When an intake request began (time.perf_counter()), or None outside a request: admission events carry
    ``admission_ms``, the request's time until its ledger commit, as a clock of its own (`evidence stats`).
    ``period``: the month a job counts in, when not the one it is accepted in (only `evidence demo` sets it, to
    file its jobs under the last complete month, whose report it then renders)."""

    started: float | None
    period: str | None = None

    def details(self) -> dict[str, Any]:
        return {} if self.started is None else {"admission_ms": round((time.perf_counter() - self.started) * 1000, 3)}


@dataclass(frozen=True)
class JobLimits:
    max_outstanding: int  # a tenant's accepted or running jobs, its open batches' undispatched jobs included
    max_queue_age_seconds: float  # the tenant's oldest accepted, never started job
    max_queued: int  # every tenant's outstanding jobs together: true overload


def serialize_admissions(conn: Connection) -> None:
    """Admissions that check a quota commit one after another from the check on. SQLite's writers are serial
    already; under PostgreSQL's read committed two could read the same counts (the chain's unique prev_hash
    catches only those that also read the same head), so they queue on a transaction-scoped advisory lock."""
    if conn.dialect.name == "postgresql":
        conn.execute(_ADMISSIONS_LOCK)


_ADMISSIONS_LOCK = text("SELECT pg_advisory_xact_lock(hashtext('evidence_admissions'))")
