"""`evidence demo`: register demo tenants, publish their sources, materialize recent months through Dagster."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import date

from dagster import DagsterInstance

from evidence_pipeline import sources
from evidence_pipeline.defs.automation import monthly_evidence_job
from evidence_pipeline.defs.coordinator import TENANT_TAG
from evidence_pipeline.defs.partitions import partition_key_for, range_tags, run_tenant, tenant_partitions
from evidence_pipeline.defs.resources import EvidenceResource
from evidence_pipeline.demo_data import DEMO_TENANTS, demo_transactions
from evidence_pipeline.ledger.checkpoints import publish_checkpoint
from evidence_pipeline.models import TenantMonth
from evidence_pipeline.tenants import add_to_registry, read_registry

SOURCE_MONTHS = 14  # months of demo source data per tenant


@dataclass(frozen=True)
class DemoBundle:
    tenant_month: TenantMonth
    location: str
    report_sha256: str
    newly_published: bool
    pages: int


def complete_months(today: date, count: int) -> list[str]:
    """The ``count`` most recent complete months before ``today``, oldest first."""
    months, year, month = [], today.year, today.month
    for _ in range(count):
        year, month = (year - 1, 12) if month == 1 else (year, month - 1)
        months.append(f"{year:04d}-{month:02d}")
    return months[::-1]


def run_demo(months: int, today: date, evidence: EvidenceResource | None = None,
             instance: DagsterInstance | None = None) -> list[DemoBundle]:
    """Runs on ``instance``, or on the one DAGSTER_HOME names."""
    evidence = evidence or EvidenceResource()
    with contextlib.nullcontext(instance) if instance else DagsterInstance.get() as dagster_instance:
        return _run_demo(dagster_instance, evidence, months, today)


def _run_demo(instance: DagsterInstance, evidence: EvidenceResource, months: int, today: date) -> list[DemoBundle]:
    runtime = evidence.runtime()
    add_to_registry(runtime.settings.tenant_registry, list(DEMO_TENANTS))
    tenants, _ = read_registry(runtime.settings.tenant_registry)
    instance.add_dynamic_partitions(tenant_partitions.name, [t for t in tenants if t in DEMO_TENANTS])
    for tenant in DEMO_TENANTS:
        for period in complete_months(today, SOURCE_MONTHS):
            tenant_month = TenantMonth(tenant, period)
            sources.publish_revision(runtime.sources, tenant_month, demo_transactions(tenant_month))

    from evidence_pipeline.definitions import defs

    job = defs.resolve_job_def(monthly_evidence_job.name)
    bundles = []
    periods = complete_months(today, months)
    for tenant in DEMO_TENANTS:  # one run per tenant over its months, as an analyst's backfill would run them
        tags = range_tags(TenantMonth(tenant, periods[0]), TenantMonth(tenant, periods[-1]))
        result = job.execute_in_process(
            instance=instance, resources={"evidence": evidence}, tags=tags | {TENANT_TAG: run_tenant(tags)},
            run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
        )
        reports, published = _metadata(result, "monthly_report"), _metadata(result, "evidence_bundle")
        for period in periods:
            key = str(partition_key_for(TenantMonth(tenant, period)))
            bundle = published[key]
            bundles.append(DemoBundle(TenantMonth(tenant, period), bundle["location"], bundle["report_sha256"],
                                      bundle["newly_published"], reports[key]["pages"]))
    publish_checkpoint(runtime.ledger, runtime.archive, runtime.keyring)  # so `evidence ledger prove` works now
    return bundles


def _metadata(result, asset_name: str) -> dict[str, dict]:
    """partition key -> metadata of ``asset_name``'s materializations in this run."""
    return {
        event.partition: {name: value.value for name, value in event.materialization.metadata.items()}
        for event in result.get_asset_materialization_events() if event.asset_key.to_user_string() == asset_name
    }
