"""Every way an analyst or operator launches work materializes exactly the partitions it names.

A real `dagster-webserver` and `dagster-daemon` run on an instance built from the repository's dagster.yaml (or
dagster.production.yaml on PostgreSQL), and the test drives the UI's own GraphQL mutations:

- an asset backfill from the catalog ("Materialize selected": `launchPartitionBackfill` with an asset selection),
- a job (partition-set) backfill from the Jobs page (`launchPartitionBackfill` with a partition-set selector),
- a single partition from the launchpad (the partition set's tags, then `launchRun`),
- the schedule, as "Test schedule" → "Launch all" does (`scheduleDryRun`, then `launchMultipleRuns`),
- then the UI's "Execute all" (`launchRun` of the check alone, no partition), which verifies every
  published partition.

Then, from the instance alone: each launch materialized exactly its partitions (every asset), every run's tags agree
with what it executed, its `evidence/tenant` names the one tenant it touched, and each backfill reports what was
materialized. (`evidence demo` runs the same job in process: test_assets.py.)
"""

from __future__ import annotations

import math
import os
import shutil
import time
from collections import defaultdict
from datetime import datetime, timezone

import pytest
from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus, RunsFilter

from evidence_pipeline.config import Settings
from evidence_pipeline.defs.coordinator import TENANT_TAG
from evidence_pipeline.defs.partitions import run_range, run_tenant, stray_dimension_tags, tenant_month_partitions
from evidence_pipeline.models import TenantMonth
from evidence_pipeline.runtime import runtime_for
from evidence_pipeline.synthetic.demo_data import demo_transactions
from evidence_pipeline_tests.support.backends import aws_environment, new_database
from evidence_pipeline_tests.support.dagster_services import (
    LAUNCH_RUN,
    LOCATION,
    REPO,
    dagster_services,
    graphql,
    key,
    run_fork_servers,
)
from evidence_pipeline_tests.support.fixture_sources import publish_revision

pytestmark = pytest.mark.slow

TENANTS = ["acme-books", "baltic-crafts"]
ASSETS = ["source_revision", "monthly_report", "evidence_bundle"]
ASSET_BACKFILL = [TenantMonth(t, p) for t in TENANTS for p in ("2026-01", "2026-02")]
JOB_BACKFILL = [TenantMonth(t, p) for t in TENANTS for p in ("2026-05", "2026-06")]
LAUNCHPAD = [TenantMonth("acme-books", "2026-08")]
SCHEDULE_TICK = datetime(2026, 10, 1, 2, tzinfo=timezone.utc)  # materializes 2026-09 for every tenant
SCHEDULED = [TenantMonth(t, "2026-09") for t in TENANTS]
PARTITION_SET = "monthly_evidence_partition_set"

LAUNCH_BACKFILL = """mutation($params: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $params) {
  __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message } } }"""
PARTITION_TAGS = """query($repo: RepositorySelector!, $set: String!, $name: String!) {
  partitionSetOrError(repositorySelector: $repo, partitionSetName: $set) { __typename ... on PartitionSet {
    partition(partitionName: $name) { tagsOrError { __typename ... on PartitionTags { results { key value } } } }
  } } }"""
DRY_RUN = """mutation($selector: ScheduleSelector!, $timestamp: Float!) {
  scheduleDryRun(selectorData: $selector, timestamp: $timestamp) { __typename ... on DryRunInstigationTick {
    evaluationResult { runRequests { runKey jobName tags { key value } } skipReason error { message } } } } }"""
LAUNCH_MANY = """mutation($list: [ExecutionParams!]!) { launchMultipleRuns(executionParamsList: $list) {
  __typename ... on LaunchMultipleRunsResult { launchMultipleRunsResult {
    __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } } } }"""
CHECK_JOBS = """{ assetNodeOrError(assetKey: {path: ["evidence_bundle"]}) { ... on AssetNode {
  assetChecksOrError { ... on AssetChecks { checks { name jobNames canExecuteIndividually } } } } } }"""
BACKFILL_STATUS = """query($id: String!) { partitionBackfillOrError(backfillId: $id) {
  __typename ... on PartitionBackfill {
  status isAssetBackfill partitionStatuses { results { partitionName runStatus } }
  assetBackfillData { assetBackfillStatuses { __typename ... on AssetPartitionsStatusCounts {
    assetKey { path } numPartitionsTargeted numPartitionsMaterialized numPartitionsFailed } } } } } }"""


