"""`evidence verify --package` throughput on audit packages of --bundles bundles, at PAdES B-B and B-LTA in one run.

On one fresh temporary root, for each of --levels (B-B and B-LTA by default), in a folder of its own:

1. publish: one tenant (the acme-books profile: a 48 KB report) with --bundles consecutive months ending 2025-12
   (1,200 months reach back to 1926: one tenant needs that many tenant-months for a package this large), through
   the plain-Python pipeline in --workers processes (throughput.py's sources and raw path, no Dagster), with a
   witness key configured and a checkpoint published after each of --checkpoints equal batches, so the package
   holds that many witnessed checkpoints and their consistency proofs. B-LTA signs with the tests' local TSA and
   CRLs on 127.0.0.1 (evidence_pipeline_tests/support/local_pki.py); B-B with development keys;
2. export: `evidence export --tenant T OUT`, once, as a child process (wall and CPU);
3. verify: `evidence verify --package OUT --json --require-witness WITNESS.pub.pem` with --workers processes and
   with one, --reps times each, alternating between the levels and the worker counts so that noise from other
   processes on a shared machine hits every row alike: every PAdES signature, DSSE statement, inclusion and
   consistency proof and checkpoint (and witness) signature is checked. Each run must report ok for every bundle.
   Prints the median wall time as bundles/s, and the CPU (user + sys of the child and its workers, from
   getrusage) in seconds and in milliseconds per bundle, which a busy machine barely moves.

Usage: `make bench-package` or `uv run python bench/package_verify.py [--bundles 1200 --reps 3 --levels B-B B-LTA]`;
`--smoke` is a quick check of the same path (48 bundles, 4 checkpoints, one run of each).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from cli_verify import EVIDENCE, child_cpu
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from throughput import publish_sources, run_raw

from evidence_pipeline.audit.checkpoints import publish_checkpoint
from evidence_pipeline.audit.package import open_package
from evidence_pipeline.config import Settings
from evidence_pipeline.models import TenantMonth
from evidence_pipeline.runtime import runtime_for

TENANT = "bench-t000"  # throughput.py's profile of tenant 0: acme-books


def months(count: int) -> list[TenantMonth]:
    """``count`` consecutive months ending 2025-12."""
    return [TenantMonth(TENANT, f"{2025 - i // 12}-{12 - i % 12:02d}") for i in reversed(range(count))]


def witness_key(folder: Path) -> tuple[Path, Path]:
    """An Ed25519 witness key of its own (0700 folder, 0600 file), apart from the keys directory."""
    folder.mkdir(mode=0o700)
    key = ed25519.Ed25519PrivateKey.generate()
    private, public = folder / "witness.key", folder / "witness.pub.pem"
    fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
    public.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return private, public


def publish(env: dict[str, str], partitions: list[TenantMonth], batches: int, workers: int) -> float:
    """Every bundle, with a witnessed checkpoint after each batch; seconds taken."""
    runtime = runtime_for(Settings.from_env(env))
    size = -(-len(partitions) // batches)
    seconds = 0.0
    for start in range(0, len(partitions), size):
        seconds += run_raw(env, partitions[start : start + size], workers)[0]
        started = time.perf_counter()
        publish_checkpoint(runtime.ledger, runtime.archive, runtime.keyring, runtime.witness_key)
        seconds += time.perf_counter() - started
    return seconds


def package(root: Path, level: str, base: dict[str, str], partitions: list[TenantMonth], args) -> Path:
    """Publish and export the tenant's bundles at ``level`` under ``root``; the package's folder."""
    env = base | {"EVIDENCE_HOME": str(root / "home"), "EVIDENCE_SOURCES_URI": str(root / "sources")}
    with contextlib.ExitStack() as stack:
        if level != "B-B":
            from evidence_pipeline_tests.support.local_pki import LocalPki  # the tests' TSA and CRLs

            pki = stack.enter_context(LocalPki())
            env |= {
                "EVIDENCE_KEYS_DIR": str(pki.provision(root / "keys")),
                "EVIDENCE_PADES_LEVEL": level,
                "EVIDENCE_TSA_URL": pki.tsa_url,
                "EVIDENCE_GENERATE_DEV_KEYS": "0",
            }
        print(
            f"{level}: publishing {len(partitions)} source revisions and their bundles "
            f"({partitions[0].period}..{partitions[-1].period}) with {args.checkpoints} witnessed checkpoints ...",
            flush=True,
        )
        publish_sources(env, partitions, args.workers)
        made_s = publish(env, partitions, args.checkpoints, args.workers)
    print(f"{level}: {len(partitions)} bundles published in {made_s:.1f} s", flush=True)
    out = root / "package"
    cpu, wall, result = child_cpu([EVIDENCE, "export", "--tenant", TENANT, str(out)], env)
    if result.returncode != 0:
        sys.exit(f"{level} export: exit {result.returncode}: {result.stderr[-500:]}")
    index = open_package(str(out))[1]  # the signed index's predicate, its signature verified
    files = [path for path in out.rglob("*") if path.is_file()]
    print(
        f"{level} export: {wall:.1f} s wall, {cpu:.1f} s CPU: {len(index.bundles)} bundles, "
        f"{len(index.checkpoints)} checkpoints, {len(index.consistency)} consistency proofs, "
        f"{len(files):,} files, {sum(p.stat().st_size for p in files) / 2**20:.1f} MB\n",
        flush=True,
    )
    return out


def verify_row(
    label: str, command: list[str], env: dict[str, str], bundles: int, walls: list[float], cpus: list[float]
) -> None:
    cpu, wall, result = child_cpu(command, env)
    report = json.loads(result.stdout) if result.stdout.startswith("{") else {}
    good = result.returncode == 0 and report.get("ok") and len(report.get("bundles", [])) == bundles
    if not good or not all(bundle["ok"] for bundle in report["bundles"]):
        sys.exit(f"{label}: exit {result.returncode}, codes {report.get('codes')}: {result.stderr[-500:]}")
    walls.append(wall)
    cpus.append(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundles", type=int, default=1200)
    parser.add_argument("--checkpoints", type=int, default=12, help="witnessed checkpoints published on the way")
    parser.add_argument("--reps", type=int, default=3, help="runs of each verification")
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument(
        "--levels",
        nargs="+",
        default=["B-B", "B-LTA"],
        choices=["B-B", "B-LTA"],
        help="PAdES levels of the packages, each verified in the same run",
    )
    parser.add_argument("--smoke", action="store_true", help="48 bundles, 4 checkpoints, one run of each")
    args = parser.parse_args()
    if args.smoke:
        args.bundles, args.checkpoints, args.reps = 48, 4, 1

    root = Path(tempfile.mkdtemp(prefix="evidence-bench-package-"))
    print(f"working in {root} (removed when the benchmark succeeds)", flush=True)
    private, public = witness_key(root / "witness")
    base = dict(os.environ, EVIDENCE_WITNESS_KEY=str(private))
    partitions = months(args.bundles)
    packages = {level: package(root / level, level, base, partitions, args) for level in dict.fromkeys(args.levels)}

    # The verifier gets nothing but the package: no EVIDENCE_* settings, and a home that does not exist.
    clean = {k: v for k, v in os.environ.items() if not k.startswith("EVIDENCE_")} | {
        "EVIDENCE_HOME": str(root / "nothing-here")
    }
    rows = {(level, workers): ([], []) for level in packages for workers in dict.fromkeys([args.workers, 1])}
    for _ in range(args.reps):  # alternating, so that noise from other processes hits every row alike
        for (level, workers), (walls, cpus) in rows.items():
            command = [
                EVIDENCE,
                "verify",
                "--package",
                str(packages[level]),
                "--json",
                "--require-witness",
                str(public),
                "--workers",
                str(workers),
            ]
            verify_row(f"{level} --workers {workers}", command, clean, len(partitions), walls, cpus)
    print(
        f"verify --package of {len(partitions)} bundles, median of {args.reps} runs "
        f"{'wall s':>8} {'bundles/s':>10} {'CPU s':>8} {'CPU ms/bundle':>14} {'min':>8} {'max':>8}"
    )
    for (level, workers), (walls, cpus) in rows.items():
        wall, cpu = statistics.median(walls), statistics.median(cpus)
        print(
            f"{f'{level}, evidence verify --package --workers {workers}':<52} {wall:>8.2f} "
            f"{len(partitions) / wall:>10.1f} {cpu:>8.2f} {cpu / len(partitions) * 1000:>14.1f} "
            f"{min(walls):>8.2f} {max(walls):>8.2f}",
            flush=True,
        )
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
