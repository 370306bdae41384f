"""A worker process for the fault-injection tests: materializes one partition (or sweeps, or works one page of
document jobs) with the environment's settings. EVIDENCE_KILL_POINT, when set, makes it SIGKILL itself at that
point."""

import sys

from dagster import DagsterInstance, materialize

from evidence_pipeline.config import Settings
from evidence_pipeline.defs.assets import evidence_bundle, monthly_report, source_revision
from evidence_pipeline.defs.partitions import partition_key_for
from evidence_pipeline.defs.resources import EvidenceResource
from evidence_pipeline.documents.worker import run_page
from evidence_pipeline.models import TenantMonth
from evidence_pipeline.operations.maintenance import sweep_attempts
from evidence_pipeline.runtime import RunInfo, runtime_for


def main(argv: list[str]) -> int:
    if argv[0] == "sweep":
        sweep_attempts(EvidenceResource().runtime(), "test")
        return 0
    if argv[0] == "documents":
        run_page(runtime_for(Settings.from_env()), argv[1], RunInfo("fault-child"))
        return 0
    with DagsterInstance.get() as instance:
        result = materialize(
            [source_revision, monthly_report, evidence_bundle],
            instance=instance,
            partition_key=partition_key_for(TenantMonth(argv[1], argv[2])),
            resources={"evidence": EvidenceResource()},
            raise_on_error=False,
        )
    return 0 if result.success else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
