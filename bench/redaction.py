"""Redaction cost: the first pass (find + remove + write) and the second pass (verify) of 10-page applications in
a plain loop, and the peak RSS of redacting and verifying one 300-page application in a fresh process.

    uv run python bench/redaction.py [--applications 20 --pages 10 --large-pages 300]
"""

from __future__ import annotations

import argparse
import io
import json
import resource
import subprocess
import sys
import time

from evidence_pipeline.documents import redact, templates
from evidence_pipeline.documents.gate import gate
from evidence_pipeline.documents.redaction_check import verify_derivative
from evidence_pipeline.documents.registry import ProcessorInput
from evidence_pipeline_tests.rental_applications import long_application, organization_template, program_template


def pinned() -> dict:
    merged = templates.merge(templates.parse(organization_template(), "organization"),
                             templates.parse(program_template(scanned_page=None), "program"))
    return {"template": merged, "template_version": templates.version_id(merged)}


def passes(data: bytes, pin: dict) -> tuple[float, float, dict]:
    """(first pass s, second pass s, summary) for one application (the gate, run before both, is not timed)."""
    file = io.BytesIO(data)
    document = ProcessorInput("doc_bench", "0" * 64, len(data), gate(file, "flag"), file)
    started = time.perf_counter()
    result = redact.redact_document([document], {}, pin)
    first = time.perf_counter()
    written = {result.secret["derivative"]: io.BytesIO(result.artifacts[result.secret["derivative"]])}
    verify_derivative(written, result)
    return first - started, time.perf_counter() - first, result.summary


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--applications", type=int, default=20)
    parser.add_argument("--pages", type=int, default=10)
    parser.add_argument("--large-pages", type=int, default=300)
    parser.add_argument("--large-only", action="store_true", help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args()
    pin = pinned()
    if args.large_only:
        passes(long_application(args.large_pages), pin)
        print(json.dumps({"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
        return
    data = long_application(args.pages)
    times = [passes(data, pin) for _ in range(args.applications)]
    first, second = sum(t[0] for t in times), sum(t[1] for t in times)
    child = subprocess.run([sys.executable, __file__, "--large-only", "--large-pages", str(args.large_pages)],
                           capture_output=True, text=True, check=True)
    print(json.dumps({
        "pages": args.pages,
        "applications": args.applications,
        "removed_per_application": times[0][2]["removed"],
        "first_pass_per_second": round(args.applications / first, 2),
        "second_pass_per_second": round(args.applications / second, 2),
        "both_per_second": round(args.applications / (first + second), 2),
        f"peak_rss_mb_{args.large_pages}_pages": json.loads(child.stdout)["peak_rss_mb"],
    }, indent=2))


if __name__ == "__main__":
    main()
