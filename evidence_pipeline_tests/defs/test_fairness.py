"""The run queue's tenant fairness, end to end on real Dagster machinery.

The instance is built from the repo's dagster.yaml (only the run launcher is swapped for Dagster's recording test
launcher, so dequeued runs are not executed). Runs are created for the real `monthly_evidence` job of the
`evidence_pipeline.definitions` code location (loaded in process), submitted through `instance.submit_run` so our
coordinator tags them, and dequeued by Dagster's own run-queue daemon logic.

Private Dagster APIs (tests only): `dagster._core.test_utils.{MockedRunLauncher,
create_test_daemon_workspace_context}`, `dagster._core.workspace.load_target.InProcessWorkspaceLoadTarget`,
`dagster._core.remote_origin.InProcessCodeLocationOrigin`, `dagster._core.types.loadable_target_origin.
LoadableTargetOrigin`, `dagster._daemon.run_coordinator.queued_run_coordinator_daemon.QueuedRunCoordinatorDaemon`,
`dagster._core.events.{DagsterEvent,DagsterEventType}` (to end a run), and `DagsterInstance.create_run_for_job`.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import dagster
import pytest
import yaml
from dagster import DagsterInstance, DagsterRun, DagsterRunStatus, RunsFilter, instance_for_test
from dagster._core.events import DagsterEvent, DagsterEventType
from dagster._core.execution import job_backfill
from dagster._core.remote_origin import InProcessCodeLocationOrigin
from dagster._core.test_utils import create_test_daemon_workspace_context
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget
from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import QueuedRunCoordinatorDaemon

from evidence_pipeline.definitions import defs
from evidence_pipeline.defs.coordinator import TENANT_TAG, TenantFairRunCoordinator
from evidence_pipeline.defs.extensions.guard import source_sha256
from evidence_pipeline.defs.partitions import run_tenant, stray_dimension_tags

REPO = Path(__file__).resolve().parents[2]
LOCATION = "evidence_pipeline"
JOB = "monthly_evidence"
RANGE_START, RANGE_END = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"


def _dagster_yaml() -> dict:
    return yaml.safe_load((REPO / "dagster.yaml").read_text())


# --- 1. run_tenant -------------------------------------------------------------------------------------------------


def test_run_tenant_single_partition_run():
    # What Dagster puts on a run of one tenant-month (multi-partition dimensions become partition/<dim> tags).
    tags = {
        "dagster/partition": "2026-10-01|acme-books",
        "dagster/partition/tenant": "acme-books",
        "dagster/partition/month": "2026-10-01",
    }
    assert run_tenant(tags) == "acme-books"


def test_run_tenant_range_within_one_tenant():
    # A backfill range fixes the tenant and runs over months: both ends name the same tenant.
    assert run_tenant({RANGE_START: "2025-01-01|acme-books", RANGE_END: "2026-10-01|acme-books"}) == "acme-books"


def test_run_tenant_range_across_tenants_is_none():
    # One month of many tenants: no single tenant to charge.
    assert run_tenant({RANGE_START: "2026-10-01|acme-books", RANGE_END: "2026-10-01|delta-foods"}) is None


@pytest.mark.parametrize("tags", [{}, {"dagster/backfill": "abc"}, {RANGE_START: "2026-10-01|acme-books"}])
def test_run_tenant_without_partition_tags_is_none(tags):
    assert run_tenant(tags) is None


# What dagster 1.13.27's job backfill puts on a range run: the range, plus the first partition's dimensions.
JOB_BACKFILL_RANGE = {
    RANGE_START: "2026-05-01|acme-books",
    RANGE_END: "2026-05-01|baltic-crafts",
    "dagster/partition/month": "2026-05-01",
    "dagster/partition/tenant": "acme-books",
}


# A job backfill's range run over one month of two registered tenants, as the fixture instance knows them.
CROSS_TENANT_JOB_BACKFILL_RUN = {
    "dagster/backfill": "bf",
    **JOB_BACKFILL_RANGE,
    RANGE_START: "2026-10-01|big-tenant",
    RANGE_END: "2026-10-01|small-b",
    "dagster/partition/tenant": "big-tenant",
}


def test_dimension_tags_that_contradict_the_range_are_stray_and_do_not_name_the_tenant():
    assert stray_dimension_tags(JOB_BACKFILL_RANGE) == ["dagster/partition/month", "dagster/partition/tenant"]
    assert run_tenant(JOB_BACKFILL_RANGE) is None  # the run executes two tenants' partitions


def test_dimension_tags_that_name_a_single_partition_range_are_kept():
    tags = {
        RANGE_START: "2026-05-01|acme-books",
        RANGE_END: "2026-05-01|acme-books",
        "dagster/partition/month": "2026-05-01",
        "dagster/partition/tenant": "acme-books",
    }
    assert stray_dimension_tags(tags) == [] and run_tenant(tags) == "acme-books"
    assert (
        stray_dimension_tags({"dagster/partition/month": "2026-05-01", "dagster/partition/tenant": "acme-books"}) == []
    )


# --- 2. the instance dagster.yaml builds ------------------------------------------------------------------------


def test_dagster_yaml_installs_coordinator_and_per_tenant_limit(tmp_path):
    with instance_for_test(overrides=_dagster_yaml(), temp_dir=str(tmp_path)) as instance:
        assert type(instance.run_coordinator) is TenantFairRunCoordinator
        queue = instance.get_concurrency_config().run_queue_config
        assert queue.max_concurrent_runs == 4
        # The limit must be on the tag the coordinator writes, per unique value (i.e. per tenant).
        assert list(queue.tag_concurrency_limits) == [
            {"key": TENANT_TAG, "value": {"applyLimitPerUniqueValue": True}, "limit": 1}
        ]


# --- 3. the per-tenant cap in the run queue ---------------------------------------------------------------------


@pytest.fixture
def instance(tmp_path):
    # dagster.yaml as shipped, but 2 run slots, fewer than the tenants waiting, so the cap decides who gets one;
    # MockedRunLauncher records launches instead of starting run workers.
    overrides = _dagster_yaml() | {"run_launcher": {"module": "dagster._core.test_utils", "class": "MockedRunLauncher"}}
    overrides["concurrency"]["runs"]["max_concurrent_runs"] = 2
    with instance_for_test(overrides=overrides, temp_dir=str(tmp_path)) as instance:
        # The tenant registry sensor would have registered these tenant partitions.
        instance.add_dynamic_partitions("tenant", ["big-tenant", "small-a", "small-b"])
        yield instance


@pytest.fixture
def workspace_context(instance):
    # The real code location, loaded in process (no gRPC server), as the daemon would see it.
    origin = InProcessCodeLocationOrigin(
        LoadableTargetOrigin(
            module_name="evidence_pipeline.definitions", attribute="defs", working_directory=str(REPO)
        ),
        location_name=LOCATION,
    )
    with create_test_daemon_workspace_context(InProcessWorkspaceLoadTarget(origin), instance) as context:
        yield context


def _submit(instance: DagsterInstance, context: WorkspaceProcessContext, tags: dict[str, str]) -> DagsterRun:
    """Create a run of the real job for the given partition tags and submit it through the instance's coordinator."""
    workspace = context.create_request_context()
    location = workspace.get_code_location(LOCATION)
    assert location is not None, workspace.get_code_location_error(LOCATION)
    remote_job = location.get_repository("__repository__").get_full_job(JOB)
    run = instance.create_run_for_job(
        job_def=defs.resolve_job_def(JOB),
        tags=tags,
        remote_job_origin=remote_job.get_remote_origin(),
        job_code_origin=remote_job.get_python_origin(),
    )
    return instance.submit_run(run.run_id, workspace)


