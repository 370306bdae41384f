"""What the metrics read from the ledger: a few grouped queries, each a range of an index (migration 0014 and
before), so that a scrape costs in proportion to the work in flight and the dead letters, never to the history.

- live jobs (accepted, running): the `state` index; at most the service's queue (`EVIDENCE_INTAKE_MAX_QUEUED`)
- jobs that ended in the last ``WINDOW_SECONDS``: `(state, updated_at)`
- dead letters (dead, or rejected by a failure code): `(state, last_reason)`, one seek per failure code
- the newest `bundle.published` and `sweep.completed` events: `(event_type, seq)`; the ledger's size: the primary
  key's maximum
- the webhook outbox's pending and dead deliveries: `(state, next_attempt_at)`
- overdue tenant-months: the active tenants, each with one seek of the publications' `(tenant, period)` index (in
  proportion to the registry, not to the history)

A tenant's refused documents and every succeeded job are history: no query here reads them one by one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

from sqlalchemy import and_, case, func, select

from evidence_pipeline.documents.registry import outcome_codes
from evidence_pipeline.errors import ReasonCode
from evidence_pipeline.ledger import job_states as states
from evidence_pipeline.ledger.announcements import DEAD as DELIVERY_DEAD
from evidence_pipeline.ledger.announcements import PENDING, outbox
from evidence_pipeline.ledger.db import classified_errors
from evidence_pipeline.ledger.ledger import Ledger, event_body
from evidence_pipeline.models import FIRST_PERIOD, EventType, overdue_period
from evidence_pipeline.operations.dead_letters import KINDS, TENANT_MONTH, kind_of

WINDOW_SECONDS = 300.0  # completions, failures and retries are averaged per minute over the last five minutes
ARCHIVE_LANE = "archive"  # a tenant-month job's lane label: its row does not say archive or oversize
ENDED = (states.SUCCEEDED, states.REJECTED, states.DEAD)
RETRY_WAIT = "retry_wait"  # an accepted job with a failed try: the state label a status shows
JOB_STATES = (states.ACCEPTED, RETRY_WAIT, states.RUNNING, states.DEAD, states.REJECTED)  # evidence_jobs' labels


def kind_and_lane(fidelity: str, operation: str | None) -> tuple[str, str]:
    """A job's kind (the three of `evidence dead-letter list --kind`) and lane: a document job's operation (the
    registry bounds them), `evidence` for a tenant's request of a month's bundle, `archive` for a tenant-month."""
    kind = kind_of(fidelity, operation)
    return kind, ARCHIVE_LANE if kind == TENANT_MONTH else operation or "unknown"


@dataclass
class LedgerReading:
    """One scrape's figures from the ledger, keyed by label values."""

    jobs: dict[tuple[str, str], int] = field(default_factory=dict)  # (kind, state) -> live or dead-letter jobs
    oldest_unstarted: dict[tuple[str, str], float] = field(default_factory=dict)  # (kind, lane) -> age, seconds
    leases_active: dict[str, int] = field(default_factory=dict)  # kind -> running jobs whose lease is live
    leases_expired: dict[str, int] = field(default_factory=dict)  # kind -> running jobs whose lease ran out
    ended: dict[tuple[str, str], int] = field(default_factory=dict)  # (kind, state) -> ended in the window
    attempts: dict[str, int] = field(default_factory=dict)  # kind -> attempts of the jobs ended in the window
    dead_letters: dict[str, int] = field(default_factory=dict)  # kind -> dead-letter count
    events: int = 0  # the ledger's size: its newest seq
    append_lag: float | None = None  # seconds from the newest bundle's statement to its `bundle.published` event
    outbox: dict[str, int] = field(default_factory=dict)  # delivery state -> rows (pending, dead)
    outbox_oldest_pending: float | None = None  # seconds since the oldest pending delivery was written
    sweep_failed: int = 0  # attempt directories the newest sweep failed to remove (0 before the first sweep)
    overdue: int = 0  # tenant-months past their deadline (models.OVERDUE_AFTER) without a published bundle


def _zeros() -> LedgerReading:
    """Every count of the bounded label sets at 0: a series that exists before its first job, delivery or dead
    letter lets an alert on its increase see 0 -> 1 (Prometheus cannot see the increase of a series it never had)."""
    return LedgerReading(
        jobs={(kind, state): 0 for kind in KINDS for state in JOB_STATES},
        leases_active=dict.fromkeys(KINDS, 0),
        leases_expired=dict.fromkeys(KINDS, 0),
        ended={(kind, state): 0 for kind in KINDS for state in ENDED},
        attempts=dict.fromkeys(KINDS, 0),
        dead_letters=dict.fromkeys(KINDS, 0),
        outbox=dict.fromkeys((PENDING, DELIVERY_DEAD), 0),
    )


