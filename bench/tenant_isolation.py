"""One tenant's worst-case document never slows another: tenant `other` uploads a small document once a second,
first alone (the baseline), then while tenant `bench`'s long scanned application is redacted by Dagster's dispatch
(the sensor's tick and its page run, forked from here) on the same machine and ledger. Reports the other tenant's
upload latency (p50, p99, max, nearest rank), its failures, and the p99 ratio against its baseline (target: <= 2).

    uv run python bench/tenant_isolation.py [--seconds 30 --scanned-pages 60]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from frontdoor import front_door  # noqa: E402
from intake import tenant_token  # noqa: E402  (bench/intake.py: the front door's helpers)

from evidence_pipeline.operations.stats import percentile  # noqa: E402
from evidence_pipeline.synthetic.rental_applications import (  # noqa: E402
    application,
    organization_template,
    program_template,
    scanned_application,
)


def uploads(http: httpx.Client, until, tag: str) -> tuple[list[float], int]:
    """Once a second until ``until()`` says stop: one distinct small application; (latencies in ms, failures)."""
    latencies, failures, number = [], 0, 0
    small = application(scanned_page=False, revision=False)
    head, eof = small.rsplit(b"%%EOF", 1)
    while not until():
        started = time.perf_counter()
        data = head + f"% {tag} {number}\n%%EOF".encode() + eof  # distinct bytes: a new document each time
        try:
            answer = http.post("/v1/documents", content=data, headers={"Content-Type": "application/pdf"})
            failures += answer.status_code not in (200, 201)
        except httpx.HTTPError:
            failures += 1
        elapsed = time.perf_counter() - started
        latencies.append(elapsed * 1000)
        number += 1
        time.sleep(max(0.0, 1 - elapsed))
    return latencies, failures


def summary(latencies: list[float], failures: int) -> dict:
    return {
        "uploads": len(latencies),
        "failures": failures,
        "p50_ms": round(percentile(latencies, 50), 1),
        "p99_ms": round(percentile(latencies, 99), 1),
        "max_ms": round(max(latencies), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--scanned-pages", type=int, default=60)
    args = parser.parse_args()
    worst = scanned_application(args.scanned_pages)
    with front_door("bench-isolation-", 1, 1) as door:
        door.approved_template(organization_template(), program_template(scanned_page=None))
        token = tenant_token(door.env, "other")
        other = httpx.Client(
            base_url=str(door.http.base_url), headers={"Authorization": f"Bearer {token}"}, timeout=120
        )
        deadline = time.monotonic() + args.seconds
        baseline = uploads(other, lambda: time.monotonic() > deadline, "baseline")
        document_id = door.upload(worst)
        job = door.submit(
            "worst", {"operation": "redact", "inputs": [document_id], "options": {"active_content": "flag"}}
        )
        finished = threading.Event()
        timing: dict[str, float] = {}

        def work() -> None:
            try:
                timing["dispatch_s"] = door.dispatch(1)[0]
            finally:
                finished.set()

        worker = threading.Thread(target=work)
        worker.start()
        beside = uploads(other, finished.is_set, "beside")
        worker.join()
        [state] = door.states([job])
    base, loaded = summary(*baseline), summary(*beside)
    print(
        json.dumps(
            {
                "worst_case": f"a {args.scanned_pages}-page scanned application, redacted (OCR in both passes)",
                "worst_case_state": state["state"],
                "dispatch_s": round(timing["dispatch_s"], 1),
                "other_tenant_alone": base,
                "other_tenant_beside_the_worst_case": loaded,
                "p99_ratio": round(loaded["p99_ms"] / base["p99_ms"], 2),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
