"""`evidence demo` as an operator runs it: real processes on one fresh home (SQLite + local archive)."""

import contextlib
import os
import re
import shutil
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from evidence_pipeline.audit.authorizations import recheck_ledger
from evidence_pipeline.defs.demo import SOURCE_MONTHS
from evidence_pipeline.ledger import Ledger
from evidence_pipeline.models import EventType
from evidence_pipeline.synthetic.demo_data import DEMO_TENANTS

pytestmark = pytest.mark.slow  # whole demos in subprocesses

REPO = Path(__file__).resolve().parents[2]
TENANTS = len(DEMO_TENANTS)  # one month each: one bundle, one run
EVIDENCE = [sys.executable, "-c", "from evidence_pipeline.cli import main; main()"]
# Seconds a demo may take before it is taken to hang: no bound on its time. A demo whose archive is full retries
# each tenant-month in new step processes; alone it took 228 s, beside the suite (6 workers on 2 cores) over 900
HANG = 2400


def _environment(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVIDENCE_", "DAGSTER_"))}
    return env | {"EVIDENCE_HOME": str(home), "EVIDENCE_WORKERS": "1"} | extra


def _demo(env: dict, **kwargs) -> subprocess.Popen:
    # One month per tenant: what these tests prove holds for any number of months, and each month costs a run.
    return subprocess.Popen(
        [*EVIDENCE, "demo", "--months", "1"],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def _newly_published(stdout: str) -> int:
    return int(re.search(r"(\d+) newly published", stdout).group(1))


def test_two_concurrent_demos_on_one_home_count_each_publication_once(tmp_path):
    env = _environment(tmp_path / "home", EVIDENCE_LEASE_SECONDS="20")
    demos = [_demo(env, umask=0) for _ in range(2)]  # started from a shell with umask 000
    outputs = [demo.communicate(timeout=HANG) for demo in demos]
    for demo, (stdout, stderr) in zip(demos, outputs):
        assert demo.returncode == 0, stdout[-3000:] + stderr[-3000:]
        assert f"{TENANTS} bundles" in stdout
        assert re.search(r"document jobs, filed under \d{4}-\d{2} \(its report lists them\)", stdout)
        assert re.search(r"acme-books +contract-review @ lease-review/2026\.1 +2  succeeded: approved", stdout)
    assert sum(_newly_published(stdout) for stdout, _ in outputs) == TENANTS
    # Both demos submitted the same documents under the same keys (the agreement signed once): 13 jobs per tenant,
    # each worked once: 8, and the agreement's four parts reviewed (the addendum rejected) and merged, the addendum
    # approved by the dev approver's decision.
    assert _document_jobs(tmp_path / "home") == {
        ("contract-review", "succeeded", None): 10 + 15,
        ("contract-review", "rejected", "REVIEW_POLICY_REJECTED"): 15 + 5,
        ("redact", "succeeded", None): 10,
        ("split", "succeeded", None): 5,
        ("merge", "succeeded", None): 5,
    }
    # The sources were published as an operator publishes them: once per revision, signed by dev-operator, and
    # every request re-checks offline.
    ledger = Ledger(f"sqlite:///{tmp_path / 'home' / 'ledger.sqlite'}")
    published = ledger.events_of_type(EventType.SOURCE_PUBLISHED)
    assert len(published) == 5 * SOURCE_MONTHS and {e["actor"] for e in published} == {"dev-operator"}
    assert all(e["details"]["authorization"]["signatures"] for e in published)
    assert Counter(a.action for a in recheck_ledger(ledger, 300))["source.publish"] == len(published)
    reports = "\n".join(stdout for stdout, _ in outputs)  # either demo may have worked the parts and the merge
    assert re.search(r"acme-books +contract-review @ district-agreement/2026\.1 +3  succeeded: approved", reports)
    assert re.search(r"acme-books +merge +1  succeeded", reports)
    modes = {}
    for path in (tmp_path / "home").rglob("*"):
        with contextlib.suppress(FileNotFoundError):  # SQLite's -wal and -shm come and go
            modes[path] = path.lstat().st_mode
    assert {path.name for path in modes} >= {"dagster.yaml", "pades-root.pem", "ledger.sqlite", "runs.db"}
    loose = {
        str(path.relative_to(tmp_path))
        for path, mode in modes.items()
        if (stat.S_ISREG(mode) or stat.S_ISDIR(mode)) and mode & 0o022
    }
    assert not loose, sorted(loose)[:20]  # nothing group- or world-writable, Dagster's own files included


def _document_jobs(home: Path) -> dict[tuple, int]:
    with sqlite3.connect(home / "ledger.sqlite") as db:
        return {
            (operation, state, reason): n
            for operation, state, reason, n in db.execute(
                "SELECT operation, state, last_reason, count(*) FROM evidence_jobs JOIN evidence_document_jobs"
                " USING (job_id) GROUP BY operation, state, last_reason"
            )
        }


def _job_states(home: Path) -> set[str]:
    with sqlite3.connect(home / "ledger.sqlite") as db:
        return {state for (state,) in db.execute("SELECT state FROM evidence_jobs")}


@pytest.mark.parametrize(
    "errno_name, code, job_state",
    [
        ("EROFS", "STORE_READ_ONLY", "rejected"),  # terminal: an operator fixes the mount, then replays
        ("ENOSPC", "STORE_FULL", "accepted"),  # transient: one invocation's retries do not spend the job's budget
    ],
)
def test_a_read_only_or_full_archive_fails_each_tenant_month_on_its_own(tmp_path, errno_name, code, job_state):
    home = tmp_path / "home"
    demo = _demo(_environment(home, EVIDENCE_IO_FAULT=f"archive_write:{errno_name}"))
    stdout, stderr = demo.communicate(timeout=HANG)
    assert demo.returncode == 1, stdout[-3000:] + stderr[-3000:]
    failed = [line.split() for line in stdout.splitlines() if " FAILED " in line]
    assert len(failed) == TENANTS and {row[-1] for row in failed} == {code}  # every tenant-month was attempted
    assert "Stack Trace" not in stdout + stderr and "Traceback" not in stdout + stderr
    assert str(home) not in stdout + stderr
    assert [p for p in (home / "archive").rglob("*")] == []  # no empty bundle folder, no partial file
    assert _job_states(home) == {job_state}


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A fresh EVIDENCE_HOME whose Dagster instance this test process can open too."""
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home" / "dagster"))
    return tmp_path / "home"


def _instance(home: Path):
    from dagster import DagsterInstance

    dagster_home = home / "dagster"
    dagster_home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(REPO / "dagster.yaml", dagster_home / "dagster.yaml")
    return DagsterInstance.from_config(str(dagster_home))


def _slot_holders(home: Path) -> list[tuple[str, str]]:
    with _instance(home) as instance:
        info = instance.event_log_storage.get_concurrency_info("publish")
        return [(slot.run_id, slot.step_key) for slot in info.claimed_slots]


def test_demos_killed_mid_publish_leave_no_slots_that_block_the_next_one(home):
    """Issue 16, finding 1: two demos SIGKILLed mid-publish; the next demo frees their slots and finishes."""
    for _ in range(2):
        killed = _demo(_environment(home, EVIDENCE_KILL_POINT="after_archive_put", EVIDENCE_LEASE_SECONDS="1"))
        killed.communicate(timeout=600)
        assert killed.returncode == -signal.SIGKILL
    assert len(_slot_holders(home)) >= 1  # what the dead demos left behind
    # The dead demos' 1 s leases have run out; this one's own lease is the default: 1 s can run out between two
    # renewals on a loaded machine (LEASE_FENCED), which is not what this test is about.
    demo = _demo(_environment(home))
    stdout, stderr = demo.communicate(timeout=HANG)  # before the fix: it never returned
    assert demo.returncode == 0, stdout[-3000:] + stderr[-3000:]
    assert f"{TENANTS} bundles" in stdout and "RUN_WORKER_LOST" in stderr
    assert _slot_holders(home) == []
    with _instance(home) as instance:
        statuses = [run.status.value for run in instance.get_runs()]
    assert "STARTED" not in statuses and statuses.count("FAILURE") == 2


def _held_by_a_live_run(home: Path) -> subprocess.Popen:
    """Both `publish` slots, held by a run whose process is alive (it is only sleeping)."""
    from dagster import DagsterRun, DagsterRunStatus

    from evidence_pipeline.defs.extensions.slots import HOST_TAG, PID_TAG, STARTED_TAG, _started

    holder = subprocess.Popen(["sleep", "600"])
    with _instance(home) as instance:
        run = DagsterRun(
            job_name="monthly_evidence",
            run_id=str(uuid.uuid4()),
            status=DagsterRunStatus.STARTED,
            tags={HOST_TAG: socket.gethostname(), PID_TAG: str(holder.pid), STARTED_TAG: _started(holder.pid)},
        )
        instance.add_run(run)
        storage = instance.event_log_storage
        storage.initialize_concurrency_limit_to_default("publish")
        for step in ("evidence_bundle", "other_step"):
            assert storage.claim_concurrency_slot("publish", run.run_id, step).is_claimed
    return holder


def _stderr_lines(process: subprocess.Popen) -> list[str]:
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(process.stderr), daemon=True).start()
    return lines


def test_a_demo_gives_up_waiting_for_a_live_holder_and_says_why(home):
    holder = _held_by_a_live_run(home)
    try:
        demo = _demo(_environment(home, EVIDENCE_POOL_WAIT_SECONDS="3"))
        stdout, stderr = demo.communicate(timeout=HANG)
    finally:
        holder.kill()
    assert demo.returncode == 1, stdout[-3000:] + stderr[-3000:]
    assert "waiting for a `publish` pool slot" in stderr
    failed = [line.split() for line in stdout.splitlines() if " FAILED " in line]
    assert len(failed) == TENANTS and {row[-1] for row in failed} == {"POOL_WAIT_TIMEOUT"}
    assert len(_slot_holders(home)) == 2  # the live holder keeps its slots; the demo leaves none of its own


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_a_demo_that_waits_for_a_slot(home, signum):
    holder = _held_by_a_live_run(home)
    try:
        demo = _demo(_environment(home))
        lines = _stderr_lines(demo)
        deadline = time.monotonic() + 600
        while not any("waiting for" in line for line in lines) and time.monotonic() < deadline:
            time.sleep(0.2)
        demo.send_signal(signum)
        demo.wait(timeout=120)  # a bound on liveness: before the fix it never stopped
    finally:
        holder.kill()
        if demo.poll() is None:
            demo.kill()
    assert demo.returncode != 0 and "INTERRUPTED" in "".join(lines)
    with _instance(home) as instance:
        demo_runs = [run for run in instance.get_runs() if run.tags.get("evidence/owner_pid") == str(demo.pid)]
    assert demo_runs and all(run.status.value == "FAILURE" for run in demo_runs)