@pytest.fixture(scope="module", params=["local", "aws"])
def site(request, tmp_path_factory):
    """The instance, its environment and the GraphQL URL of a webserver and daemon running on it."""
    root = tmp_path_factory.mktemp(f"site-{request.param}")
    env = {"EVIDENCE_HOME": str(root / "home")}  # EVIDENCE_WORKERS unset: each run takes its share of the CPUs
    config = "dagster.yaml"
    if request.param == "aws":
        env = aws_environment(request, root)
        env["DAGSTER_PG_URL"] = new_database(request.getfixturevalue("postgres_url"))
        config = "dagster.production.yaml"
    env["DAGSTER_HOME"] = str(root / "dagster")
    os.makedirs(env["DAGSTER_HOME"])
    shutil.copyfile(REPO / config, os.path.join(env["DAGSTER_HOME"], "dagster.yaml"))

    runtime = runtime_for(Settings.from_env(env))
    for tm in ASSET_BACKFILL + JOB_BACKFILL + LAUNCHPAD + SCHEDULED:
        publish_revision(runtime, tm, demo_transactions(tm))
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)  # the production dagster.yaml reads DAGSTER_PG_URL
        with DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
            instance.add_dynamic_partitions("tenant", TENANTS)
            with dagster_services(os.environ | env, root) as url:
                yield instance, runtime, url


def _launch_everything(url: str) -> dict[str, dict]:
    """Launch each path once; returns launch name -> {"backfill": id} or {"runs": [ids]}."""
    launches = {}
    for name, selection, partitions in (
        ("asset backfill", {"assetSelection": [{"path": [a]} for a in ASSETS]}, ASSET_BACKFILL),
        (
            "job backfill",
            {"selector": {"partitionSetName": PARTITION_SET, "repositorySelector": LOCATION}},
            JOB_BACKFILL,
        ),
    ):
        result = graphql(
            url, LAUNCH_BACKFILL, {"params": {**selection, "partitionNames": [key(tm) for tm in partitions]}}
        )
        assert result["launchPartitionBackfill"]["__typename"] == "LaunchBackfillSuccess", result
        launches[name] = {"backfill": result["launchPartitionBackfill"]["backfillId"]}

    job = {**LOCATION, "jobName": "monthly_evidence"}
    partition = graphql(url, PARTITION_TAGS, {"repo": LOCATION, "set": PARTITION_SET, "name": key(LAUNCHPAD[0])})
    tags = partition["partitionSetOrError"]["partition"]["tagsOrError"]["results"]
    result = graphql(url, LAUNCH_RUN, {"params": {"selector": job, "executionMetadata": {"tags": tags}}})
    assert result["launchRun"]["__typename"] == "LaunchRunSuccess", result
    launches["launchpad"] = {"runs": [result["launchRun"]["run"]["runId"]]}

    selector = {**LOCATION, "scheduleName": "monthly_evidence_schedule"}
    tick = graphql(url, DRY_RUN, {"selector": selector, "timestamp": SCHEDULE_TICK.timestamp()})["scheduleDryRun"]
    requests = tick["evaluationResult"]["runRequests"]
    assert len(requests) == 1, tick  # one range run of both tenants (up to 100 per run)
    launched = graphql(
        url,
        LAUNCH_MANY,
        {"list": [{"selector": job, "executionMetadata": {"tags": request["tags"]}} for request in requests]},
    )["launchMultipleRuns"]["launchMultipleRunsResult"]
    assert {r["__typename"] for r in launched} == {"LaunchRunSuccess"}, launched
    launches["schedule"] = {"runs": [r["run"]["runId"] for r in launched]}
    return launches


def _runs_of(instance: DagsterInstance, launch: dict) -> list:
    if "backfill" in launch:
        return instance.get_runs(RunsFilter(tags={"dagster/backfill": launch["backfill"]}))
    return instance.get_runs(RunsFilter(run_ids=launch["runs"]))


