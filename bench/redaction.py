"""Redaction cost: the first pass (find + remove + write) and the second pass (verify) of 10-page applications in
a plain loop, typed and with two scanned pages (OCR in both passes); what OCR costs per scanned page; the same
number of typed redactions through the front door and Dagster (`evidence intake serve`, then the document sensor's
tick and the page run, in process) against that loop; and the peak RSS and time of redacting and verifying one
300-page typed application and one 300-page scanned application, each in a fresh process.

    uv run python bench/redaction.py [--applications 20 --pages 10 --large-pages 300] [--baseline DIR]

With ``--baseline DIR`` (a checkout of the code before a change, e.g. `git worktree add DIR main`), the loops over
typed and scanned applications run in the same run twice, each in a fresh process: once on DIR's code, once on
this tree's, and both are reported.

The last lines are the cost's figures in plain words (seconds and pages per second of both passes, typed and with
scanned pages; the long scan's pages per second and peak RSS), for `before_after.py`. With ``--figures-only`` only
the loops and the long scan run (``--large-pages 0``: no long scan), through the API the code before issue 46
(9bcb900) shares, so this file, given by its absolute path, measures that code too:

    uv run python bench/before_after.py --before 9bcb900 --rounds 3 --figure 'typed.*: ([0-9.]+) s/page' \
        --figure 'typed.* ([0-9.]+) pages/s' --figure 'scanned pages.*: ([0-9.]+) s/page' \
        --figure 'scanned pages.* ([0-9.]+) pages/s' --figure 'typed.*CPU ([0-9.]+)' \
        --figure 'scanned pages.*CPU ([0-9.]+)' \
        -- "$PWD/bench/redaction.py" --figures-only --applications 5 --large-pages 0
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytesseract

from evidence_pipeline.documents import ocr, redact, templates
from evidence_pipeline.documents.gate import gate
from evidence_pipeline.documents.redaction_check import verify_derivative
from evidence_pipeline.documents.registry import ProcessorInput
from evidence_pipeline.synthetic.rental_applications import (
    long_application,
    organization_template,
    program_template,
    scanned_application,
    scanned_page,
)

SCANNED = frozenset({3, 7})  # the scanned pages of the 10-page application

sys.path.insert(0, str(Path(__file__).resolve().parent))
from frontdoor import front_door  # noqa: E402  (bench/frontdoor.py: the front door and Dagster's dispatch)


def pinned() -> dict:
    merged = templates.merge(
        templates.parse(organization_template(), "organization"),
        templates.parse(program_template(scanned_page=None), "program"),
    )
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


def through_dagster(data: bytes, count: int) -> float:
    """Seconds from the sensor's tick to the last of ``count`` redact jobs succeeded, each accepted over HTTP by
    `evidence intake serve` (the one application, ``count`` idempotency keys) on a fresh root."""
    with front_door("bench-redaction-", count, 1) as door:
        door.approved_template(organization_template(), program_template(scanned_page=None))
        document_id = door.upload(data)
        jobs = [
            door.submit(
                f"bench-{i}", {"operation": "redact", "inputs": [document_id], "options": {"active_content": "flag"}}
            )
            for i in range(count)
        ]
        elapsed, _ = door.dispatch(1)
        states = {status["state"] for status in door.states(jobs)}
    if states != {"succeeded"}:
        raise SystemExit(f"redact jobs ended {sorted(states)}")
    return elapsed


def rate(data: bytes, pin: dict, count: int) -> dict:
    passes(data, pin)  # a warm-up, not timed: the first run loads fonts and Tesseract's models
    cpu = _cpu_seconds()
    times = [passes(data, pin) for _ in range(count)]
    cpu = _cpu_seconds() - cpu  # the gate's included: small beside both passes
    first, second = sum(t[0] for t in times), sum(t[1] for t in times)
    return {
        "removed_per_application": times[0][2]["removed"],
        "first_pass_per_second": round(count / first, 2),
        "second_pass_per_second": round(count / second, 2),
        "both_per_second": round(count / (first + second), 2),
        "seconds": first + second,
        "cpu_seconds": cpu,
        "applications": count,
    }


def rates(applications: int, pages: int) -> dict:
    pin = pinned()
    return {
        "typed": rate(long_application(pages), pin, applications),
        "scanned": rate(scanned_application(pages, SCANNED), pin, max(1, applications // 4)),
    }


def rates_on(code: str | None, applications: int, pages: int) -> dict:
    """``rates`` in a fresh process, on the code under ``code`` (a checkout's root) or this tree's."""
    command = [sys.executable, __file__, "--rates-only", "--applications", str(applications), "--pages", str(pages)]
    environment = {**os.environ, "PYTHONPATH": code} if code else None
    return json.loads(subprocess.run(command, capture_output=True, text=True, check=True, env=environment).stdout)


def figures(rated: dict, pages: int, scan: dict | None) -> None:
    """The cost in plain lines: both passes' seconds per page and pages per second."""
    for kind, name in (
        ("typed", f"typed {pages}-page application"),
        ("scanned", f"{pages}-page application with scanned pages {sorted(SCANNED)}"),
    ):
        per_page = rated[kind]["seconds"] / (rated[kind]["applications"] * pages)
        cpu = rated[kind]["cpu_seconds"] / (rated[kind]["applications"] * pages)
        print(f"{name}, both passes: {per_page:.4f} s/page, {1 / per_page:.2f} pages/s, CPU {cpu:.4f} s/page")
    if scan is not None:
        rate = scan["pages"] / (scan["first_pass_s"] + scan["second_pass_s"])
        print(f"{scan['pages']}-page scan, both passes: {rate:.3f} pages/s, peak RSS {scan['peak_rss_mb']} MB")


def large(pages: int, scanned: bool) -> dict:
    """Peak RSS and seconds of both passes of one long application, in a fresh process."""
    command = [sys.executable, __file__, "--large-only", "--large-pages", str(pages)] + (["--scanned"] * scanned)
    return json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)


