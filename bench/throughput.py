"""Backfill throughput: the plain-Python pipeline vs an analyst's backfill through the Dagster daemon.

On one fresh temporary root, with the same backend kind and the same shared source revisions:

1. raw     `pipeline.run_tenant_month` over every tenant-month with `parallel.map_stage` (EVIDENCE_WORKERS
           processes), no Dagster;
2. analyst one backfill of all three assets over every tenant-month, launched with the UI's own GraphQL mutation
           (`launchPartitionBackfill`) against a real `dagster-webserver`, and run by a real `dagster-daemon`
           (backfill daemon, run queue, pools) with the repo's dagster.yaml;
3. stock   one run per tenant-month, as without a backfill policy: a sample of single-partition runs launched
           through the same webserver and daemon, and extrapolated to all tenant-months (labelled as such).

Prints partitions/s for each, the ratio analyst / raw, the orchestration overhead per partition
((analyst - raw) / partitions), and the peak RSS of any one process and of all processes together, sampled
every 0.2 s. Usage: `make bench-throughput` or `uv run python bench/throughput.py [--tenants 100 --months 12]`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import threading
import time
from datetime import date
from functools import partial
from pathlib import Path

import psutil

from evidence_pipeline import parallel
from evidence_pipeline.config import Settings
from evidence_pipeline.defs.demo import complete_months
from evidence_pipeline.demo_data import DEMO_TENANTS, demo_transactions
from evidence_pipeline.models import TenantMonth
from evidence_pipeline.pipeline import run_tenant_month
from evidence_pipeline.runtime import RunInfo, runtime_for
from evidence_pipeline.sources import publish_revision
from evidence_pipeline_tests.dagster_services import dagster_services, graphql

REPO = Path(__file__).resolve().parent.parent
PROFILES = list(DEMO_TENANTS)  # bench tenant i has the volume and currencies of demo tenant i mod 5

LAUNCH_BACKFILL = """
mutation($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message }
  }
}"""
LAUNCH_RUN = """
mutation($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
  }
}"""
ASSETS = [{"path": ["source_revision"]}, {"path": ["monthly_report"]}, {"path": ["evidence_bundle"]}]


class PeakRss:
    """Samples the RSS of this process and all its descendants (webserver, daemon, code servers, run workers)."""

    def __init__(self) -> None:
        self.single_mb = self.total_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        me = psutil.Process()
        while not self._stop.wait(0.2):
            sizes = []
            for process in [me, *me.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    sizes.append(process.memory_info().rss / 2**20)
            self.single_mb = max(self.single_mb, max(sizes))
            self.total_mb = max(self.total_mb, sum(sizes))


def tenant_months(tenants: int, months: int, prefix: str) -> list[TenantMonth]:
    """The newest ``months`` complete months (oldest first): open months, partitions of the code location."""
    periods = complete_months(date.today(), months)
    return [TenantMonth(f"{prefix}{t:03d}", p) for t in range(tenants) for p in periods]


def publish_sources(sources_dir: Path, partitions: list[TenantMonth]) -> None:
    store = runtime_for(Settings.from_env({"EVIDENCE_HOME": str(sources_dir.parent / "publisher"),
                                          "EVIDENCE_SOURCES_URI": str(sources_dir)})).sources
    for tm in partitions:
        profile = PROFILES[int(tm.tenant[-3:]) % len(PROFILES)]
        publish_revision(store, tm, demo_transactions(TenantMonth(profile, tm.period)))


def run_raw(env: dict[str, str], partitions: list[TenantMonth], workers: int) -> float:
    settings = Settings.from_env(env)
    started = time.perf_counter()
    outcomes = parallel.map_stage(partial(runtime_for, settings), partial(run_tenant_month, run=RunInfo("bench-raw")),
                                  partitions, workers)
    elapsed = time.perf_counter() - started
    failed = [o for o in outcomes if isinstance(o, Exception)]
    if failed:
        sys.exit(f"raw: {len(failed)} tenant-months failed, first: {failed[0]}")
    return elapsed


def run_one_range_in_process(env: dict[str, str], partitions: list[TenantMonth]) -> float:
    """One range run through `materialize()` in this process: Dagster's cost inside a run, without the daemon's
    tick or a run worker's start-up."""
    from dagster import DagsterInstance, materialize

    from evidence_pipeline.defs.assets import evidence_bundle, monthly_report, source_revision
    from evidence_pipeline.defs.partitions import range_tags
    from evidence_pipeline.defs.resources import EvidenceResource

    home = Path(env["DAGSTER_HOME"])
    home.mkdir(parents=True)
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    os.environ.update(env)
    with DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions("tenant", sorted({tm.tenant for tm in partitions}))
        started = time.perf_counter()
        result = materialize(
            [source_revision, monthly_report, evidence_bundle], instance=instance,
            resources={"evidence": EvidenceResource(home=env["EVIDENCE_HOME"])},
            tags=range_tags(partitions[0], partitions[-1]),
            run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
        )
        elapsed = time.perf_counter() - started
    if not result.success or len(result.get_asset_materialization_events()) != 3 * len(partitions):
        sys.exit("the in-process range run did not materialize every partition")
    return elapsed


