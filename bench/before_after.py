"""Any bench of this folder before and after a change, in one run: the bench is run alternately on the code
before (``--before``: a git ref, or a folder holding a copy of the code) and on this checkout, ``--rounds`` times
each (before, after, before, after, …), and the figures it prints are tabled side by side with their median.
Alternating spreads a shared machine's drift over both sides, so the ratio of medians is the change's, not the
hour's.

Both sides run with this checkout's virtual environment (the dependencies are this checkout's: a ref whose lock
file differs is compared with today's libraries, which the table's header says). A figure is any line of the
bench's output that ``--figure`` matches: a regular expression whose first group is a number, e.g.
``'ratio analyst / raw throughput, everything counted: ([0-9.]+)'``; several ``--figure``s table several figures.

Usage: `uv run python bench/before_after.py --before 9bcb900 --rounds 2 --figure REGEX [--figure REGEX …]
-- bench/throughput.py --tenants 20 --months 3`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="git ref of the code before the change, or its folder")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each side, alternating")
    parser.add_argument("--figure", action="append", required=True, help="regex whose first group is a number")
    parser.add_argument("bench", nargs=argparse.REMAINDER, help="-- the bench script and its arguments")
    args = parser.parse_args()
    bench = args.bench[1:] if args.bench[:1] == ["--"] else args.bench
    if not bench:
        parser.error("name the bench after --, e.g. -- bench/throughput.py --tenants 20 --months 3")
    figures = [re.compile(pattern) for pattern in args.figure]
    readings = {"before": [], "after": []}
    with _checkout(args.before) as before:
        for round_number in range(1, args.rounds + 1):
            for side, root in (("before", before), ("after", REPO)):
                print(f"== round {round_number}, {side}: {' '.join(bench)}", flush=True)
                readings[side].append(_run(root, bench, figures))
        same_lock = (before / "uv.lock").read_bytes() == (REPO / "uv.lock").read_bytes()
    print(
        f"\nbefore {args.before}, after this checkout; {args.rounds} alternating rounds; "
        f"{'the same lock file' if same_lock else 'the lock file differs: both sides ran with the after side'}"
        "'s dependencies"
    )
    print(f"{'figure':<64} {'before (runs; median)':>28} {'after (runs; median)':>28} {'after/before':>12}")
    for index, figure in enumerate(figures):
        sides = [[run[index] for run in readings[side] if run[index] is not None] for side in ("before", "after")]
        medians = [statistics.median(values) if values else None for values in sides]
        cells = [
            f"{' '.join(f'{v:g}' for v in values)}; {m:g}" if m is not None else "not printed"
            for values, m in zip(sides, medians, strict=True)
        ]
        change = f"{medians[1] / medians[0]:.2f}" if None not in medians and medians[0] else "-"
        print(f"{figure.pattern[:64]:<64} {cells[0]:>28} {cells[1]:>28} {change:>12}")


def _run(root: Path, bench: list[str], figures: list[re.Pattern]) -> list[float | None]:
    """One run of the bench on the checkout at ``root``: its output passes through, the figures are picked out."""
    env = os.environ | {"PYTHONPATH": str(root)}
    process = subprocess.Popen([sys.executable, *bench], cwd=root, env=env, stdout=subprocess.PIPE, text=True)
    found: list[float | None] = [None] * len(figures)
    for line in process.stdout:
        print(line, end="", flush=True)
        for index, figure in enumerate(figures):
            if (match := figure.search(line)) and found[index] is None:
                found[index] = float(match.group(1))
    if process.wait():
        sys.exit(f"the bench failed on {root.name} (exit {process.returncode}); see its output above")
    return found


@contextlib.contextmanager
def _checkout(before: str) -> Iterator[Path]:
    """The code before the change: the folder named, or a temporary git worktree of the ref named."""
    if Path(before).is_dir():
        yield Path(before).resolve()
        return
    with tempfile.TemporaryDirectory(prefix="bench-before-") as parent:
        checkout = Path(parent) / "checkout"
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", "--quiet", str(checkout), before], check=True
        )
        try:
            yield checkout
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(checkout)], check=True)


if __name__ == "__main__":
    main()
