"""The code location: assembles evidence_pipeline.defs into Definitions, nothing else."""

from dagster import Definitions, in_process_executor

from evidence_pipeline.defs.assets import (
    document_jobs,
    evidence_bundle,
    monthly_report,
    report_preview,
    source_revision,
)
from evidence_pipeline.defs.automation import (
    ledger_maintenance,
    ledger_maintenance_schedule,
    monthly_evidence_job,
    monthly_evidence_schedule,
    tenant_registry_sensor,
)
from evidence_pipeline.defs.checks import offline_verification
from evidence_pipeline.defs.documents import (
    document_dispatch_sensor,
    document_page_job,
    evidence_job_failed,
    evidence_job_succeeded,
)
from evidence_pipeline.defs.landing import source_landing_sensor
from evidence_pipeline.defs.resources import EvidenceResource
from evidence_pipeline.defs.retries import tenant_month_retry_sensor
from evidence_pipeline.defs.webhooks import webhook_delivery_sensor

defs = Definitions(
    assets=[source_revision, monthly_report, evidence_bundle, report_preview, document_jobs],
    asset_checks=[offline_verification],
    jobs=[monthly_evidence_job, ledger_maintenance, document_page_job],
    schedules=[monthly_evidence_schedule, ledger_maintenance_schedule],
    sensors=[
        tenant_registry_sensor,
        document_dispatch_sensor,
        evidence_job_succeeded,
        evidence_job_failed,
        webhook_delivery_sensor,
        source_landing_sensor,
        tenant_month_retry_sensor,
    ],
    resources={"evidence": EvidenceResource()},
    # A run's steps share one process, so its worker pool starts once and serves every stage of the range.
    executor=in_process_executor,
)
