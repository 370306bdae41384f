"""One job from 202 to done: `inspect` jobs arriving one a second, through a real daemon, p50/p95.

    uv run python bench/job_latency.py [--jobs 20 --interval 1] [--smoke]

1. A fresh root with `evidence intake serve --workers 1` in front of it (bench/frontdoor.py), one uploaded 5-page
   PDF, and one `inspect` job worked in-process: the dispatch sensor's tick evaluated, its page run through
   `execute_in_process`, the step inside it. That is the work's own floor, without a daemon.
2. A real `dagster-daemon`, code server and webserver on the repository's dagster.yaml
   (evidence_pipeline_tests/support/dagster_services.py), and one warm-up job to done: the daemon's first tick, the code
   server's first load and its fork server's start (defs/extensions/run_fork.py).
3. `--jobs` jobs, one every `--interval` s whatever the answers (open loop), each timed from its 202 to
   `succeeded` by its own `accepted_at` and `finished_at` (the ledger's clock, ms), and broken down by its page's
   Dagster run: the sensor (202 to the run's creation), the queue (to RUN_STARTING), the run's start (to RUN_START:
   the run process forked and started) and the run (to its end; the job finishes inside it).

`--smoke`: 3 jobs, a second apart, to show the bench still runs (seconds, not minutes).
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import statistics
import sys
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

from pypdf import PdfWriter

sys.path.insert(0, str(Path(__file__).resolve().parent))
from frontdoor import FrontDoor, front_door  # noqa: E402  (bench/frontdoor.py: intake serve on a fresh root)
from intake import REPO, figures  # noqa: E402

from evidence_pipeline.operations.stats import percentile  # noqa: E402

TERMINAL = ("succeeded", "rejected", "dead")


def blank_pdf() -> bytes:
    writer = PdfWriter()
    for _ in range(5):
        writer.add_blank_page(595, 842)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def inspect_job(door: FrontDoor, document_id: str, key: str) -> dict:
    return door.submit(key, {"operation": "inspect", "inputs": [document_id]})


def in_process(door: FrontDoor, document_id: str) -> None:
    """One job through the sensor's tick and its page run in this process, each timed."""
    os.environ.update(door.env)
    from dagster import DagsterInstance, build_sensor_context

    from evidence_pipeline.definitions import defs

    job = inspect_job(door, document_id, "in-process")
    with DagsterInstance.ephemeral() as instance:
        start = time.perf_counter()
        tick = defs.resolve_sensor_def("document_dispatch_sensor").evaluate_tick(
            build_sensor_context(instance=instance, resources=defs.resources)
        )
        tick_ms = (time.perf_counter() - start) * 1000
        [request] = tick.run_requests
        start = time.perf_counter()
        result = defs.get_job_def("document_page_job").execute_in_process(
            run_config=request.run_config, instance=instance, tags=request.tags
        )
        run_ms = (time.perf_counter() - start) * 1000
    step = next(e for e in result.all_events if e.event_type_value == "STEP_SUCCESS")
    [status] = door.states([job])
    print(
        f"in-process: {status['state']}, 202->finished {span(status) * 1000:.0f} ms (sensor tick {tick_ms:.0f} ms, "
        f"run {run_ms:.0f} ms of which the step {step.event_specific_data.duration_ms:.0f} ms)"
    )


def span(status: dict) -> float:
    """Seconds from the job's 202 to its end, by the ledger's clock."""
    return stamp(status["finished_at"]) - stamp(status["accepted_at"])


def stamp(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def wait_all(door: FrontDoor, jobs: list[dict], timeout_s: float = 900) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    while True:
        states = door.states(jobs)
        if all(status["state"] in TERMINAL for status in states):
            return states
        if time.monotonic() > deadline:
            raise SystemExit(f"jobs still running after {timeout_s} s: {[s['state'] for s in states]}")
        time.sleep(0.5)


def through_daemon(door: FrontDoor, document_id: str, count: int, interval: float) -> None:
    from dagster import DagsterEventType, DagsterInstance, RunsFilter

    from evidence_pipeline.config import Settings
    from evidence_pipeline.defs.documents import PAGE_TAG
    from evidence_pipeline.runtime import runtime_for
    from evidence_pipeline_tests.support.dagster_services import dagster_services, run_fork_servers

    home = door.root / "dagster"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    env = door.env | {"DAGSTER_HOME": str(home)}
    os.environ.update(env)
    with dagster_services(env, home), DagsterInstance.get() as instance:
        wait_all(door, [inspect_job(door, document_id, "warm-up")])
        forked = bool(run_fork_servers())
        started = time.monotonic()
        jobs = []
        for n in range(count):
            time.sleep(max(0.0, started + n * interval - time.monotonic()))
            jobs.append(inspect_job(door, document_id, f"daemon-{n}"))
        states = wait_all(door, jobs)
        pages = runtime_for(Settings.from_env(env)).pages
        while True:  # a job finishes inside its run: the run ends a moment later
            records = instance.get_run_records(RunsFilter(job_name="document_page_job"), ascending=True)
            if all(record.end_time is not None for record in records):
                break
            time.sleep(0.2)
        runs = {}  # job id -> its page's (latest) run
        for record in records:
            for job in pages.page_jobs(record.dagster_run.tags[PAGE_TAG]):
                runs[job.job_id] = record

        def event_time(run_id: str, kind: DagsterEventType) -> float:
            [event] = instance.get_records_for_run(run_id, of_type=kind).records
            return event.event_log_entry.timestamp

        parts: dict[str, list[float]] = {"sensor": [], "queue": [], "run start": [], "run": []}
        for status in states:
            record = runs[status["job_id"]]
            run_id, created = record.dagster_run.run_id, record.create_timestamp.timestamp()
            starting = event_time(run_id, DagsterEventType.RUN_STARTING)
            begun = event_time(run_id, DagsterEventType.RUN_START)
            for name, value in zip(
                parts,
                (created - stamp(status["accepted_at"]), starting - created, begun - starting, record.end_time - begun),
            ):
                parts[name].append(value * 1000)
    totals = [span(status) * 1000 for status in states]
    outcomes = dict(Counter(status["state"] for status in states))
    page_runs = len({runs[status["job_id"]].dagster_run.run_id for status in states})
    start = "forked from the code server's fork server" if forked else "spawned (no fork server)"
    print(
        f"through a daemon: {count} jobs, one every {interval:g} s: {outcomes} in {page_runs} page runs, each run's "
        f"process {start}; load average {os.getloadavg()[0]:.1f}"
    )
    print(f"  202->succeeded {figures(totals)} max={max(totals):.0f}ms")
    for name, values in parts.items():
        print(f"  {name:9} median {statistics.median(values):.0f} ms, p95 {percentile(values, 95):.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between two jobs' arrivals")
    parser.add_argument("--smoke", action="store_true", help="3 jobs: does the bench still run")
    args = parser.parse_args()
    with front_door("evidence-bench-job-latency-", 1, 1, EVIDENCE_DOCUMENT_PAGE_SIZE="50") as door:
        document_id = door.upload(blank_pdf())
        in_process(door, document_id)
        through_daemon(door, document_id, 3 if args.smoke else args.jobs, args.interval)


if __name__ == "__main__":
    main()