def _range(first: str, last: str) -> dict[str, str]:
    return {"dagster/backfill": "bf", RANGE_START: first, RANGE_END: last}


def _launched_tenants(instance: DagsterInstance) -> Counter:
    return Counter(run.tags.get(TENANT_TAG) for run in instance.run_launcher.queue())


def test_one_tenants_backfill_cannot_take_every_run_slot(instance, workspace_context):
    # Submitted first, so a FIFO queue without the per-tenant cap would hand big-tenant both run slots.
    big = [
        _submit(instance, workspace_context, _range(f"2025-{m:02d}-01|big-tenant", f"2025-{m + 2:02d}-01|big-tenant"))
        for m in (1, 4, 7, 10)
    ]
    small_a = _submit(
        instance,
        workspace_context,
        {
            "dagster/partition": "2026-10-01|small-a",
            "dagster/partition/tenant": "small-a",
            "dagster/partition/month": "2026-10-01",
        },
    )
    small_b = _submit(instance, workspace_context, _range("2025-01-01|small-b", "2026-10-01|small-b"))
    cross = _submit(instance, workspace_context, CROSS_TENANT_JOB_BACKFILL_RUN)

    # The coordinator tagged every single-tenant run before it was queued, and left the cross-tenant one alone.
    stored = {run.run_id: instance.get_run_by_id(run.run_id) for run in [*big, small_a, small_b, cross]}
    assert all(run.status == DagsterRunStatus.QUEUED for run in stored.values())
    assert [stored[run.run_id].tags.get(TENANT_TAG) for run in big] == ["big-tenant"] * 4
    assert stored[small_a.run_id].tags[TENANT_TAG] == "small-a"
    assert stored[small_b.run_id].tags[TENANT_TAG] == "small-b"
    assert TENANT_TAG not in stored[cross.run_id].tags
    # The job backfill's stray dimension tags are gone from the stored run and from the tag index.
    assert not stray_dimension_tags(stored[cross.run_id].tags)
    assert "dagster/partition/tenant" not in stored[cross.run_id].tags
    assert instance.get_runs(RunsFilter(tags={"dagster/partition/tenant": "big-tenant"})) == []

    daemon = QueuedRunCoordinatorDaemon(interval_seconds=1)
    list(daemon.run_iteration(workspace_context))

    # 2 slots: big-tenant gets its cap of 1, the next tenant in the queue the other; the rest wait for a slot.
    assert _launched_tenants(instance) == Counter({"big-tenant": 1, "small-a": 1})
    launched = {run.run_id for run in instance.run_launcher.queue()}
    assert launched == {big[0].run_id, small_a.run_id}
    assert instance.get_run_by_id(big[1].run_id).status == DagsterRunStatus.QUEUED

    # Launched runs stay in progress (STARTING), so another pass launches nothing.
    list(daemon.run_iteration(workspace_context))
    assert len(instance.run_launcher.queue()) == 2

    # When a big-tenant run ends, the next big-tenant run takes its place: still 1 at a time, not starved.
    _finish(instance, big[0])
    list(daemon.run_iteration(workspace_context))
    assert [run.run_id for run in instance.run_launcher.queue()][2:] == [big[1].run_id]
    # When the other tenant's run ends, the next other tenant's run takes the slot, not big-tenant's third.
    _finish(instance, small_a)
    list(daemon.run_iteration(workspace_context))
    assert [run.run_id for run in instance.run_launcher.queue()][3:] == [small_b.run_id]
    assert {run.run_id for run in instance.get_runs() if run.status == DagsterRunStatus.QUEUED} == {
        big[2].run_id,
        big[3].run_id,
        cross.run_id,
    }


