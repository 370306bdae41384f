"""Document work in Dagster: a sensor pages admitted document jobs into runs; a run works one page.

The intake server only writes the ledger; the ledger's record is the authority and a run request is a wake-up hint.
Each tick pages the accepted jobs (one tenant per page, oldest first) and asks for one run per open page, with run
key page id + generation: a retried tick never launches a page twice, and a page whose jobs went back to work (a
transient failure, a dead run's expired lease) gets a new key. Runs carry the tenant tag, so the tenant-fair queue
applies to them like to every other run.
"""

from collections import Counter, defaultdict
from datetime import datetime, timezone

from dagster import (
    AssetMaterialization,
    Backoff,
    Config,
    DagsterRunStatus,
    DefaultSensorStatus,
    Failure,
    Jitter,
    MetadataValue,
    OpExecutionContext,
    RetryPolicy,
    RunConfig,
    RunFailureSensorContext,
    RunRequest,
    RunStatusSensorContext,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    job,
    op,
    run_failure_sensor,
    run_status_sensor,
    sensor,
)

from evidence_pipeline.defs.assets import document_jobs
from evidence_pipeline.defs.automation import monthly_evidence_job
from evidence_pipeline.defs.coordinator import TENANT_TAG
from evidence_pipeline.defs.partitions import (
    OPEN_FROM,
    last_complete_period,
    partition_key_for,
    tenant_partitions,
)
from evidence_pipeline.defs.resources import EvidenceResource
from evidence_pipeline.documents.dispatch import dispatch_batches, finish_evidence_job, refuse_evidence_job
from evidence_pipeline.documents.registry import outcome_codes
from evidence_pipeline.documents.worker import run_page
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.ledger import jobs as states
from evidence_pipeline.models import TenantMonth
from evidence_pipeline.runtime import RunInfo

PAGE_TAG = "evidence/document_page"
EVIDENCE_JOB_TAG = "evidence/request_job"  # the intake job an evidence run was requested for


class PageConfig(Config):
    page_id: str


@op(out={}, retry_policy=RetryPolicy(max_retries=3, delay=2, backoff=Backoff.EXPONENTIAL, jitter=Jitter.PLUS_MINUS))
def document_page(context: OpExecutionContext, config: PageConfig, evidence: EvidenceResource):
    """Work one page of document jobs, each under its own fenced lease. A gate refusal or a review decision is the
    job's outcome, not the run's failure; every other failure of a job counts against its budget: a transient one
    (PROCESSOR_FAILED, ...) puts it in retry_wait, and the sensor dispatches its page again once
    its next_attempt_at has come; a job that ends dead or rejected by a failure fails the run for good. A
    transient failure of the page itself (the ledger did not answer) retries the step."""
    outcomes = run_page(evidence.runtime(), config.page_id, RunInfo(context.run_id, context.retry_number + 1))
    counts = Counter(f"{o.operation}/{o.state}" + (f"/{o.reason}" if o.reason else "") for o in outcomes)
    context.log.info(f"page {config.page_id[:12]}: " + ", ".join(f"{k}={v}" for k, v in sorted(counts.items())))
    yield from _document_activity(context, config.page_id, outcomes)
    for waiting in (o for o in outcomes if o.state == states.ACCEPTED):
        context.log.info(f"job {waiting.job_id[:12]} waits in retry_wait ({waiting.reason})")
    failed = [o for o in outcomes if o.state in states.CLOSED and o.reason not in outcome_codes()]
    if failed:
        raise Failure(
            description="document jobs failed: " + ", ".join(f"{o.job_id[:12]} {o.reason}" for o in failed),
            allow_retries=False,
        )


def _document_activity(context: OpExecutionContext, page_id: str, outcomes: list):
    """One `document_jobs` materialization per tenant-month of the page: counts by operation and state, job ids.
    A tenant that is not a registered partition yet is logged instead (the tenant registry adds tenants)."""
    known = set(context.instance.get_dynamic_partitions(tenant_partitions.name))
    by_month = defaultdict(list)
    for outcome in outcomes:
        by_month[TenantMonth(outcome.tenant, outcome.period)].append(outcome)
    for tenant_month, month in sorted(by_month.items(), key=lambda item: str(item[0])):
        if tenant_month.tenant not in known:
            context.log.warning(f"tenant {tenant_month.tenant} is not a partition yet: document_jobs not recorded")
            continue
        counts: dict[str, dict[str, int]] = defaultdict(dict)
        for outcome in month:
            counts[outcome.operation][outcome.state] = counts[outcome.operation].get(outcome.state, 0) + 1
        yield AssetMaterialization(
            asset_key=document_jobs.key,
            partition=str(partition_key_for(tenant_month)),
            metadata={
                "page_id": page_id,
                "jobs": len(month),
                "counts": MetadataValue.json(dict(counts)),
                "job_ids": MetadataValue.json(sorted(o.job_id for o in month)),
                "refused": MetadataValue.json(sorted({o.reason for o in month if o.reason})),
            },
        )


