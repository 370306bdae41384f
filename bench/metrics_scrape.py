"""What one Prometheus scrape costs as the ledger's history grows: the collector (evidence_pipeline/metrics) over a
ledger of 10,000 events and of 1,000,000 (100,000 jobs each tenth of that: a year of mostly succeeded jobs, refused
documents, a few dead letters and 300 jobs in flight), SQLite, on this machine.

    uv run python bench/metrics_scrape.py [--sizes 10000 1000000] [--scrapes 50]
    uv run python bench/metrics_scrape.py --smoke     # 2,000 and 20,000 events, 10 scrapes: a quick check

Prints, per size: the fill time, then the scrape (generate_latest of the registry the intake server serves) and the
ledger reads alone, median and p95 in ms. Flat figures across sizes are the point: every query is an index range
(migration 0014), so the cost follows the jobs in flight and the dead letters, not the history.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from prometheus_client import generate_latest
from sqlalchemy import func, select

from evidence_pipeline.config import Settings
from evidence_pipeline.metrics import ledger_reads
from evidence_pipeline.metrics.http import registry_for
from evidence_pipeline.models import EventType
from evidence_pipeline.runtime import runtime_for
from evidence_pipeline.synthetic.ledger_history import fill


def _times_ms(work, count: int) -> tuple[float, float]:
    work()  # warm: the first scrape lists the checkpoints and loads the registry's codes
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        work()
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return statistics.median(samples), samples[max(0, int(len(samples) * 0.95) - 1)]


def measure(events: int, scrapes: int) -> None:
    with tempfile.TemporaryDirectory(prefix="metrics-bench-") as home:
        runtime = runtime_for(Settings.from_env({"EVIDENCE_HOME": str(Path(home) / "home")}))
        start = time.perf_counter()
        written = fill(runtime.ledger, events)
        filled = time.perf_counter() - start
        registry = registry_for(runtime)
        scrape = _times_ms(lambda: generate_latest(registry), scrapes)
        reads = _times_ms(lambda: ledger_reads.read(runtime.ledger), scrapes)
        size = len(generate_latest(registry))
        print(
            f"{events:>9,} events {written['jobs']:>7,} jobs, {written.get('dead', 0):,} dead letters (filled in "
            f"{filled:5.1f} s): scrape median {scrape[0]:6.2f} ms p95 {scrape[1]:6.2f} ms; ledger reads median "
            f"{reads[0]:6.2f} ms p95 {reads[1]:6.2f} ms; exposition {size:,} bytes",
            flush=True,
        )
        print(
            "    per query, median ms: "
            + ", ".join(
                f"{name} {_times_ms(lambda q=query: _run(runtime.ledger, q), scrapes)[0]:.2f}"
                for name, query in _queries(runtime.ledger)
            ),
            flush=True,
        )


def _queries(ledger) -> list[tuple[str, object]]:
    now = time.time()
    live_dead, failed = ledger_reads._dead_letters(ledger)
    events = ledger.audit_events.c
    return [
        ("live jobs", ledger_reads._live_jobs(ledger, now)),
        ("ended in window", ledger_reads._ended_jobs(ledger, now - ledger_reads.WINDOW_SECONDS)),
        ("dead", live_dead),
        ("rejected by failure", failed),
        ("newest seq", select(func.max(events.seq))),
        ("append lag", lambda ledger, conn: ledger_reads._newest(ledger, conn, EventType.BUNDLE_PUBLISHED)),
    ]


def _run(ledger, query) -> None:
    with ledger.engine.connect() as conn:
        query(ledger, conn) if callable(query) else conn.execute(query).all()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 1_000_000])
    parser.add_argument("--scrapes", type=int, default=50)
    parser.add_argument("--smoke", action="store_true", help="2,000 and 20,000 events, 10 scrapes")
    args = parser.parse_args()
    sizes, scrapes = ([2_000, 20_000], 10) if args.smoke else (args.sizes, args.scrapes)
    for events in sizes:
        measure(events, scrapes)


if __name__ == "__main__":
    main()
