"""Per-stage cost of one report, in plain Python (no Dagster): pin, render, validate, sign+publish.

Runs every demo tenant for N months in one process on a fresh temporary $EVIDENCE_HOME and prints the median and
p95 per stage and per tenant size, plus the ratio of each stage to render (ratios are what to compare on a shared,
noisy machine). Usage: `make bench` or `uv run python bench/stage_times.py [--months N]`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import date

from evidence_pipeline.config import Settings
from evidence_pipeline.defs.demo import complete_months
from evidence_pipeline.models import TenantMonth
from evidence_pipeline.monthly.pipeline import run_tenant_month
from evidence_pipeline.runtime import RunInfo, Runtime
from evidence_pipeline.synthetic.demo_data import DEMO_TENANTS, demo_transactions
from evidence_pipeline_tests.fixture_sources import publish_revision


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--months", type=int, default=6)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        runtime = Runtime.from_settings(Settings.from_env({"EVIDENCE_HOME": home}))
        runtime.keyring  # key generation is a one-off, not a per-report cost
        timings: dict[str, dict[str, list[float]]] = {}
        started = time.perf_counter()
        for tenant in DEMO_TENANTS:
            for period in complete_months(date.today(), args.months):
                tenant_month = TenantMonth(tenant, period)
                publish_revision(runtime, tenant_month, demo_transactions(tenant_month))
                publication = run_tenant_month(runtime, tenant_month, RunInfo("bench"))
                for stage, ms in publication.timings_ms.items():
                    timings.setdefault(stage, {}).setdefault(tenant, []).append(ms)
        wall = time.perf_counter() - started
    reports = len(DEMO_TENANTS) * args.months
    print(f"{reports} reports in {wall:.1f} s ({reports / wall:.2f} reports/s, one process)\n")
    print(f"{'stage':<12} {'tenant':<18} {'median ms':>10} {'p95 ms':>8}")
    for stage in ("render_ms", "validate_ms", "sign_ms", "publish_ms"):
        for tenant, values in timings[stage].items():
            p95 = sorted(values)[max(0, round(0.95 * len(values)) - 1)]
            print(f"{stage:<12} {tenant:<18} {statistics.median(values):>10.1f} {p95:>8.1f}")
    render_all = statistics.median([v for vs in timings["render_ms"].values() for v in vs])
    print("\nmedian stage cost relative to render (all tenants):")
    for stage in ("validate_ms", "sign_ms", "publish_ms"):
        median = statistics.median([v for vs in timings[stage].values() for v in vs])
        print(f"  {stage:<12} {median / render_all:.2f}x render")


if __name__ == "__main__":
    main()
