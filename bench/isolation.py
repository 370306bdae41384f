"""What a document job's worker process costs (documents/isolation.py): the gate of a small PDF called directly
and through ``isolated``, in a process that has loaded the Dagster code location like a run worker.

    uv run python bench/isolation.py [--calls 200]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import time
from pathlib import Path

import evidence_pipeline.definitions  # noqa: F401  (a run worker's imports, and its resident size)
from evidence_pipeline.documents.gate import gate
from evidence_pipeline.documents.isolation import Limits, isolated, reopened
from evidence_pipeline.tempfiles import scratch_file
from evidence_pipeline_tests.support.intake_server import pdf_bytes


def _gated(file):
    return gate(reopened(file))


def timed(calls: int, work) -> list[float]:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        work()
        times.append((time.perf_counter() - start) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    calls = parser.parse_args().calls
    limits = Limits(1024**3, 60)
    with tempfile.TemporaryDirectory(prefix="evidence-bench-isolation-") as home, scratch_file(Path(home)) as file:
        file.write(pdf_bytes(3))
        file.flush()
        rows = {
            "gate, in process": timed(calls, lambda: gate(file)),
            "gate, in a worker process": timed(calls, lambda: isolated(limits, _gated, file)),
            "nothing, in a worker process": timed(calls, lambda: isolated(limits, int)),
        }
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(f"{calls} calls each; parent max RSS {rss} MiB")
    for name, times in rows.items():
        cuts = statistics.quantiles(times, n=10)
        print(f"{name:<30} median {statistics.median(times):7.2f} ms   p90 {cuts[8]:7.2f} ms")


if __name__ == "__main__":
    main()
