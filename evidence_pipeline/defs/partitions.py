from __future__ import annotations

from dagster import DynamicPartitionsDefinition, MonthlyPartitionsDefinition, MultiPartitionKey, MultiPartitionsDefinition

from evidence_pipeline.models import TenantMonth

tenant_partitions = DynamicPartitionsDefinition(name="tenant")
month_partitions = MonthlyPartitionsDefinition(start_date="2025-01-01")
# Dimensions sort by name, so string keys read "2026-10-01|acme-books"; build them with partition_key_for.
tenant_month_partitions = MultiPartitionsDefinition({"tenant": tenant_partitions, "month": month_partitions})


def partition_key_for(tenant_month: TenantMonth) -> MultiPartitionKey:
    return MultiPartitionKey({"tenant": tenant_month.tenant, "month": f"{tenant_month.period}-01"})


def tenant_month_of(partition_key: MultiPartitionKey) -> TenantMonth:
    keys = partition_key.keys_by_dimension
    return TenantMonth(keys["tenant"], keys["month"][:7])


def range_tags(first: TenantMonth, last: TenantMonth) -> dict[str, str]:
    """Run tags for one run over a partition range, as a backfill under the backfill policy launches it.
    Dagster's multi-partition ranges hold one dimension fixed: keep either the tenant or the month the same."""
    return {
        "dagster/asset_partition_range_start": str(partition_key_for(first)),
        "dagster/asset_partition_range_end": str(partition_key_for(last)),
    }