def partition_key(tm: TenantMonth) -> str:
    return f"{tm.period}-01|{tm.tenant}"


def wait_for_runs(instance, run_filter, expected_at_least: int, timeout_s: float = 7200) -> None:
    from dagster import DagsterRunStatus

    finished = {DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        runs = instance.get_runs(filters=run_filter)
        if len(runs) >= expected_at_least and all(run.status in finished for run in runs):
            failed = [run.run_id for run in runs if run.status != DagsterRunStatus.SUCCESS]
            if failed:
                sys.exit(f"{len(failed)} runs did not succeed, e.g. {failed[0]}")
            return
        time.sleep(0.5)
    sys.exit("timed out waiting for runs")


def run_analyst_backfill(url: str, instance, partitions: list[TenantMonth]) -> tuple[float, int]:
    from dagster import AssetKey, RunsFilter
    from dagster._core.execution.backfill import BulkActionStatus  # the backfill status has no public export

    started, launched_at = time.perf_counter(), time.time()
    data = graphql(url, LAUNCH_BACKFILL, {"params": {
        "assetSelection": ASSETS, "partitionNames": [partition_key(tm) for tm in partitions], "title": "bench",
    }})["launchPartitionBackfill"]
    if data["__typename"] != "LaunchBackfillSuccess":
        sys.exit(f"backfill not launched: {data}")
    backfill_id = data["backfillId"]
    bundles = AssetKey("evidence_bundle")
    # Done when every tenant-month's bundle is materialized and every run has finished (the daemon marks the
    # backfill itself complete on its next 30 s tick, which no analyst waits for).
    while instance.get_materialized_partitions(bundles) < {partition_key(tm) for tm in partitions}:
        if instance.get_backfill(backfill_id).status not in (BulkActionStatus.REQUESTED,
                                                             BulkActionStatus.COMPLETED_SUCCESS):
            failures = [
                f"{record.step_key}: {record.dagster_event.event_specific_data.error.message.splitlines()[0]}"
                for run in instance.get_runs(filters=RunsFilter(tags={"dagster/backfill": backfill_id}))
                for record in instance.all_logs(run.run_id)
                if record.dagster_event and record.dagster_event.event_type_value in ("STEP_FAILURE", "RUN_FAILURE")
                and getattr(record.dagster_event.event_specific_data, "error", None)
            ]
            sys.exit(f"backfill ended {instance.get_backfill(backfill_id).status}: " + "; ".join(failures[:5]))
        time.sleep(0.2)
    runs_filter = RunsFilter(tags={"dagster/backfill": backfill_id})
    wait_for_runs(instance, runs_filter, 1)
    elapsed = time.perf_counter() - started
    records = instance.get_run_records(filters=runs_filter)
    first_created = min(r.create_timestamp.timestamp() for r in records)
    waits = [r.start_time - r.create_timestamp.timestamp() for r in records]
    spans = [r.end_time - r.start_time for r in records]
    print(f"  first run created {first_created - launched_at:.1f} s after launch (backfill daemon tick); "
          f"{len(records)} runs: queue wait mean {sum(waits) / len(waits):.1f} s, max {max(waits):.1f} s; "
          f"run duration mean {sum(spans) / len(spans):.1f} s, max {max(spans):.1f} s", flush=True)
    return elapsed, len(records)


def run_stock_sample(url: str, instance, partitions: list[TenantMonth]) -> float:
    from dagster import RunsFilter

    started = time.perf_counter()
    for tm in partitions:
        tags = {"dagster/partition": partition_key(tm), "dagster/partition/tenant": tm.tenant,
                "dagster/partition/month": f"{tm.period}-01", "bench": "stock"}
        data = graphql(url, LAUNCH_RUN, {"params": {
            "selector": {"repositoryLocationName": "evidence_pipeline", "repositoryName": "__repository__",
                         "jobName": "monthly_evidence"},
            "executionMetadata": {"tags": [{"key": k, "value": v} for k, v in tags.items()]},
        }})["launchRun"]
        if data["__typename"] != "LaunchRunSuccess":
            sys.exit(f"run not launched: {data}")
    wait_for_runs(instance, RunsFilter(tags={"bench": "stock"}), len(partitions))
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, default=100)
    parser.add_argument("--months", type=int, default=12)
    parser.add_argument("--stock-sample", type=int, default=8, help="single-partition runs to time for (3)")
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="evidence-bench-"))
    print(f"working in {root} (removed when the benchmark succeeds)", flush=True)
    partitions = tenant_months(args.tenants, args.months, "bench-t")
    sample = tenant_months(args.stock_sample, 1, "stock-t")
    print(f"publishing {len(partitions) + len(sample)} source revisions ...", flush=True)
    publish_sources(root / "sources", partitions + sample)

    def environment(name: str) -> dict[str, str]:
        env = dict(os.environ, EVIDENCE_HOME=str(root / name), EVIDENCE_SOURCES_URI=str(root / "sources"),
                   EVIDENCE_WORKERS=str(args.workers), DAGSTER_HOME=str(root / name / "dagster"))
        return env

    with PeakRss() as raw_rss:
        raw_s = run_raw(environment("raw"), partitions, args.workers)
    print(f"raw done in {raw_s:.1f} s", flush=True)
    one_month = [tm for tm in partitions if tm.period == partitions[0].period]
    in_run_s = run_one_range_in_process(environment("in-run"), one_month)
    print(f"one range run of {len(one_month)} in-process done in {in_run_s:.1f} s", flush=True)

    env = environment("dagster")
    Path(env["DAGSTER_HOME"]).mkdir(parents=True)
    shutil.copy(REPO / "dagster.yaml", Path(env["DAGSTER_HOME"]) / "dagster.yaml")
    os.environ.update(env)
    from dagster import DagsterInstance

    instance = DagsterInstance.get()
    instance.add_dynamic_partitions("tenant", sorted({tm.tenant for tm in partitions + sample}))
    with PeakRss() as dagster_rss, dagster_services(env, root) as url:
        analyst_s, runs = run_analyst_backfill(url, instance, partitions)
        print(f"analyst backfill done in {analyst_s:.1f} s ({runs} runs)", flush=True)
        stock_s = run_stock_sample(url, instance, sample)
    shutil.rmtree(root, ignore_errors=True)

    n = len(partitions)
    stock_per_partition = stock_s / len(sample)
    print(f"\n{args.tenants} tenants x {args.months} months = {n} tenant-months, {args.workers} workers per run\n")
    print(f"{'path':<44} {'wall s':>9} {'partitions/s':>13}")
    print(f"{'1 raw: pipeline.py, no Dagster':<44} {raw_s:>9.1f} {n / raw_s:>13.2f}")
    print(f"{'2 analyst: one UI backfill via the daemon':<44} {analyst_s:>9.1f} {n / analyst_s:>13.2f}")
    print(f"{'3 stock: one run per partition (EXTRAPOLATED':<44} {stock_per_partition * n:>9.1f} "
          f"{1 / stock_per_partition:>13.2f}")
    print(f"{'  from ' + str(len(sample)) + ' runs in ' + format(stock_s, '.1f') + ' s)':<44}")
    print(f"\nratio analyst / raw throughput: {raw_s / analyst_s:.2f}")
    print(f"orchestration overhead: {(analyst_s - raw_s) / n * 1000:.1f} ms per partition")
    in_run_overhead_ms = (in_run_s / len(one_month) - raw_s / n) * 1000
    print(f"  of which inside a run (one in-process range run of {len(one_month)}, {in_run_s:.1f} s): "
          f"{in_run_overhead_ms:.1f} ms per partition")
    print(f"analyst vs stock: {stock_per_partition * n / analyst_s:.1f}x faster")
    print(f"peak RSS, one process: raw {raw_rss.single_mb:.0f} MB, analyst+stock {dagster_rss.single_mb:.0f} MB")
    print(f"peak RSS, all processes: raw {raw_rss.total_mb:.0f} MB, analyst+stock {dagster_rss.total_mb:.0f} MB")


if __name__ == "__main__":
    main()
