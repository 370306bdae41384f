"""Every benchmark still runs: each at tiny sizes (seconds), through its own command line, on a temporary root.
A bench that no longer runs (a call with an old signature, a tenant its ledger never knew) fails here rather than
at the next measurement. What a bench measures is in bench/README.md, never asserted here: only that it ran to
its figures."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
HELPERS = {"frontdoor.py", "download_floor.py"}  # started or imported by the benches below, not run alone
# script[:variant] -> (its smoke arguments, a line its figures print)
SMOKE = {
    "before_after.py": (
        [
            "--before",
            "COPY",
            "--rounds",
            "1",
            "--figure",
            "B-B signature: ([0-9.]+)",
            "--",
            "bench/keyring_select.py",
            "--reps",
            "2",
        ],
        "after/before",
    ),
    "cli_verify.py": (
        ["--tenants", "1", "--months", "2", "--reps", "1", "--archive-reps", "1"],
        "evidence verify ARCHIVE/bundles --workers 1",
    ),
    "connection_limits.py": (["--slow", "20", "--requests", "5", "--header-mb", "1"], "server still running: True"),
    "contract_review.py": (
        ["--contracts", "4", "--long-every", "2", "--long-pages", "2", "--rounds", "1"],
        '"contracts": 4',
    ),
    "downloads.py": (["--size-mb", "1", "--rounds", "1"], "ratios: API / direct"),
    "intake.py": (
        [
            "--uploads",
            "4",
            "--backfill-months",
            "0",
            "--rate",
            "4",
            "--duration",
            "1",
            "--overload",
            "8",
            "--capacity",
            "2",
        ],
        "503 in the server",
    ),
    "isolation.py": (["--calls", "5"], "gate, in a worker process"),
    "job_latency.py": (["--smoke"], "202->succeeded"),
    "keyring_select.py": (["--reps", "10"], "per-bundle re-read / B-B signature"),
    "metrics_scrape.py": (["--smoke"], "scrape median"),
    "oversize_memory.py": ([], "validate_ms"),
    "package_verify.py": (["--bundles", "8", "--checkpoints", "2", "--reps", "1"], "bundles/s"),
    "pades_levels.py": (["--reps", "2"], "B-LTA"),
    "range_overhead.py": (["--partitions", "2"], "sqlite    fixed"),
    "real_corpus_redaction.py": (["--only", "pdfannots/pdfannots-0.5/tests/caret.pdf"], "this tree: 1 files"),
    "redaction.py": (["--applications", "1", "--pages", "2", "--large-pages", "3"], '"second_pass_s"'),
    "scale.py": (
        [
            "--tenants",
            "10",
            "--materializations",
            "10",
            "--ledger-months",
            "1",
            "--schedule-sample",
            "2",
            "--reps",
            "1",
        ],
        "evidence stats --tenant scale-t00000",
    ),
    "stage_times.py": (["--months", "1", "--rounds", "1"], "median stage cost relative to render"),
    "tenant_isolation.py": (["--seconds", "1", "--scanned-pages", "2"], '"p99_ratio"'),
    "throughput.py": (["--tenants", "1", "--months", "1", "--stock-sample", "1"], "peak RSS, all processes"),
    "throughput.py:schedule": (
        ["--tenants", "2", "--months", "1", "--stock-sample", "0", "--launch", "schedule"],
        "ratio schedule / raw throughput",
    ),
}


def test_every_bench_has_a_smoke_run():
    assert {path.name for path in BENCH.glob("*.py")} - HELPERS == {name.split(":")[0] for name in SMOKE}


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(SMOKE))
def test_the_bench_runs_to_its_figures(script, tmp_path):
    args, figures = SMOKE[script]
    script = script.split(":")[0]
    if script == "scale.py":
        args = [*args, "--results", str(tmp_path / "results")]  # not into the checkout
    if script == "before_after.py":  # "before" is this checkout's code, copied (a checkout need not be a git clone)
        before = tmp_path / "results"
        for folder in ("evidence_pipeline", "evidence_pipeline_tests", "bench"):
            shutil.copytree(BENCH.parent / folder, before / folder, ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(BENCH.parent / "uv.lock", before)
        args = [str(before) if arg == "COPY" else arg for arg in args]
    # Each bench makes its roots with tempfile, named after it: under this test's own folder, where it must remove
    # them (one default run of intake.py left 13 GB behind). Servers it stops may leave anonymous folders of their
    # own there (tmp*, multiprocessing's pymp-*), under a loaded machine's timing: those are not a bench's roots.
    env = {key: value for key, value in os.environ.items() if not key.startswith(("EVIDENCE_", "DAGSTER_"))}
    result = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        cwd=BENCH.parent,
        capture_output=True,
        text=True,
        timeout=600,
        env=env | {"TMPDIR": str(tmp_path)},
    )
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert figures in result.stdout, result.stdout[-3000:]
    left_behind = [
        path.name
        for path in tmp_path.iterdir()
        if path.name != "results" and not path.name.startswith(("tmp", "pymp-"))
    ]
    assert not left_behind, f"the bench left {left_behind} in its TMPDIR"
