"""The run queue's fairness rule: runs that touch one tenant carry `evidence/tenant`, which dagster.yaml caps
per unique value, so one tenant's backfill cannot take every run slot.

Dagster tags a single-partition run with `dagster/partition/tenant` but a range run (a backfill under the backfill
policy) only with its range's first and last keys; Dagster's multi-partition ranges hold one dimension fixed, so
a range whose ends name the same tenant covers that tenant alone. A range across tenants (one month of many
tenants) has no single tenant to charge and is bounded by max_concurrent_runs and the pools instead.
"""

from dagster import DagsterRun, QueuedRunCoordinator, SubmitRunContext

TENANT_TAG = "evidence/tenant"


def tenant_of(tags: dict[str, str]) -> str | None:
    """The one tenant a run's partitions belong to, or None when it spans several (or none)."""
    if "dagster/partition/tenant" in tags:
        return tags["dagster/partition/tenant"]
    start, end = tags.get("dagster/asset_partition_range_start"), tags.get("dagster/asset_partition_range_end")
    if not (start and end and "|" in start and "|" in end):
        return None
    # String keys read "<month>|<tenant>" (dimensions sort by name).
    first, last = (key.split("|", 1)[1] for key in (start, end))
    return first if first == last else None


class TenantFairRunCoordinator(QueuedRunCoordinator):
    """Dagster's run queue, with every single-tenant run tagged before it is queued."""

    def submit_run(self, context: SubmitRunContext) -> DagsterRun:
        run = context.dagster_run
        tenant = tenant_of(run.tags)
        if tenant is not None and run.tags.get(TENANT_TAG) != tenant:
            self._instance.add_run_tags(run.run_id, {TENANT_TAG: tenant})
            context = context._replace(dagster_run=self._instance.get_run_by_id(run.run_id))
        return super().submit_run(context)