def read(ledger: Ledger, now: float | None = None, first_period: str = FIRST_PERIOD) -> LedgerReading:
    now = time.time() if now is None else now
    reading = _zeros()
    with classified_errors(), ledger.engine.connect() as conn:
        for row in conn.execute(_live_jobs(ledger, now)):
            kind, lane = kind_and_lane(row.fidelity, row.operation)
            state = states.RUNNING if row.state == states.RUNNING else (RETRY_WAIT if row.tried else states.ACCEPTED)
            _add(reading.jobs, (kind, state), row.jobs)
            if row.state == states.RUNNING:
                _add(reading.leases_expired, kind, row.expired)
                _add(reading.leases_active, kind, row.jobs - row.expired)
            elif not row.tried:
                age = now - row.oldest
                reading.oldest_unstarted[kind, lane] = max(age, reading.oldest_unstarted.get((kind, lane), age))
        for row in conn.execute(_ended_jobs(ledger, now - WINDOW_SECONDS)):
            kind, _ = kind_and_lane(row.fidelity, row.operation)
            _add(reading.ended, (kind, row.state), row.jobs)
            _add(reading.attempts, kind, row.attempts)
        for query in _dead_letters(ledger):
            for row in conn.execute(query):
                kind, _ = kind_and_lane(row.fidelity, row.operation)
                _add(reading.dead_letters, kind, row.jobs)
                _add(reading.jobs, (kind, row.state), row.jobs)
        reading.events = conn.execute(select(func.max(ledger.audit_events.c.seq))).scalar() or 0
        reading.append_lag = _append_lag(_newest(ledger, conn, EventType.BUNDLE_PUBLISHED))
        swept = _newest(ledger, conn, EventType.SWEEP_COMPLETED)
        reading.sweep_failed = int(swept["details"].get("failed", 0)) if swept else 0
        o = outbox.c
        for row in conn.execute(
            select(o.state, func.count(), func.min(o.created_at))
            .where(o.state.in_((PENDING, DELIVERY_DEAD)))
            .group_by(o.state)
        ):
            reading.outbox[row[0]] = row[1]
            if row[0] == PENDING:
                reading.outbox_oldest_pending = now - row[2]
        period, closed = overdue_period(datetime.fromtimestamp(now, timezone.utc))
        if period >= first_period:  # a month before the deployment's first has nothing to publish
            reading.overdue = conn.execute(_overdue(ledger, period, closed.timestamp())).scalar_one()
    return reading


def _overdue(ledger: Ledger, period: str, closed: float):
    """The active tenants registered before ``period`` closed that have no bundle for it."""
    t, p = ledger.tenants.c, ledger.publications.c
    published = select(p.tenant).where(p.tenant == t.tenant, p.period == period).exists()
    return (
        select(func.count())
        .select_from(ledger.tenants)
        .where(t.offboarded_seq.is_(None), t.registered_at < closed, ~published)
    )


def _add(counts: dict, key, value: int) -> None:
    counts[key] = counts.get(key, 0) + value


def _with_operation(ledger: Ledger, *columns):
    jobs, docs = ledger.jobs.c, ledger.document_jobs.c
    return select(jobs.fidelity, docs.operation, *columns).select_from(
        ledger.jobs.outerjoin(ledger.document_jobs, docs.job_id == jobs.job_id)
    )


def _live_jobs(ledger: Ledger, now: float):
    jobs = ledger.jobs.c
    tried = (jobs.attempts > 0).label("tried")
    lost = and_(jobs.state == states.RUNNING, states.lease_expired_clause(jobs.lease_expires_at, now))
    expired = func.sum(case((lost, 1), else_=0)).label("expired")
    return (
        _with_operation(
            ledger,
            jobs.state,
            tried,
            func.count().label("jobs"),
            expired,
            func.min(jobs.budget_started_at).label("oldest"),
        )
        .where(jobs.state.in_((states.ACCEPTED, states.RUNNING)))
        .group_by(jobs.fidelity, ledger.document_jobs.c.operation, jobs.state, tried)
    )


def _ended_jobs(ledger: Ledger, since: float):
    jobs = ledger.jobs.c
    return (
        _with_operation(ledger, jobs.state, func.count().label("jobs"), func.sum(jobs.attempts).label("attempts"))
        .where(jobs.state.in_(ENDED), jobs.updated_at >= since)
        .group_by(jobs.fidelity, ledger.document_jobs.c.operation, jobs.state)
    )


def failure_codes() -> list[str]:
    """The codes that make a rejected job a dead letter: every reason code that is not a decision (dead_letters.py)."""
    decisions = outcome_codes()
    return sorted(str(code) for code in ReasonCode if str(code) not in decisions)


def _dead_letters(ledger: Ledger) -> tuple:
    """Dead jobs, and jobs rejected by a failure code: two queries, so that each is a range of its own index."""
    jobs = ledger.jobs.c
    count = _with_operation(ledger, jobs.state, func.count().label("jobs"))
    group = (jobs.fidelity, ledger.document_jobs.c.operation, jobs.state)
    return (
        count.where(jobs.state == states.DEAD).group_by(*group),
        count.where(jobs.state == states.REJECTED, jobs.last_reason.in_(failure_codes())).group_by(*group),
    )


def _newest(ledger: Ledger, conn, event_type: EventType) -> dict | None:
    """The body of the newest event of ``event_type`` (one seek of the `(event_type, seq)` index)."""
    events = ledger.audit_events.c
    text = conn.execute(
        select(events.body).where(events.event_type == event_type).order_by(events.seq.desc()).limit(1)
    ).scalar()
    return None if text is None else event_body(text)


def _append_lag(body: dict | None) -> float | None:
    """Seconds from the newest bundle's publication (its statement's `completed_at`: the bundle is in the archive)
    to its `bundle.published` event's `recorded_at` (``body``)."""
    if body is None:
        return None
    completed = body["details"].get("completed_at")
    if not isinstance(completed, str):
        return None
    try:
        return (datetime.fromisoformat(body["recorded_at"]) - datetime.fromisoformat(completed)).total_seconds()
    except ValueError:
        return None
