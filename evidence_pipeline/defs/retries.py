"""Tenant-month jobs are retried by a later run: a sensor asks for it when the job's retry_wait is over.

A tenant-month whose run spent Dagster's in-run retries (TRANSIENT_RETRIES, about 14 s) on a transient failure is
left in retry_wait with a persisted next_attempt_at (assets.py); one whose worker died holding its lease is recorded
here (WORKER_LOST) and waits the same way. The ledger's record is the authority and a run request is a wake-up hint:
the run key names the job's attempt and its count of failed tries, so a retried tick never launches one retry twice,
and each later retry gets a key of its own. A retry run that ends without moving the job (its pin failed, it was
cancelled, it died before any stage recorded) is counted as a failed try (RETRY_RUN_FAILED), so its spent key never
leaves the job waiting for a run. When the budget is spent the job is dead, and `evidence dead-letter
list` shows it; `evidence replay` puts it back here, due at once.
"""

from dagster import (
    DagsterRunStatus,
    DefaultSensorStatus,
    RunRequest,
    RunsFilter,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from evidence_pipeline.defs.automation import monthly_evidence_job
from evidence_pipeline.defs.coordinator import TENANT_TAG
from evidence_pipeline.defs.partitions import partition_key_for, tenant_partitions
from evidence_pipeline.defs.resources import EvidenceResource
from evidence_pipeline.errors import ReasonCode
from evidence_pipeline.ledger.rows import Job
from evidence_pipeline.models import TenantMonth

RETRY_TAG = "evidence/retry_job"  # the tenant-month job a retry run was requested for
RETRY_KEY_TAG = "evidence/retry_key"  # and its run key: the job's attempt and failed tries when it was requested
SENSOR = "tenant_month_retry_sensor"
# Between two in-run tries a job is accepted with no wait and no lease while its run renders again: one left so for
# this many lease lifetimes has no run working it (the run died between tries) and is due.
IDLE_LEASES = 5


@sensor(
    job=monthly_evidence_job,
    minimum_interval_seconds=5,
    default_status=DefaultSensorStatus.RUNNING,
    description="Retries tenant-month (monthly evidence) jobs: records the attempts whose worker died holding the "
    "lease (WORKER_LOST: retry_wait, or dead once the budget is spent) and requests one monthly_evidence run per job "
    "whose next_attempt_at has come, or that an operator replayed.",
)
def tenant_month_retry_sensor(context: SensorEvaluationContext, evidence: EvidenceResource):
    runtime = evidence.runtime()
    retries = runtime.retries
    for job_id, state in retries.record_lost_attempts(runtime.retry_wait_budget, SENSOR):
        context.log.warning(f"job {job_id[:12]}: its worker died holding the lease (WORKER_LOST); now {state}")
    partitions = set(context.instance.get_dynamic_partitions(tenant_partitions.name))
    idle = runtime.settings.lease_seconds * IDLE_LEASES
    due = {job.job_id: job for job in retries.due(idle)}
    for job_id, run in _ended_without_a_try(context, due).items():
        state = runtime.ledger.record_failure(
            job_id,
            ReasonCode.RETRY_RUN_FAILED,
            retryable=True,
            actor=SENSOR,
            budget=runtime.retry_wait_budget,
            attempt=None,
            message=f"retry run {run.run_id[:8]} ended {run.status.value} before it worked the job",
        )
        context.log.warning(
            f"job {job_id[:12]}: its retry run {run.run_id[:8]} ended before it worked the job "
            f"(RETRY_RUN_FAILED); now {state}"
        )
        due.pop(job_id)
    requests = []
    for job in due.values():
        if job.tenant not in partitions:  # offboarded, or not registered yet: nothing to run it in
            context.log.warning(f"job {job.job_id[:12]}: tenant is not a partition; not retried this tick")
            continue
        requests.append(
            RunRequest(
                run_key=_retry_key(job),
                partition_key=partition_key_for(TenantMonth(job.tenant, job.period)),
                tags={TENANT_TAG: job.tenant, RETRY_TAG: job.job_id, RETRY_KEY_TAG: _retry_key(job)},
            )
        )
    if not requests:
        return SkipReason("no tenant-month job is due")
    return SensorResult(run_requests=requests)


def _retry_key(job: Job) -> str:
    """The run key of the job's retry as it is now: one run per attempt and try."""
    return f"retry.{job.current_attempt_id}.{job.attempts}"


def _ended_without_a_try(context: SensorEvaluationContext, due: dict[str, Job]) -> dict:
    """Job id -> the retry run that was requested for the job as it is now (its key), and failed or was cancelled
    without moving it: its key is spent, so unless that try is counted the job would wait for a run forever. One
    query of the instance's runs per tick, by tag."""
    if not due:
        return {}
    ended = context.instance.get_runs(
        RunsFilter(tags={RETRY_TAG: list(due)}, statuses=[DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED])
    )
    return {
        run.tags[RETRY_TAG]: run
        for run in ended
        if run.tags.get(RETRY_KEY_TAG) == _retry_key(due[run.tags[RETRY_TAG]])
        and run.tags.get("dagster/will_retry") != "true"
    }  # a crashed run that Dagster relaunches goes on
