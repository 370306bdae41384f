"""The Dagster run queue, as `evidence stats` reports it: how long the oldest queued run has been waiting."""

from __future__ import annotations

from datetime import datetime, timezone

from dagster import DagsterInstance, DagsterRunStatus, RunsFilter


def oldest_queued_run_age_seconds(instance: DagsterInstance, now: datetime | None = None) -> float | None:
    """Seconds since the oldest QUEUED run (any job, any tenant) was created; None when nothing is queued."""
    records = instance.get_run_records(
        RunsFilter(statuses=[DagsterRunStatus.QUEUED]), limit=1, order_by="create_timestamp", ascending=True
    )
    if not records:
        return None
    # create_timestamp comes back as an aware UTC datetime.
    return ((now or datetime.now(timezone.utc)) - records[0].create_timestamp).total_seconds()


def oldest_queued_run_age_in_dagster_home() -> float | None:
    """The same, on the instance that $DAGSTER_HOME names."""
    with DagsterInstance.get() as instance:
        return oldest_queued_run_age_seconds(instance)
