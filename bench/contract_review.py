"""Contract review at volume: N lease contracts (short renewals and 40-page leases, every defect of
lease_contracts.DEFECTS) through the front door and Dagster's dispatch, against the same review work called in a
plain loop with the same parallelism, in one run. The contracts go in ``--rounds`` chunks, each through both, the
loop first in even rounds and dispatch first in odd ones (ABBA): a shared machine's speed drifts by a third within
minutes, and running all of one before all of the other weighed that drift on one side only.

1. The loop, on a root of its own: for each contract the worker-side gate, the `contract-review` processor and,
   for an approved contract, the service's PAdES approval signature (the work a review is; no store, statement or
   ledger), in this process or in ``--parallelism`` forked ones.
2. The front door: `evidence intake serve --workers 1` on a fresh root; every contract uploaded and a
   `contract-review` job submitted over HTTP (timed apart: admission).
3. Dagster's dispatch, timed: the document sensor's tick, then its page runs (``--parallelism`` pages, each run in
   a process of its own, `execute_in_process`): lease, gate, review, approval, put-once outputs and DSSE statement,
   the stage events and the fenced commit of every job.

It prints contracts/s of the loop and of dispatch, their ratio (target >= 0.8) overall and per round, review
p50/p95 per workload class (the loop's time per contract; dispatch's from the job's lease to its commit, from the
job status), the CPU seconds of each (this process and the page runs it forked; the load of a shared machine moves
them far less than the wall time) and their ratio, and the load average before and after. Every job must end with
the decision its contract is known to get.

    uv run python bench/contract_review.py [--contracts 1000 --long-every 10 --long-pages 40 --parallelism 1
                                            --rounds 4]
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from frontdoor import cpu_seconds, front_door, in_parallel  # noqa: E402  (bench/frontdoor.py: the front door and dispatch)

from evidence_pipeline.config import Settings  # noqa: E402
from evidence_pipeline.documents import ruleset as rulesets  # noqa: E402
from evidence_pipeline.documents.gate import gate  # noqa: E402
from evidence_pipeline.documents.registry import ProcessorInput  # noqa: E402
from evidence_pipeline.documents.review import review_contract  # noqa: E402
from evidence_pipeline.documents.worker import APPROVAL_FIELD  # noqa: E402
from evidence_pipeline.errors import EvidenceError  # noqa: E402
from evidence_pipeline.operations.stats import percentile  # noqa: E402
from evidence_pipeline.runtime import Runtime  # noqa: E402
from evidence_pipeline.signing.pades import sign_pdf  # noqa: E402
from evidence_pipeline.synthetic.lease_contracts import lease_contract  # noqa: E402

SHORT, LONG = "short renewal", "long lease"
_KEYRING = []  # the loop's signing keys, set before its workers fork


def workload(contracts: int, long_every: int, long_pages: int) -> list[tuple[str, bytes, str]]:
    """(class, PDF, expected outcome) of every contract: each ``long_every``-th a long lease."""
    items = []
    for n in range(contracts):
        long = long_every > 0 and n % long_every == long_every - 1
        contract = lease_contract(n, pages=long_pages if long else 1)
        items.append((LONG if long else SHORT, contract.pdf, contract.expected.decision))
    return items


def review_once(item: tuple[str, bytes, str]) -> tuple[str, float, str]:
    """(class, seconds, outcome) of one contract's review in the loop."""
    kind, pdf, _ = item
    started = time.perf_counter()
    file = io.BytesIO(pdf)
    try:
        document = ProcessorInput("doc_bench", "0" * 64, len(pdf), gate(file), file)
        result = review_contract([document], rulesets.pin(rulesets.IN_FORCE), {})
    except EvidenceError as error:  # REVIEW_INPUT_INVALID: an outcome, as in the worker
        return kind, time.perf_counter() - started, error.code
    if result.signed:
        file.seek(0)
        sign_pdf(file, _KEYRING[0], field_name=APPROVAL_FIELD, reason="Approved by contract-review")
    return kind, time.perf_counter() - started, result.summary["decision"]


def loop_round(chunk: list, parallelism: int, outcomes: list) -> tuple[float, float]:
    """(wall, CPU) seconds of the loop over ``chunk``; its outcomes go to ``outcomes``."""
    started, cpu = time.perf_counter(), cpu_seconds()
    outcomes.extend(in_parallel(review_once, chunk, parallelism))
    return time.perf_counter() - started, cpu_seconds() - cpu