def _finish(instance: DagsterInstance, run: DagsterRun) -> None:
    instance.report_dagster_event(
        DagsterEvent(event_type_value=DagsterEventType.RUN_SUCCESS.value, job_name=run.job_name), run_id=run.run_id
    )
    assert instance.get_run_by_id(run.run_id).status == DagsterRunStatus.SUCCESS


SUBMIT_BACKFILL_RUNS_SHA256 = "340a0fe0ac24b0cc97e055bc47cfda3194ca82a868abc6928b22b82e2776e207"  # dagster 1.13.27


def test_the_tag_rewrite_is_guarded_by_the_dagster_version(instance, workspace_context, monkeypatch):
    # Checked against this Dagster; after an upgrade it leaves runs alone, and the assets refuse a mismatched run.
    # The Dagster code that copies the first partition's tags into every range run, as checked (dagster#28861).
    # When it changes, re-check whether the rewrite is still needed (test_launch_paths.py shows what runs execute).
    assert source_sha256(job_backfill.submit_backfill_runs) == SUBMIT_BACKFILL_RUNS_SHA256
    monkeypatch.setattr(dagster, "__version__", "1.13.28")
    with pytest.warns(UserWarning, match="checked against dagster==1.13.27"):
        run = _submit(instance, workspace_context, CROSS_TENANT_JOB_BACKFILL_RUN)
    assert stray_dimension_tags(instance.get_run_by_id(run.run_id).tags) == sorted(
        ["dagster/partition/month", "dagster/partition/tenant"]
    )
