"""The operators' monthly schedule, the tenant registry sensor, and hourly ledger maintenance."""

from collections.abc import Iterator
from datetime import datetime, timezone

from dagster import (
    AssetSelection,
    DefaultScheduleStatus,
    DefaultSensorStatus,
    OpExecutionContext,
    RunRequest,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    define_asset_job,
    job,
    op,
    schedule,
    sensor,
)

from evidence_pipeline.config import PARTITIONS_GUIDANCE
from evidence_pipeline.defs.assets import PARTITIONS_PER_RUN, evidence_bundle, monthly_report, source_revision
from evidence_pipeline.defs.partitions import last_complete_period, month_partitions, range_tags, tenant_partitions
from evidence_pipeline.defs.resources import EvidenceResource
from evidence_pipeline.models import TenantMonth
from evidence_pipeline.operations.maintenance import run_maintenance

monthly_evidence_job = define_asset_job(
    "monthly_evidence",
    selection=AssetSelection.assets(source_revision, monthly_report, evidence_bundle),
    description="Pin, render, gate, sign and publish the evidence of one tenant-month.",
)


@schedule(
    job=monthly_evidence_job,
    cron_schedule="0 2 1 * *",
    execution_timezone="UTC",
    default_status=DefaultScheduleStatus.RUNNING,
    description="On the 1st (02:00 UTC): last month's evidence for every registered tenant, in range runs.",
)
def monthly_evidence_schedule(context: ScheduleEvaluationContext) -> Iterator[RunRequest | SkipReason]:
    """The last complete month of every registered tenant, on the 1st of every month (UTC), in range runs of up to
    PARTITIONS_PER_RUN tenants: the runs a backfill of that month would make, not one run per tenant.

    `build_schedule_from_partitioned_job` asks for one run per tenant-month: with 10,000 tenants, 10,000 runs, each
    a run worker process that pays Dagster's and the pipeline's imports (bench/scale.py measured ~55 min only to
    create them). A range names its first and last tenant in registration order, the order Dagster expands a range
    of the dynamic dimension in; tenants registered after the tick are after every range, so no run takes them in.
    """
    when = context.scheduled_execution_time or datetime.now(timezone.utc)
    period = last_complete_period(when)
    tenants = context.instance.get_dynamic_partitions(tenant_partitions.name)
    if period is None or not tenants:
        yield SkipReason(f"nothing to run for {when:%Y-%m}: {len(tenants)} tenants registered")
        return
    for start in range(0, len(tenants), PARTITIONS_PER_RUN):
        chunk = tenants[start : start + PARTITIONS_PER_RUN]
        first, last = TenantMonth(chunk[0], period), TenantMonth(chunk[-1], period)
        yield RunRequest(run_key=f"{period}:{first.tenant}..{last.tenant}", tags=range_tags(first, last))


@sensor(
    minimum_interval_seconds=60,
    default_status=DefaultSensorStatus.RUNNING,
    description="Adds registered tenants (`evidence tenant add`) as partitions; removes offboarded ones.",
)
def tenant_registry_sensor(context: SensorEvaluationContext, evidence: EvidenceResource):
    """Adds the tenants of the registry (in the ledger's database: `evidence tenant add`) as partitions, in
    registration order, and removes offboarded tenants' partitions (their materializations stay in the event
    log). One indexed query each for the registry and the offboarded tenants, and set lookups: O(n) a tick."""
    runtime = evidence.runtime()
    tenants = runtime.tenants.active()
    offboarded = runtime.ledger.offboarded_tenants()
    known = set(context.instance.get_dynamic_partitions(tenant_partitions.name))
    new = [tenant for tenant in tenants if tenant not in known and tenant not in offboarded]
    gone = sorted(known & offboarded)
    if not new and not gone:
        return SkipReason(f"no new tenants ({len(known)} registered)")
    partitions = (len(known) + len(new) - len(gone)) * month_partitions.get_num_partitions()
    if new and partitions > PARTITIONS_GUIDANCE:
        context.log.warning(
            f"{partitions} partitions per asset once these tenants are added, past Dagster's "
            f"guidance of {PARTITIONS_GUIDANCE}: lower EVIDENCE_OPEN_MONTHS (docs: Open months)"
        )
    requests = [tenant_partitions.build_add_request(new)] if new else []
    requests += [tenant_partitions.build_delete_request(gone)] if gone else []
    return SensorResult(dynamic_partitions_requests=requests)


@op
def checkpoint_and_sweep(context: OpExecutionContext, evidence: EvidenceResource) -> None:
    """Publish a signed checkpoint of the audit ledger and sweep abandoned attempt directories."""
    report = run_maintenance(evidence.runtime(), context.run_id)
    swept = report["sweep"]
    context.log.info(
        f"ledger checkpoint at {report['checkpoint_size']} events; attempt directories: "
        + ", ".join(f"{name} {count}" for name, count in swept.items())
        + " (sweep.completed)"
    )
    refused = {name: outcome for name, outcome in report["witnesses"].items() if outcome != "cosigned"}
    if refused:  # a refusal may be a fork; a witness that was down catches up at the next run
        context.log.warning(f"witnesses that did not co-sign: {refused}")


@job(description="Signed ledger checkpoint + sweep of abandoned attempt directories.")
def ledger_maintenance():
    checkpoint_and_sweep()


ledger_maintenance_schedule = ScheduleDefinition(
    job=ledger_maintenance,
    cron_schedule="17 * * * *",
    default_status=DefaultScheduleStatus.RUNNING,
    description="Hourly: a signed ledger checkpoint and a sweep of abandoned attempt directories.",
)