@job(
    description="Work one page of admitted document jobs (runs come from document_dispatch_sensor).",
    tags={"dagster/retry_on_asset_or_op_failure": "false"},
)  # terminal failures are never relaunched
def document_page_job():
    document_page()


@sensor(
    jobs=[document_page_job, monthly_evidence_job],
    minimum_interval_seconds=5,
    default_status=DefaultSensorStatus.RUNNING,
    description="Pages admitted document jobs into document_page_job runs, and evidence jobs into monthly_evidence "
    "runs.",
)
def document_dispatch_sensor(context: SensorEvaluationContext, evidence: EvidenceResource):
    """Create the next page of children of every tenant's oldest open batch, record the attempts of runs that died
    holding a lease (retry_wait or dead), page accepted document jobs, request one run per open page, and one run
    of monthly_evidence per accepted evidence job (its tenant registered as a partition if it was not). No one
    row fails the tick: a row that cannot be dispatched is rejected with its code or skipped and logged."""
    rt = evidence.runtime()
    page_size = rt.settings.document_page_size
    dispatch_batches(rt, page_size, "document_dispatch_sensor")
    lost = rt.pages.record_lost_attempts(rt.retry_wait_budget, "document_dispatch_sensor")
    for job_id, state in lost:
        context.log.warning(f"job {job_id[:12]}: its run died holding the lease (WORKER_LOST); now {state}")
    rt.pages.assign_pages(page_size)
    requests = [
        RunRequest(
            run_key=f"{page_id}.{generation}",
            job_name=document_page_job.name,
            run_config=RunConfig(ops={"document_page": PageConfig(page_id=page_id)}),
            tags={TENANT_TAG: tenant, PAGE_TAG: page_id},
        )
        for page_id, tenant, generation in rt.pages.open_pages()
    ]
    waiting = []
    for request in rt.document_jobs.waiting_evidence_jobs():
        try:  # one job that cannot be dispatched must not fail the tick for every other
            refusal = _not_a_partition(request.request["period"])
            if refusal is not None:
                refuse_evidence_job(rt, request, refusal, "document_dispatch_sensor")
                continue
            rt.document_jobs.mark_started(request.job_id)
        except EvidenceError as error:
            context.log.warning(f"evidence job {request.job_id[:12]} not dispatched this tick ({error.code})")
            continue
        waiting.append(request)
        requests.append(
            RunRequest(
                run_key=f"evidence.{request.job_id}.{request.lease_token}",
                job_name=monthly_evidence_job.name,
                partition_key=partition_key_for(TenantMonth(request.tenant, request.request["period"])),
                tags={TENANT_TAG: request.tenant, EVIDENCE_JOB_TAG: request.job_id},
            )
        )
    known = set(context.instance.get_dynamic_partitions(tenant_partitions.name))
    new_tenants = sorted({request.tenant for request in waiting} - known)
    if not requests:
        return SkipReason("no document jobs waiting")
    return SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[tenant_partitions.build_add_request(new_tenants)] if new_tenants else [],
    )


def _not_a_partition(period: str) -> str | None:
    """Why an evidence job's month has no partition to run in on this clock, or None: it closed while it waited
    (PERIOD_CLOSED), or it is not complete yet (PERIOD_NOT_AVAILABLE: accepted by a server whose clock ran
    ahead)."""
    if period < OPEN_FROM:
        return ReasonCode.PERIOD_CLOSED
    last = last_complete_period(datetime.now(timezone.utc))
    if last is None or period > last:
        return ReasonCode.PERIOD_NOT_AVAILABLE
    return None


def _finish(context: RunStatusSensorContext, evidence: EvidenceResource, succeeded: bool) -> None:
    run = context.dagster_run
    if EVIDENCE_JOB_TAG in run.tags and run.tags.get("dagster/will_retry") != "true":
        finish_evidence_job(evidence.runtime(), run.tags[TENANT_TAG], run.tags[EVIDENCE_JOB_TAG], run.run_id, succeeded)


@run_status_sensor(
    run_status=DagsterRunStatus.SUCCESS,
    monitored_jobs=[monthly_evidence_job],
    default_status=DefaultSensorStatus.RUNNING,
    description="Records a published (or converged) bundle on the intake evidence job that asked for it.",
)
def evidence_job_succeeded(context: RunStatusSensorContext, evidence: EvidenceResource):
    """An evidence job's run published (or converged on) the tenant-month's bundle: record it on the job."""
    _finish(context, evidence, succeeded=True)


@run_failure_sensor(
    monitored_jobs=[monthly_evidence_job],
    default_status=DefaultSensorStatus.RUNNING,
    description="Rejects the intake evidence job whose run failed for good (EVIDENCE_RUN_FAILED).",
)
def evidence_job_failed(context: RunFailureSensorContext, evidence: EvidenceResource):
    """An evidence job's run failed for good (no run retry left): the job is rejected, EVIDENCE_RUN_FAILED."""
    _finish(context, evidence, succeeded=False)
