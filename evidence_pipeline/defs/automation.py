"""The operators' monthly schedule, the tenant registry sensor, and hourly ledger maintenance."""

from dagster import (
    AssetSelection,
    DefaultScheduleStatus,
    DefaultSensorStatus,
    OpExecutionContext,
    ScheduleDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    build_schedule_from_partitioned_job,
    define_asset_job,
    job,
    op,
    sensor,
)

from evidence_pipeline.config import Settings
from evidence_pipeline.defs.assets import evidence_bundle, monthly_report, source_revision
from evidence_pipeline.defs.partitions import tenant_partitions
from evidence_pipeline.defs.resources import EvidenceResource
from evidence_pipeline.maintenance import run_maintenance
from evidence_pipeline.tenants import read_registry

monthly_evidence_job = define_asset_job(
    "monthly_evidence",
    selection=AssetSelection.assets(source_revision, monthly_report, evidence_bundle),
    description="Pin, render, gate, sign and publish the evidence of one tenant-month.",
)

# One run per tenant for the last complete month, on the 1st of every month (UTC).
monthly_evidence_schedule = build_schedule_from_partitioned_job(
    monthly_evidence_job, hour_of_day=2, default_status=DefaultScheduleStatus.RUNNING
)


@sensor(minimum_interval_seconds=60, default_status=DefaultSensorStatus.RUNNING)
def tenant_registry_sensor(context: SensorEvaluationContext, evidence: EvidenceResource):
    """Adds tenants listed in the registry as partitions and removes offboarded tenants' partitions (their
    materializations stay in the event log). Invalid ids are reported by line and never added."""
    tenants, rejected = read_registry(Settings.from_env().tenant_registry)
    for line in rejected:
        context.log.warning(f"tenant registry line {line.line} rejected: {line.code}")
    offboarded = evidence.runtime().ledger.offboarded_tenants()
    known = set(context.instance.get_dynamic_partitions(tenant_partitions.name))
    new = [tenant for tenant in tenants if tenant not in known and tenant not in offboarded]
    gone = sorted(known & offboarded)
    if not new and not gone:
        return SkipReason(f"no new tenants ({len(known)} registered, {len(rejected)} lines rejected)")
    requests = [tenant_partitions.build_add_request(new)] if new else []
    requests += [tenant_partitions.build_delete_request(gone)] if gone else []
    return SensorResult(dynamic_partitions_requests=requests)


@op
def checkpoint_and_sweep(context: OpExecutionContext, evidence: EvidenceResource) -> None:
    """Publish a signed checkpoint of the audit ledger and sweep abandoned attempt directories."""
    report = run_maintenance(evidence.runtime())
    context.log.info(f"ledger checkpoint at {report['checkpoint_size']} events; swept {report['swept']} directories")


@job(description="Signed ledger checkpoint + sweep of abandoned attempt directories.")
def ledger_maintenance():
    checkpoint_and_sweep()


ledger_maintenance_schedule = ScheduleDefinition(
    job=ledger_maintenance, cron_schedule="17 * * * *", default_status=DefaultScheduleStatus.RUNNING
)
