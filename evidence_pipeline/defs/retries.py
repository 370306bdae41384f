"""Tenant-month jobs are retried by a later run: a sensor asks for it when the job's retry_wait is over.

A tenant-month whose run spent Dagster's in-run retries (TRANSIENT_RETRIES, about 14 s) on a transient failure is
left in retry_wait with a persisted next_attempt_at (assets.py); one whose worker died holding its lease is recorded
here (WORKER_LOST) and waits the same way. The ledger's record is the authority and a run request is a wake-up hint:
the run key names the job's attempt and its count of failed tries, so a retried tick never launches one retry twice,
and each later retry gets a key of its own. When the budget is spent the job is dead, and `evidence dead-letter
list` shows it; `evidence replay` puts it back here, due at once.
"""

from dagster import DefaultSensorStatus, RunRequest, SensorEvaluationContext, SensorResult, SkipReason, sensor

from evidence_pipeline.defs.automation import monthly_evidence_job
from evidence_pipeline.defs.coordinator import TENANT_TAG
from evidence_pipeline.defs.partitions import partition_key_for, tenant_partitions
from evidence_pipeline.defs.resources import EvidenceResource
from evidence_pipeline.ledger.retries import TenantMonthRetries
from evidence_pipeline.models import TenantMonth

RETRY_TAG = "evidence/retry_job"  # the tenant-month job a retry run was requested for
SENSOR = "tenant_month_retry_sensor"


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
    retries = TenantMonthRetries(runtime.ledger)
    for job_id, state in retries.record_lost_attempts(runtime.retry_wait_budget, SENSOR):
        context.log.warning(f"job {job_id[:12]}: its worker died holding the lease (WORKER_LOST); now {state}")
    partitions = set(context.instance.get_dynamic_partitions(tenant_partitions.name))
    requests = []
    for job in retries.due():
        if job["tenant"] not in partitions:  # offboarded, or not registered yet: nothing to run it in
            context.log.warning(f"job {job['job_id'][:12]}: tenant is not a partition; not retried this tick")
            continue
        requests.append(RunRequest(
            run_key=f"retry.{job['attempt_id']}.{job['attempts']}",
            partition_key=partition_key_for(TenantMonth(job["tenant"], job["period"])),
            tags={TENANT_TAG: job["tenant"], RETRY_TAG: job["job_id"]},
        ))
    if not requests:
        return SkipReason("no tenant-month job is due")
    return SensorResult(run_requests=requests)