def dispatch_round(door, chunk: list, parallelism: int, jobs: list) -> tuple[float, float, float]:
    """(admission, dispatch wall, dispatch CPU) seconds of ``chunk`` uploaded and submitted as contract-review
    jobs (they go to ``jobs``), then dispatched."""
    started = time.perf_counter()
    for _, pdf, _ in chunk:
        jobs.append(door.submit(f"bench-{len(jobs)}", {"operation": "contract-review", "inputs": [door.upload(pdf)]}))
    return time.perf_counter() - started, *door.dispatch(parallelism)


def outcome_of(status: dict) -> str:
    return status["findings"]["decision"] if status["findings"] else status["reason"]


def latencies(pairs: list[tuple[str, float]]) -> dict[str, dict[str, float]]:
    classes = sorted({kind for kind, _ in pairs})
    return {
        kind: {
            "n": len(values),
            "p50_ms": round(percentile(values, 50) * 1000, 1),
            "p95_ms": round(percentile(values, 95) * 1000, 1),
        }
        for kind in classes
        for values in [[seconds for k, seconds in pairs if k == kind]]
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--contracts", type=int, default=1000)
    parser.add_argument("--long-every", type=int, default=10, help="every n-th contract is a long lease")
    parser.add_argument("--long-pages", type=int, default=40)
    parser.add_argument("--parallelism", type=int, default=1)
    parser.add_argument(
        "--rounds",
        type=int,
        default=4,
        help="the contracts in this many chunks, the loop and dispatch taking turns to go first",
    )
    args = parser.parse_args()
    load_before = os.getloadavg()
    items = workload(args.contracts, args.long_every, args.long_pages)
    expected = [item[2] for item in items]
    size = math.ceil(len(items) / args.rounds)
    chunks = [items[start : start + size] for start in range(0, len(items), size)]

    loop, jobs, rounds = [], [], []
    with (
        tempfile.TemporaryDirectory(prefix="bench-review-loop-") as loop_home,
        front_door("bench-review-", size, args.parallelism) as door,
    ):
        _KEYRING.append(Runtime.from_settings(Settings.from_env({"EVIDENCE_HOME": loop_home})).keyring)
        for number, chunk in enumerate(chunks):
            loop_first = number % 2 == 0  # ABBA: a drift of the machine's speed weighs on both alike
            if loop_first:
                looped = loop_round(chunk, args.parallelism, loop)
            dispatched = dispatch_round(door, chunk, args.parallelism, jobs)
            if not loop_first:
                looped = loop_round(chunk, args.parallelism, loop)
            rounds.append((looped, dispatched))
        statuses = door.states(jobs)
    if [decision for _, _, decision in loop] != expected:
        raise SystemExit("the loop's decisions differ from the contracts' known ones")
    if [outcome_of(status) for status in statuses] != expected:
        raise SystemExit("the jobs' outcomes differ from the contracts' known ones")
    loop_seconds, loop_cpu = (sum(looped[k] for looped, _ in rounds) for k in (0, 1))
    admission_seconds, dispatch_seconds, dispatch_cpu = (
        sum(dispatched[k] for _, dispatched in rounds) for k in (0, 1, 2)
    )
    worked = [
        (kind, (datetime.fromisoformat(s["finished_at"]) - datetime.fromisoformat(s["started_at"])).total_seconds())
        for (kind, _, _), s in zip(items, statuses)
    ]
    print(
        json.dumps(
            {
                "contracts": args.contracts,
                "long_leases": sum(kind == LONG for kind, _, _ in items),
                "long_pages": args.long_pages,
                "parallelism": args.parallelism,
                "loop_per_second": round(args.contracts / loop_seconds, 2),
                "admitted_per_second": round(args.contracts / admission_seconds, 2),
                "dispatch_per_second": round(args.contracts / dispatch_seconds, 2),
                "ratio_dispatch_to_loop": round(loop_seconds / dispatch_seconds, 2),
                "loop_review": latencies([(kind, seconds) for kind, seconds, _ in loop]),
                "dispatch_lease_to_commit": latencies(worked),
                "seconds": {
                    "loop": round(loop_seconds, 1),
                    "admission": round(admission_seconds, 1),
                    "dispatch": round(dispatch_seconds, 1),
                },
                "cpu_seconds": {"loop": round(loop_cpu, 1), "dispatch": round(dispatch_cpu, 1)},
                "cpu_ratio_dispatch_to_loop": round(loop_cpu / dispatch_cpu, 2),
                "rounds": len(rounds),
                "ratio_per_round_wall_cpu": [
                    [round(looped[0] / dispatched[1], 2), round(looped[1] / dispatched[2], 2)]
                    for looped, dispatched in rounds
                ],
                "load_average_before": [round(x, 2) for x in load_before],
                "load_average_after": [round(x, 2) for x in os.getloadavg()],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
