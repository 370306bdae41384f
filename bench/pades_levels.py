"""Signing cost per report at PAdES B-B, B-T, B-LT and B-LTA, with a real time stamp authority and CRLs on
127.0.0.1 (the tests' local PKI), in one run.

Renders one demo report, then signs it --reps times at each level, interleaved (B-B, B-T, B-LT, B-LTA, B-B, ...)
so that noise from other processes on a shared machine hits every level alike. Prints the median and p95 per level
and the ratio of each median to B-B, which is what to compare across machines.
Usage: `make bench-pades` or `uv run python bench/pades_levels.py [--reps 30]`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from evidence_pipeline.config import PADES_LEVELS, Settings
from evidence_pipeline.models import TenantMonth
from evidence_pipeline.monthly.render import render_report
from evidence_pipeline.monthly.sources import read_revision
from evidence_pipeline.runtime import Runtime
from evidence_pipeline.signing.keys import load_keyring
from evidence_pipeline.signing.pades import sign_pdf, verify_pdf_signature
from evidence_pipeline.synthetic.demo_data import demo_transactions
from evidence_pipeline_tests.support.fixture_sources import publish_revision
from evidence_pipeline_tests.support.local_pki import LocalPki


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args()
    tenant_month = TenantMonth("acme-books", "2026-10")
    with tempfile.TemporaryDirectory() as home, LocalPki() as pki:
        runtime = Runtime.from_settings(Settings.from_env({"EVIDENCE_HOME": home}))
        revision = publish_revision(runtime, tenant_month, demo_transactions(tenant_month))
        report = render_report(revision, read_revision(runtime.sources, revision)).pdf
        keyring = load_keyring(pki.provision(Path(home) / "keys"), generate=False)
        for level in PADES_LEVELS:  # warm up: imports, key loading, connections; and check what is measured
            verify_pdf_signature(
                sign_pdf(report, keyring, level=level, tsa_url=pki.tsa_url),
                keyring.root_pem,
                level=level,
                tsa_root_pem=keyring.tsa_root_pem,
            )
        timings: dict[str, list[float]] = {level: [] for level in PADES_LEVELS}
        for _ in range(args.reps):
            for level in PADES_LEVELS:
                start = time.perf_counter()
                sign_pdf(report, keyring, level=level, tsa_url=pki.tsa_url)
                timings[level].append((time.perf_counter() - start) * 1000)
    base = statistics.median(timings["B-B"])
    print(f"report: {len(report):,} bytes unsigned; {args.reps} signatures per level, interleaved")
    print(f"{'level':<6} {'median ms':>10} {'p95 ms':>8} {'x B-B':>6}")
    for level, values in timings.items():
        median, p95 = statistics.median(values), statistics.quantiles(values, n=20)[-1]
        print(f"{level:<6} {median:>10.1f} {p95:>8.1f} {median / base:>6.2f}")


if __name__ == "__main__":
    main()
