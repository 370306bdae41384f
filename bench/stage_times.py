"""Per-stage cost of one report, in plain Python (no Dagster): pin, render, validate, sign+publish.

Runs every demo tenant for N months in one process on a fresh temporary $EVIDENCE_HOME and prints the median and
p95 per stage and per tenant size, the CPU seconds per report (user + system, `getrusage`: wall time on a shared
machine is noise), and the ratio of each stage to render. Usage: `make bench-stages` or
`uv run python bench/stage_times.py [--months N]`.

`--against DIR` compares with another checkout (a worktree of main, say) in the same run: both are measured in
child processes, alternating round by round (`--rounds`), each with its own interpreter (DIR/.venv when there is
one, so each side has its own locked libraries), and the CPU per report is printed side by side with the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STAGES = ("render_ms", "validate_ms", "sign_ms", "publish_ms")


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(months: int) -> dict:
    """{"wall_s", "stages": {stage: {tenant: [ms]}}, "cpu_ms": {tenant: [ms]}, "pages": {tenant: [n]}}; the first
    report is a warm-up (imports, caches) and is not counted."""
    from evidence_pipeline.config import Settings
    from evidence_pipeline.defs.demo import complete_months
    from evidence_pipeline.models import TenantMonth
    from evidence_pipeline.monthly.pipeline import run_tenant_month
    from evidence_pipeline.runtime import RunInfo, Runtime
    from evidence_pipeline.synthetic.demo_data import DEMO_TENANTS, demo_transactions
    from evidence_pipeline_tests.support.fixture_sources import publish_revision

    result: dict = {"stages": {}, "cpu_ms": {}, "wall_s": 0.0}
    with tempfile.TemporaryDirectory() as home:
        runtime = Runtime.from_settings(Settings.from_env({"EVIDENCE_HOME": home}))
        runtime.keyring  # key generation is a one-off, not a per-report cost
        periods = complete_months(date.today(), months + 1)
        work = [(tenant, period) for tenant in DEMO_TENANTS for period in periods[1:]]
        for n, (tenant, period) in enumerate([(next(iter(DEMO_TENANTS)), periods[0])] + work):
            tenant_month = TenantMonth(tenant, period)
            publish_revision(runtime, tenant_month, demo_transactions(tenant_month))
            started, cpu = time.perf_counter(), _cpu_s()
            publication = run_tenant_month(runtime, tenant_month, RunInfo("bench"))
            cpu_ms, wall = (_cpu_s() - cpu) * 1000, time.perf_counter() - started
            if n == 0:
                continue
            result["wall_s"] += wall
            result["cpu_ms"].setdefault(tenant, []).append(cpu_ms)
            for stage, ms in publication.timings_ms.items():
                result["stages"].setdefault(stage, {}).setdefault(tenant, []).append(ms)
    return result


def _p95(values: list[float]) -> float:
    return sorted(values)[max(0, round(0.95 * len(values)) - 1)]


def report(result: dict) -> None:
    timings, cpu = result["stages"], result["cpu_ms"]
    reports = sum(len(values) for values in cpu.values())
    print(
        f"{reports} reports in {result['wall_s']:.1f} s ({reports / result['wall_s']:.2f} reports/s, one process)"
        f"; load average {os.getloadavg()[0]:.1f}\n"
    )
    print(f"{'stage':<12} {'tenant':<18} {'median ms':>10} {'p95 ms':>8}")
    for stage in (*STAGES, "cpu"):
        for tenant, values in (cpu if stage == "cpu" else timings[stage]).items():
            print(f"{stage:<12} {tenant:<18} {statistics.median(values):>10.1f} {_p95(values):>8.1f}")
    everything = [v for vs in cpu.values() for v in vs]
    print(
        f"\nCPU per report (user + system): median {statistics.median(everything):.1f} ms, "
        f"mean {statistics.mean(everything):.1f} ms"
    )
    render_all = statistics.median([v for vs in timings["render_ms"].values() for v in vs])
    print("median stage cost relative to render (all tenants):")
    for stage in STAGES[1:]:
        median = statistics.median([v for vs in timings[stage].values() for v in vs])
        print(f"  {stage:<12} {median / render_all:.2f}x render")


def compare(args) -> None:
    """Both checkouts, alternating, in child processes; CPU per report per tenant, side by side."""
    other = Path(args.against).resolve()
    sides = {
        "this": (REPO, Path(sys.executable)),
        "against": (
            other,
            other / ".venv/bin/python" if (other / ".venv/bin/python").exists() else Path(sys.executable),
        ),
    }
    cpu: dict[str, dict[str, list[float]]] = {side: {} for side in sides}
    for round_ in range(args.rounds):
        for side, (root, python) in sides.items() if round_ % 2 == 0 else reversed(sides.items()):
            env = dict(os.environ, PYTHONPATH=str(root))
            child = subprocess.run(
                [str(python), __file__, "--months", str(args.months), "--json"],
                env=env,
                cwd=root,
                check=True,
                capture_output=True,
                text=True,
            )
            for tenant, values in json.loads(child.stdout)["cpu_ms"].items():
                cpu[side].setdefault(tenant, []).extend(values)
            print(f"round {round_ + 1}, {side} done; load average {os.getloadavg()[0]:.1f}", flush=True)
    print(
        f"\nCPU ms per report (median; {args.rounds} rounds x {args.months} months), this = {REPO}, against = {other}"
    )
    print(f"{'tenant':<18} {'against':>9} {'this':>9} {'ratio':>7}")
    for tenant in cpu["against"]:
        theirs, ours = statistics.median(cpu["against"][tenant]), statistics.median(cpu["this"][tenant])
        print(f"{tenant:<18} {theirs:>9.1f} {ours:>9.1f} {ours / theirs:>7.2f}")
    theirs = statistics.mean(v for vs in cpu["against"].values() for v in vs)
    ours = statistics.mean(v for vs in cpu["this"].values() for v in vs)
    print(f"{'all (mean)':<18} {theirs:>9.1f} {ours:>9.1f} {ours / theirs:>7.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--months", type=int, default=6)
    parser.add_argument("--against", metavar="DIR", help="another checkout to compare CPU per report with")
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds of each side (with --against)")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # a child of --against
    args = parser.parse_args()
    if args.against:
        compare(args)
    elif args.json:
        json.dump(measure(args.months), sys.stdout)
    else:
        report(measure(args.months))


if __name__ == "__main__":
    main()
