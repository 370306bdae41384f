"""The run queue: every run executes exactly the partitions its range names, and is charged to its tenant.

1. Dagster 1.13 launches each range run of a job (partition-set) backfill with the first partition's per-dimension
   tags beside the range tags (`_core/execution/job_backfill.py`; upstream dagster-io/dagster#28861, #30786), and
   at run time those tags win: every run would execute one partition and report its whole range done. Before a run
   is queued, tags that contradict its range are removed (`partitions.stray_dimension_tags`, removed by
   `defs/extensions/run_tags.py`). The assets refuse a run whose partitions still disagree with its range
   (RUN_PARTITIONS_MISMATCH), so an upgrade that breaks this rewrite fails loudly instead of materializing the
   wrong partitions.
2. Fairness: runs that touch one tenant carry `evidence/tenant`, which dagster.yaml caps per unique value, so one
   tenant's backfill cannot take every run slot. A range across tenants (one month of many tenants) has no single
   tenant to charge and is bounded by max_concurrent_runs and the pools instead.
"""

from dagster import DagsterRun, QueuedRunCoordinator, SubmitRunContext

from evidence_pipeline.defs.extensions.run_tags import remove_run_tags
from evidence_pipeline.defs.partitions import run_tenant, stray_dimension_tags

TENANT_TAG = "evidence/tenant"


class TenantFairRunCoordinator(QueuedRunCoordinator):
    """Dagster's run queue, with contradicting partition tags removed and every single-tenant run tagged."""

    def submit_run(self, context: SubmitRunContext) -> DagsterRun:
        run = context.dagster_run
        if stray := stray_dimension_tags(run.tags):
            run = remove_run_tags(self._instance, run, stray)
        tenant = run_tenant(run.tags)
        if tenant is not None and run.tags.get(TENANT_TAG) != tenant:
            self._instance.add_run_tags(run.run_id, {TENANT_TAG: tenant})
            run = self._instance.get_run_by_id(run.run_id)
        return super().submit_run(context._replace(dagster_run=run))
