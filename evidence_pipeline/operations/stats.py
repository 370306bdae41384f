"""Per-stage latency percentiles from the ledger's `stages.timed` events (`evidence stats`).

Each attempt that published or converged on its bundle appends one `stages.timed` event whose details carry
``lane`` and one ``<stage>_ms`` duration per stage. A duration is None when the stage did not happen for that
attempt (no Dagster run, so no queue wait; converged on an existing publication, so nothing signed); such an
attempt is left out of that stage's count.

Percentiles are nearest-rank: the p-th percentile of n sorted values is the value at 1-based rank ceil(p·n/100).
Every figure reported is therefore a duration that was actually measured, never an interpolation between two
attempts.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from evidence_pipeline.ledger import Ledger
from evidence_pipeline.models import EventType, Stage

PERCENTILES = (50, 95, 99)
ADMISSION_EVENTS = (EventType.DOCUMENT_ADMITTED, EventType.JOB_ACCEPTED, EventType.BATCH_ACCEPTED)


def percentile(values: Sequence[float], p: int) -> float:
    """Nearest-rank percentile of ``values`` (unsorted, non-empty) for an integer ``p`` in 1..100."""
    if not values:
        raise ValueError("percentile of no values")
    if not 1 <= p <= 100:
        raise ValueError("p must be between 1 and 100")
    ordered = sorted(values)
    rank = -(-p * len(ordered) // 100)  # ceil in integers: in floats 7/100·100 is 7.000000000000001, rank 8
    return ordered[rank - 1]


@dataclass(frozen=True)
class StageSummary:
    stage: str
    count: int
    p50: float | None
    p95: float | None
    p99: float | None

    def as_dict(self) -> dict:
        return {"count": self.count, "p50": self.p50, "p95": self.p95, "p99": self.p99}


@dataclass(frozen=True)
class StageStats:
    events: int
    stages: tuple[StageSummary, ...]  # over every lane
    lanes: dict[str, tuple[StageSummary, ...]]  # lane -> the same, for the lanes that have events

    def as_dict(self) -> dict:
        def table(summaries: tuple[StageSummary, ...]) -> dict:
            return {summary.stage: summary.as_dict() for summary in summaries}

        return {
            "events": self.events,
            "stages": table(self.stages),
            "lanes": {lane: table(summaries) for lane, summaries in self.lanes.items()},
        }


def _summary(stage: str, values: Sequence[float]) -> StageSummary:
    p50, p95, p99 = (percentile(values, p) for p in PERCENTILES) if values else (None, None, None)
    return StageSummary(stage, len(values), p50, p95, p99)


def summarize(bodies: Iterable[dict]) -> StageStats:
    """Percentiles per stage over the `stages.timed` event ``bodies``, overall and per lane. One pass that keeps
    only the durations, so ``bodies`` can be a stream (a year of 10,000 tenants is 120,000 events)."""
    clocks = [(stage.value, stage.clock) for stage in Stage]
    by_lane: dict[str, dict[str, list[float]]] = {}
    events = 0
    for body in bodies:
        details = body["details"]
        lane = by_lane.setdefault(details["lane"], {stage: [] for stage, _ in clocks})
        for stage, clock in clocks:
            if (value := details.get(clock)) is not None:
                lane[stage].append(value)
        events += 1
    lanes = {
        lane: tuple(_summary(stage, values[stage]) for stage, _ in clocks) for lane, values in sorted(by_lane.items())
    }
    overall = tuple(_summary(stage, [v for values in by_lane.values() for v in values[stage]]) for stage, _ in clocks)
    return StageStats(events=events, stages=overall, lanes=lanes)


def parse_since(text: str) -> datetime:
    """An ISO-8601 date or date-time as an aware datetime; without a UTC offset it is read as UTC."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError("expected an ISO-8601 date or date-time, e.g. 2026-10-01 or 2026-10-01T12:00:00Z") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


def _events(
    ledger: Ledger, event_type: str, tenant: str | None, since: datetime | None, detail: str | None = None
) -> Iterator[dict]:
    bodies = ledger.iter_events_of_type(event_type, tenant, detail)
    if since is None:
        return bodies
    # recorded_at is only in the body (no column), so this filter runs here rather than in SQL.
    return (body for body in bodies if datetime.fromisoformat(body["recorded_at"]) >= since)


def stage_stats(ledger: Ledger, tenant: str | None = None, since: datetime | None = None) -> StageStats:
    """Stage percentiles of ``tenant`` (every tenant when None), over events recorded at or after ``since``."""
    return summarize(_events(ledger, EventType.STAGES_TIMED, tenant, since))


def admission_stats(ledger: Ledger, tenant: str | None = None, since: datetime | None = None) -> StageSummary:
    """Intake's own clock: ``admission_ms`` (request start to ledger commit) of admitted documents, jobs and
    batches. Only events that carry it are read: the evidence jobs' `job.accepted` (one per tenant-month) do not."""
    return _summary(
        "admission",
        [
            body["details"]["admission_ms"]
            for event_type in ADMISSION_EVENTS
            for body in _events(ledger, event_type, tenant, since, detail="admission_ms")
        ],
    )