def _wait(instance: DagsterInstance, url: str, launches: dict, timeout_s: float = 900) -> None:
    """Until every run has finished and the daemon has closed every backfill."""
    from dagster._core.execution.backfill import BulkActionStatus  # no public export

    done = {DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        runs = [run for launch in launches.values() for run in _runs_of(instance, launch)]
        backfills = [
            instance.get_backfill(launch["backfill"]).status for launch in launches.values() if "backfill" in launch
        ]
        if runs and all(run.status in done for run in runs) and BulkActionStatus.REQUESTED not in backfills:
            return
        time.sleep(1)
    pytest.fail("launches did not finish in time")


def _failures(instance: DagsterInstance, runs: list) -> list[str]:
    """The first line of every step or run failure of ``runs``, for the assertion message."""
    return [
        f"{entry.step_key}: {entry.dagster_event.event_specific_data.error.message.splitlines()[0]}"
        for run in runs
        for entry in instance.all_logs(run.run_id)
        if entry.dagster_event
        and entry.dagster_event.event_type_value in ("STEP_FAILURE", "RUN_FAILURE")
        and getattr(entry.dagster_event.event_specific_data, "error", None)
    ]


def _materialized_by(instance: DagsterInstance, run_id: str) -> dict[str, set[str]]:
    """asset name -> partition keys that ``run_id`` materialized."""
    found = defaultdict(set)
    for entry in instance.all_logs(run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION):
        event = entry.dagster_event
        found[event.asset_key.to_user_string()].add(event.partition)
    return found


def test_every_launch_path_materializes_exactly_the_partitions_it_names(site):
    instance, runtime, url = site
    launches = _launch_everything(url)
    _wait(instance, url, launches)
    expected = {
        "asset backfill": ASSET_BACKFILL,
        "job backfill": JOB_BACKFILL,
        "launchpad": LAUNCHPAD,
        "schedule": SCHEDULED,
    }

    # Runs the queue launches share the host: each forks the CPUs / max_concurrent_runs, rounded up (defs/assets.py).
    runs_at_once = instance.get_concurrency_config().run_queue_config.max_concurrent_runs
    share = math.ceil(len(os.sched_getaffinity(0)) / runs_at_once)
    for name, launch in launches.items():
        runs = _runs_of(instance, launch)
        assert {run.status for run in runs} == {DagsterRunStatus.SUCCESS}, (name, _failures(instance, runs))
        for run in runs:
            lanes = [e.user_message for e in instance.all_logs(run.run_id) if e.user_message.startswith("archive lane")]
            assert lanes and all(line.endswith(f"up to {share} worker process(es) at once") for line in lanes), lanes
        materialized = defaultdict(set)
        for run in runs:
            by_asset = _materialized_by(instance, run.run_id)
            executed = set().union(*by_asset.values())
            # The run's tags name exactly what it executed, and it is charged to the one tenant it touched.
            assert stray_dimension_tags(run.tags) == [], (name, run.tags)
            partition_range = run_range(run.tags)
            named = (
                {run.tags["dagster/partition"]}
                if partition_range is None
                else set(tenant_month_partitions.get_partition_keys_in_range(partition_range, instance))
            )
            assert executed == named, (name, run.tags)
            tenants = {partition.split("|")[1] for partition in executed}
            assert run.tags.get(TENANT_TAG) == run_tenant(run.tags) == (tenants.pop() if len(tenants) == 1 else None)
            for asset, partitions in by_asset.items():
                materialized[asset] |= partitions
        assert materialized == {asset: {key(tm) for tm in expected[name]} for asset in ASSETS}, name

        if "backfill" in launch:  # what the backfill page shows is what was materialized
            status = graphql(url, BACKFILL_STATUS, {"id": launch["backfill"]})["partitionBackfillOrError"]
            assert status["status"] == "COMPLETED_SUCCESS", (name, status)
            if status["isAssetBackfill"]:
                counts = {tuple(s["assetKey"]["path"]): s for s in status["assetBackfillData"]["assetBackfillStatuses"]}
                for asset in ASSETS:
                    assert counts[(asset,)]["numPartitionsTargeted"] == len(expected[name])
                    assert counts[(asset,)]["numPartitionsMaterialized"] == len(materialized[asset])
            else:
                reported = {
                    s["partitionName"] for s in status["partitionStatuses"]["results"] if s["runStatus"] == "SUCCESS"
                }
                assert reported == materialized["evidence_bundle"], (name, status)

    # The ledger agrees: one publication per tenant-month named, and nothing else.
    published = {(e["tenant"], e["period"]) for e in runtime.ledger.events_of_type("bundle.published")}
    assert published == {(tm.tenant, tm.period) for tms in expected.values() for tm in tms}
    # The code server forked those runs from its fork server, which it started with the first
    # (defs/extensions/run_fork.py).
    assert len(run_fork_servers()) == 1

    # The UI's "Execute all", as ExecuteChecksButton.tsx launches it: the check alone in its first job, no
    # asset, no partition. It verifies each published partition.
    [check] = graphql(url, CHECK_JOBS)["assetNodeOrError"]["assetChecksOrError"]["checks"]
    assert check["canExecuteIndividually"] == "CAN_EXECUTE", check  # so the button is offered
    result = graphql(
        url,
        LAUNCH_RUN,
        {
            "params": {
                "selector": {
                    **LOCATION,
                    "jobName": check["jobNames"][0],
                    "assetSelection": [],
                    "assetCheckSelection": [{"assetKey": {"path": ["evidence_bundle"]}, "name": check["name"]}],
                }
            }
        },
    )
    assert result["launchRun"]["__typename"] == "LaunchRunSuccess", result
    execute_all = {"execute all": {"runs": [result["launchRun"]["run"]["runId"]]}}
    _wait(instance, url, execute_all)
    [run] = _runs_of(instance, execute_all["execute all"])
    assert run.status == DagsterRunStatus.SUCCESS, _failures(instance, [run])
    checked = [
        entry.dagster_event.event_specific_data
        for entry in instance.all_logs(run.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION)
    ]
    assert sorted(e.partition for e in checked) == sorted({key(tm) for tms in expected.values() for tm in tms}) and all(
        e.passed for e in checked
    )
