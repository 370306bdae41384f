"""Tenant × month partitions: the open months, partition keys of tenant-months, and the range tags of range
runs."""

from __future__ import annotations

from datetime import datetime, timezone

from dagster import (
    DynamicPartitionsDefinition,
    MonthlyPartitionsDefinition,
    MultiPartitionKey,
    MultiPartitionsDefinition,
    PartitionKeyRange,
    partition_loading_context,
)

from evidence_pipeline.config import first_period, open_months
from evidence_pipeline.defs.extensions.unexported import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    MULTIDIMENSIONAL_PARTITION_PREFIX,
)
from evidence_pipeline.models import TenantMonth, first_open_period

tenant_partitions = DynamicPartitionsDefinition(name="tenant")
# A rolling window of open months, fixed when the code location loads (a code server that has run since last month
# keeps one more month until it reloads): at 10,000 tenants, 12 months are 120,000 partitions per asset, where
# every month since 2025-01 grew without end (+120,000 a year). See bench/README.md, "scale.py".
OPEN_FROM = first_open_period(datetime.now(timezone.utc).date(), open_months(), first_period())
month_partitions = MonthlyPartitionsDefinition(start_date=f"{OPEN_FROM}-01")
# Dimensions sort by name, so string keys read "2026-10-01|acme-books"; build them with partition_key_for.
tenant_month_partitions = MultiPartitionsDefinition({"tenant": tenant_partitions, "month": month_partitions})


def partition_key_for(tenant_month: TenantMonth) -> MultiPartitionKey:
    return MultiPartitionKey({"tenant": tenant_month.tenant, "month": f"{tenant_month.period}-01"})


def tenant_month_of(partition_key: MultiPartitionKey) -> TenantMonth:
    keys = partition_key.keys_by_dimension
    return TenantMonth(keys["tenant"], keys["month"][:7])


def last_complete_period(when: datetime) -> str | None:
    """The newest month partition at ``when`` (the last complete month) as "YYYY-MM"; None when there is none."""
    with partition_loading_context(effective_dt=when):
        key = month_partitions.get_last_partition_key()
    return key[:7] if key else None


def range_tags(first: TenantMonth, last: TenantMonth) -> dict[str, str]:
    """Run tags for one run over a partition range, as a backfill under the backfill policy launches it.
    Dagster's multi-partition ranges hold one dimension fixed: keep either the tenant or the month the same."""
    return {
        ASSET_PARTITION_RANGE_START_TAG: str(partition_key_for(first)),
        ASSET_PARTITION_RANGE_END_TAG: str(partition_key_for(last)),
    }


def run_range(tags: dict[str, str]) -> PartitionKeyRange | None:
    """The partition range a run's tags name, or None for a run that is not a range run."""
    start, end = tags.get(ASSET_PARTITION_RANGE_START_TAG), tags.get(ASSET_PARTITION_RANGE_END_TAG)
    return PartitionKeyRange(start, end) if start and end else None


def stray_dimension_tags(tags: dict[str, str]) -> list[str]:
    """Per-dimension partition tags (`dagster/partition/<dim>`) that contradict the run's range tags.

    Dagster 1.13 copies the first partition's tags into every range run of a job (partition-set) backfill, and at
    run time those tags win over the range: the run would execute that one partition instead of its range.
    They agree with the range only when it is a single partition and they name it.
    """
    dimensions = {key: value for key, value in tags.items() if key.startswith(MULTIDIMENSIONAL_PARTITION_PREFIX)}
    partition_range = run_range(tags)
    if not dimensions or partition_range is None:
        return []
    named = {f"{MULTIDIMENSIONAL_PARTITION_PREFIX}{dim}": key for dim, key in _dimensions_of(partition_range.start)}
    if partition_range.start == partition_range.end and dimensions == named:
        return []
    return sorted(dimensions)


def _dimensions_of(key: str) -> list[tuple[str, str]]:
    return list(tenant_month_partitions.get_partition_key_from_str(key).keys_by_dimension.items())


def run_tenant(tags: dict[str, str]) -> str | None:
    """The one tenant whose partitions a run executes, or None when it spans several (or none).

    A range run executes its range (stray per-dimension tags are removed before it is queued); Dagster's
    multi-partition ranges hold one dimension fixed, so a range whose ends name the same tenant covers that tenant
    alone. A single-partition run names its tenant in `dagster/partition/tenant`.
    """
    partition_range = run_range(tags)
    if partition_range is None:
        return tags.get(f"{MULTIDIMENSIONAL_PARTITION_PREFIX}tenant")
    if "|" not in partition_range.start or "|" not in partition_range.end:
        return None
    first, last = (dict(_dimensions_of(key))["tenant"] for key in (partition_range.start, partition_range.end))
    return first if first == last else None
