"""CLI start-up and archive verification: what `evidence --help` and `evidence verify` cost.

On one fresh temporary root:

1. start-up: the CPU (user + sys, from getrusage(RUSAGE_CHILDREN)) of `evidence --help` and of `evidence verify`
   on one local bundle (PAdES check included), run --reps times each as child processes; median, min and max.
   Beside them, what a bare interpreter and the imports alone cost, so that the share of pyHanko's own import
   is visible;
2. archive: `evidence verify ARCHIVE/bundles --json` over an archive of --tenants x --months bundles, which the
   plain-Python pipeline publishes first (throughput.py's sources and raw path, no Dagster): the median wall time
   of --archive-reps runs as bundles/s, with --workers processes and with one.

Usage: `make bench-cli` or `uv run python bench/cli_verify.py [--tenants 25 --months 12 --reps 15]`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from throughput import publish_sources, run_raw, tenant_months

EVIDENCE = str(Path(sys.executable).with_name("evidence"))  # the console script, as a user runs it


def child_cpu(command: list[str], env: dict[str, str]) -> tuple[float, float, subprocess.CompletedProcess]:
    """(CPU seconds, wall seconds, result) of one child process."""
    before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    result = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall, after = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall, result


def startup_row(label: str, command: list[str], env: dict[str, str], reps: int) -> None:
    cpus = []
    for _ in range(reps):
        cpu, _, result = child_cpu(command, env)
        if result.returncode != 0:
            sys.exit(f"{label}: exit {result.returncode}: {result.stderr[-500:]}")
        cpus.append(cpu)
    print(f"{label:<58} {statistics.median(cpus):>8.3f} {min(cpus):>8.3f} {max(cpus):>8.3f}", flush=True)


def archive_row(label: str, command: list[str], env: dict[str, str], bundles: int, reps: int) -> None:
    walls, cpus = [], []
    for _ in range(reps):
        cpu, wall, result = child_cpu(command, env)
        lines = [json.loads(line) for line in result.stdout.splitlines()]
        if result.returncode != 0 or len(lines) != bundles or not all(line["ok"] for line in lines):
            sys.exit(f"{label}: exit {result.returncode}, {len(lines)} of {bundles} lines: {result.stderr[-500:]}")
        walls.append(wall)
        cpus.append(cpu)
    wall = statistics.median(walls)
    print(
        f"{label:<44} {wall:>8.2f} {bundles / wall:>10.1f} {statistics.median(cpus):>8.2f} "
        f"{min(walls):>8.2f} {max(walls):>8.2f}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, default=25)
    parser.add_argument("--months", type=int, default=12)
    parser.add_argument("--reps", type=int, default=15, help="runs of each start-up command")
    parser.add_argument("--archive-reps", type=int, default=3, help="runs of each archive verification")
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="evidence-bench-cli-"))
    print(f"working in {root} (removed when the benchmark succeeds)", flush=True)
    partitions = tenant_months(args.tenants, args.months, "bench-t")
    env = dict(os.environ, EVIDENCE_HOME=str(root / "home"), EVIDENCE_SOURCES_URI=str(root / "sources"))
    print(f"publishing {len(partitions)} source revisions and their bundles ...", flush=True)
    publish_sources(env, partitions, args.workers)
    made_s, _ = run_raw(env, partitions, args.workers)
    archive = root / "home" / "archive"
    bundles = sorted(path.parent for path in (archive / "bundles").glob("*/*/*/manifest.json"))
    print(f"{len(bundles)} bundles published in {made_s:.1f} s\n", flush=True)
    if len(bundles) != len(partitions):
        sys.exit(f"expected {len(partitions)} bundles")

    python = [sys.executable, "-c"]
    print(f"start-up, CPU s (user+sys) over {args.reps} runs{'':<18} {'median':>8} {'min':>8} {'max':>8}")
    startup_row("python -c pass (the interpreter alone)", [*python, "pass"], env, args.reps)
    startup_row("import evidence_pipeline.cli", [*python, "import evidence_pipeline.cli"], env, args.reps)
    startup_row(
        "import pyhanko.sign.validation (pyHanko's own import)",
        [*python, "import pyhanko.sign.validation, pyhanko.pdf_utils.reader"],
        env,
        args.reps,
    )
    startup_row(
        "import evidence_pipeline.cli, evidence_pipeline.audit.verify",
        [*python, "import evidence_pipeline.cli, evidence_pipeline.audit.verify"],
        env,
        args.reps,
    )
    startup_row("evidence --help", [EVIDENCE, "--help"], env, args.reps)
    startup_row("evidence verify BUNDLE (one local bundle)", [EVIDENCE, "verify", str(bundles[0])], env, args.reps)

    print(
        f"\narchive of {len(bundles)} bundles, median of {args.archive_reps} runs{'':<6} "
        f"{'wall s':>8} {'bundles/s':>10} {'CPU s':>8} {'min':>8} {'max':>8}"
    )
    whole = [EVIDENCE, "verify", str(archive / "bundles"), "--json"]
    archive_row(
        f"evidence verify ARCHIVE/bundles --workers {args.workers}",
        [*whole, "--workers", str(args.workers)],
        env,
        len(bundles),
        args.archive_reps,
    )
    archive_row(
        "evidence verify ARCHIVE/bundles --workers 1", [*whole, "--workers", "1"], env, len(bundles), args.archive_reps
    )
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
