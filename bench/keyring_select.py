"""What key rotation costs the signing path and `evidence verify`, in one run.

The signing path re-reads which generation of keys is active before every bundle (`KeyDirectory.select`: a shared
flock and a stat of keyring.json; the document is parsed and its signature checked only when it changed). This
prints the cost of that per bundle, of the re-read after a rotation, and, for scale, of one PAdES B-B signature of a
demo report; then the cost of `verify_bundle` on one bundle with the keyring's checks and, on a copy of the archive
without keyring documents, without them (the layout from before key rotation).
Usage: `make bench-keys` or `uv run python bench/keyring_select.py [--reps 2000]`.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from evidence_pipeline.audit.verify import verify_bundle
from evidence_pipeline.config import Settings
from evidence_pipeline.models import TenantMonth
from evidence_pipeline.monthly.pipeline import run_tenant_month
from evidence_pipeline.runtime import RunInfo, Runtime
from evidence_pipeline.signing.pades import sign_pdf
from evidence_pipeline.signing.rotation import STATE
from evidence_pipeline.store.local import LocalStore
from evidence_pipeline.synthetic.demo_data import demo_transactions
from evidence_pipeline_tests.support.fixture_sources import publish_revision


def _timed(call, reps: int) -> list[float]:
    values = []
    for _ in range(reps):
        start = time.perf_counter()
        call()
        values.append((time.perf_counter() - start) * 1e6)
    return values


def _row(name: str, values: list[float]) -> None:
    p95 = statistics.quantiles(values, n=20)[-1] if len(values) >= 20 else max(values)
    print(f"{name:<48} {statistics.median(values):>12.1f} {p95:>10.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2000)
    args = parser.parse_args()
    tenant_month = TenantMonth("acme-books", "2026-10")
    with tempfile.TemporaryDirectory() as home:
        runtime = Runtime.from_settings(Settings.from_env({"EVIDENCE_HOME": home}))
        publish_revision(runtime, tenant_month, demo_transactions(tenant_month))
        publication = run_tenant_month(runtime, tenant_month, RunInfo("bench"))
        keys = runtime.keys
        report = runtime.staging.get(f"reports/{publication.unsigned_sha256}.pdf")

        unchanged = _timed(keys.select, args.reps)
        state = runtime.settings.keys_dir / STATE

        def after_change() -> None:
            state.touch()  # a new mtime: the next select re-reads, re-verifies and re-publishes (put-once, converges)
            keys.select()

        changed = _timed(after_change, max(20, args.reps // 20))
        signing = _timed(lambda: sign_pdf(report, keys.active), 20)

        keyring_mode = _timed(lambda: verify_bundle(runtime.archive, publication.bundle_key), 50)
        legacy_root = Path(home) / "legacy-archive"
        shutil.copytree(runtime.archive.root, legacy_root)
        for document in (legacy_root / "keys").glob("keyring-*.json"):
            document.chmod(0o644)
            document.unlink()
        legacy = LocalStore(legacy_root)
        assert verify_bundle(legacy, publication.bundle_key).ok
        legacy_mode = _timed(lambda: verify_bundle(legacy, publication.bundle_key), 50)

    print(f"{'':<48} {'median µs':>12} {'p95 µs':>10}")
    _row("select(): keyring.json unchanged (per bundle)", unchanged)
    _row("select(): after keyring.json changed (once)", changed)
    _row("one PAdES B-B signature of the report", signing)
    _row("verify_bundle, keyring checks", keyring_mode)
    _row("verify_bundle, no keyring (before rotation)", legacy_mode)
    print(f"per-bundle re-read / B-B signature: {statistics.median(unchanged) / statistics.median(signing):.5f}")


if __name__ == "__main__":
    main()