def _cpu_seconds() -> float:
    """This process's CPU seconds and its waited-for children's (Tesseract runs as a child): the load moves them
    far less than wall time."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def ocr_floor() -> dict:
    """CPU seconds of one typed page: rendered by pdfium, and read once by Tesseract at 300, 200 and 150 dpi (the
    least a design that OCRs every page pays, per pass); beside both passes' CPU per typed page."""
    data = long_application(2)
    started = _cpu_seconds()
    [(_, page), _] = list(ocr.rendered_pages(data))
    floor = {"render_s": round((_cpu_seconds() - started) / 2, 3)}
    for dpi in (300, 200, 150):
        image = (
            page
            if dpi == ocr.PAGE_DPI
            else page.resize((page.width * dpi // ocr.PAGE_DPI, page.height * dpi // ocr.PAGE_DPI))
        )
        started = _cpu_seconds()
        pytesseract.image_to_data(image, config="--psm 3")
        floor[f"tesseract_{dpi}_dpi_s"] = round(_cpu_seconds() - started, 3)
    return floor | {"both_passes_per_page_s": passes_cpu()}


def passes_cpu(pages: int = 2) -> float:
    """CPU seconds per page of both passes over a typed application (after one warm-up run)."""
    data, pin = long_application(pages), pinned()
    passes(data, pin)
    started = _cpu_seconds()
    passes(data, pin)
    return round((_cpu_seconds() - started) / pages, 3)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--applications", type=int, default=20)
    parser.add_argument("--pages", type=int, default=10)
    parser.add_argument("--large-pages", type=int, default=300)
    parser.add_argument("--large-only", action="store_true", help=argparse.SUPPRESS)  # the child process
    parser.add_argument("--scanned", action="store_true", help=argparse.SUPPRESS)  # the child: every page scanned
    parser.add_argument("--rates-only", action="store_true", help=argparse.SUPPRESS)  # the child: the loops
    parser.add_argument("--cpu-only", action="store_true", help=argparse.SUPPRESS)  # the child: CPU per typed page
    parser.add_argument("--baseline", help="a checkout of the code before, measured in the same run")
    parser.add_argument("--no-dagster", action="store_true", help="skip the front door and Dagster")
    parser.add_argument("--figures-only", action="store_true", help="only the loops and the long scan's figures")
    args = parser.parse_args()
    pin = pinned()
    if args.figures_only:
        figures(
            rates(args.applications, args.pages),
            args.pages,
            large(args.large_pages, True) if args.large_pages else None,
        )
        return
    if args.rates_only:
        print(json.dumps(rates(args.applications, args.pages)))
        return
    if args.cpu_only:
        print(json.dumps(passes_cpu()))
        return
    if args.large_only:
        data = scanned_application(args.large_pages) if args.scanned else long_application(args.large_pages)
        first, second, _ = passes(data, pin)
        print(
            json.dumps(
                {
                    "pages": args.large_pages,
                    "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                    "first_pass_s": round(first, 1),
                    "second_pass_s": round(second, 1),
                }
            )
        )
        return
    before = rates_on(str(Path(args.baseline).resolve()), args.applications, args.pages) if args.baseline else None
    after = rates_on(None, args.applications, args.pages)
    typed, with_scans = after["typed"], after["scanned"]
    started = time.perf_counter()
    for number in range(1, 6):
        ocr.read(scanned_page(number))
    ocr_seconds = (time.perf_counter() - started) / 5
    large_typed, large_scanned = large(args.large_pages, False), large(args.large_pages, True)
    dagster_seconds = None if args.no_dagster else through_dagster(long_application(args.pages), args.applications)
    print(
        json.dumps(
            {
                "pages": args.pages,
                "applications": args.applications,
                "ocr_engine": ocr.engine(),
                "typed": {key: value for key, value in typed.items() if key != "seconds"},
                f"with_{len(SCANNED)}_scanned_pages": {
                    key: value for key, value in with_scans.items() if key != "seconds"
                },
                "ocr_seconds_per_scanned_page": round(ocr_seconds, 2),
                "cpu_per_typed_page": ocr_floor(),
                **(
                    {}
                    if dagster_seconds is None
                    else {
                        "through_intake_and_dagster_per_second": round(args.applications / dagster_seconds, 2),
                        "ratio_dagster_to_loop": round(typed["seconds"] / dagster_seconds, 2),
                    }
                ),
                **(
                    {}
                    if before is None
                    else {
                        "before": {
                            "typed": {key: value for key, value in before["typed"].items() if key != "seconds"},
                            f"with_{len(SCANNED)}_scanned_pages": {
                                k: v for k, v in before["scanned"].items() if k != "seconds"
                            },
                            "typed_seconds_after_over_before": round(typed["seconds"] / before["typed"]["seconds"], 1),
                            "both_passes_cpu_per_typed_page_s": json.loads(
                                subprocess.run(
                                    [sys.executable, __file__, "--cpu-only"],
                                    capture_output=True,
                                    text=True,
                                    check=True,
                                    env={**os.environ, "PYTHONPATH": str(Path(args.baseline).resolve())},
                                ).stdout
                            ),
                            "scanned_seconds_after_over_before": round(
                                with_scans["seconds"] / before["scanned"]["seconds"], 1
                            ),
                        }
                    }
                ),
                f"typed_{args.large_pages}_pages": large_typed,
                f"scanned_{args.large_pages}_pages": large_scanned,
            },
            indent=2,
        )
    )
    figures(after, args.pages, large_scanned)


if __name__ == "__main__":
    main()
