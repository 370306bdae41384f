"""The code location: assembles evidence_pipeline.defs into Definitions, nothing else."""

from dagster import Definitions

from evidence_pipeline.defs.assets import evidence_bundle, monthly_report, report_passes_gate, source_revision
from evidence_pipeline.defs.automation import (
    ledger_maintenance, ledger_maintenance_schedule, monthly_evidence_job, monthly_evidence_schedule,
    tenant_registry_sensor,
)
from evidence_pipeline.defs.resources import EvidenceResource

defs = Definitions(
    assets=[source_revision, monthly_report, evidence_bundle],
    asset_checks=[report_passes_gate],
    jobs=[monthly_evidence_job, ledger_maintenance],
    schedules=[monthly_evidence_schedule, ledger_maintenance_schedule],
    sensors=[tenant_registry_sensor],
    resources={"evidence": EvidenceResource()},
)
