"""Redaction on every file of the real-world corpus the gate accepts
(evidence_pipeline_tests/support/real_corpus.py): the first page, with targets chosen from its own text, judged by
pdftotext and Tesseract. Compares each file's outcome with the committed table (``real_corpus_outcomes.json``, its
``redact`` entries) and reports the figures: files, producers, redacted / refused by code / leaked / crashed, seconds
per file and in all.

    .venv/bin/python bench/real_corpus_redaction.py [--write [--resume]] [--only KEY ...]
    .venv/bin/python bench/real_corpus_redaction.py --baseline DIR

Files run one producer at a time, round robin (the first file of every producer, then the second, ...), so a run
cut short has still covered the producers. ``--write`` rewrites each file's entry in the table as it is done
(review the diff); ``--resume`` skips the files whose entry this run's rules already wrote. ``--baseline DIR`` (a
checkout of older code, e.g. ``git worktree add --detach DIR 9bcb900``) redacts the table's targets with DIR's code
in a fresh process, file by file into ``bench/results/real_corpus_redaction_baseline.json`` (resumed), and reports
its figures beside the table's over the same files.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# by its path: with --baseline the package evidence_pipeline (and evidence_pipeline_tests) come from DIR
_spec = importlib.util.spec_from_file_location(
    "real_corpus", ROOT / "evidence_pipeline_tests" / "support" / "real_corpus.py"
)
real_corpus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(real_corpus)
BASELINE = ROOT / "bench" / "results" / "real_corpus_redaction_baseline.json"


def figures(table: dict[str, dict], outcomes: dict[str, str]) -> str:
    families = {real_corpus.producer_family(table[key]["producer"]) for key in outcomes}
    # a refused job publishes nothing: what its unpublished derivative shows ("refused:X+leaked:...") is no leak
    counts = collections.Counter(outcome.split("+")[0] for outcome in outcomes.values())
    return f"{len(outcomes)} files, {len(families)} producers: " + ", ".join(
        f"{outcome} {n}" for outcome, n in sorted(counts.items())
    )


def round_robin(table: dict[str, dict], keys: list[str]) -> list[str]:
    """``keys``, the first of each producer family first, then the second of each, and so on."""
    by_family: dict[str, list[str]] = collections.defaultdict(list)
    for key in sorted(keys):
        by_family[real_corpus.producer_family(table[key]["producer"])].append(key)
    rounds = max((len(members) for members in by_family.values()), default=0)
    return [members[n] for n in range(rounds) for _, members in sorted(by_family.items()) if n < len(members)]


def _judge(baseline: Path) -> None:
    """--judge (in DIR's environment): redact each file of the table with its targets, into ``baseline``."""
    table = json.loads(real_corpus.OUTCOMES.read_text())
    done = json.loads(baseline.read_text()) if baseline.is_file() else {}
    paths = real_corpus.fetch()
    keys = [
        key
        for key in round_robin(table, [k for k in table if table[k].get("redact", {}).get("targets")])
        if key not in done
    ]
    for n, key in enumerate(keys, 1):
        done[key] = real_corpus.redaction(
            paths[key], table[key]["redact"]["targets"], real_corpus.languages_of(table[key])
        )
        baseline.write_text(json.dumps(done, indent=1, sort_keys=True) + "\n")
        print(f"baseline {n}/{len(keys)} {key}: {done[key]}", file=sys.stderr)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the table's redaction entries, file by file")
    parser.add_argument("--resume", action="store_true", help="skip the files this run's rules already wrote")
    parser.add_argument("--only", nargs="+", metavar="KEY", help="only these files")
    parser.add_argument("--baseline", type=Path, metavar="DIR", help="run DIR's code on the table's targets")
    parser.add_argument("--judge", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.judge:
        _judge(args.judge)
        return 0
    if args.baseline:
        BASELINE.parent.mkdir(exist_ok=True)
        subprocess.run(
            [sys.executable, __file__, "--judge", str(BASELINE)],
            check=True,
            env=os.environ | {"PYTHONPATH": str(args.baseline.resolve())},
        )
        table, theirs = json.loads(real_corpus.OUTCOMES.read_text()), json.loads(BASELINE.read_text())
        print(f"baseline {args.baseline.name}: {figures(table, theirs)}")
        print(f"this tree's table: {figures(table, {key: table[key]['redact']['outcome'] for key in theirs})}")
        for key in sorted(theirs):
            if theirs[key] != table[key]["redact"]["outcome"]:
                print(f"  {key}: {theirs[key]} -> {table[key]['redact']['outcome']}")
        return 0
    committed = json.loads(real_corpus.OUTCOMES.read_text())
    table = json.loads(real_corpus.OUTCOMES.read_text())
    paths = real_corpus.fetch()
    keys = [key for key in (args.only or table) if table[key]["outcomes"]["inspect"] == "accepted"]
    if args.resume:
        keys = [key for key in keys if "targets" not in table[key].get("redact", {})]
    seconds = {}
    for key in round_robin(table, keys):
        start = time.perf_counter()  # the targets' reading (OCR for a scan) and the redaction
        real_corpus.add_redactions(table, paths, real_corpus.redaction_jobs(table, paths, [key]))
        seconds[key] = time.perf_counter() - start
        if args.write:
            real_corpus.write(table)
    total = sum(seconds.values())
    ours = {key: table[key]["redact"]["outcome"] for key in seconds}
    print(f"this tree: {figures(table, ours)}")
    print(
        f"time: {total:.0f} s for {len(seconds)} files, {total / max(len(seconds), 1):.1f} s a file "
        f"(slowest {max(seconds.values(), default=0):.1f} s)"
    )
    changed = [key for key in seconds if committed[key].get("redact") != table[key].get("redact")]
    for key in changed:
        print(f"changed {key}: {committed[key].get('redact')} -> {table[key]['redact']}")
    return 1 if changed and not args.write else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
