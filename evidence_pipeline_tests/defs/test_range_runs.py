"""Range runs (BackfillPolicy.multi_run) on the instance YAMLs as committed, on real SQLite and PostgreSQL.

The storage classes of evidence_pipeline/defs/extensions/storage.py must load from the YAML, reuse their connections,
and store exactly what Dagster's own storages store; the range_runs patch must be in force and keep Dagster's errors.
"""

from pathlib import Path

import dagster
import pytest
import sqlalchemy as sa
import yaml
from dagster import (
    AssetCheckEvaluation,
    AssetCheckKey,
    AssetExecutionContext,
    AssetKey,
    AssetRecordsFilter,
    BackfillPolicy,
    MaterializeResult,
    MultiPartitionKey,
    Output,
    asset,
    asset_check,
    instance_for_test,
    materialize,
)
from dagster._core.execution.context.system import StepExecutionContext
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG
from sqlalchemy.pool import Pool

from evidence_pipeline.defs.extensions import range_runs, storage
from evidence_pipeline.defs.extensions.storage import (
    PooledPostgresEventLogStorage,
    PooledPostgresRunStorage,
    PooledSqliteEventLogStorage,
)
from evidence_pipeline.defs.partitions import tenant_month_partitions
from evidence_pipeline_tests.support.backends import new_database

REPO = Path(__file__).resolve().parents[2]
TENANTS = ["acme-books", "delta-foods", "evergreen-market"]
MONTHS = ["2026-07-01", "2026-08-01", "2026-09-01", "2026-10-01"]


@pytest.fixture(params=["sqlite", "postgres"])
def instance(request, tmp_path, monkeypatch):
    config = "dagster.yaml"
    if request.param == "postgres":
        monkeypatch.setenv("DAGSTER_PG_URL", new_database(request.getfixturevalue("postgres_url")))
        config = "dagster.production.yaml"
    overrides = yaml.safe_load((REPO / config).read_text())
    with instance_for_test(overrides=overrides, temp_dir=str(tmp_path)) as instance:
        instance.add_dynamic_partitions("tenant", TENANTS)
        yield instance


def _assets(metadata_for=lambda pk: {}):
    policy = BackfillPolicy.multi_run(100)

    @asset(partitions_def=tenant_month_partitions, backfill_policy=policy)
    def report(context: AssetExecutionContext) -> MaterializeResult:
        for pk in context.partition_keys:
            context.add_asset_metadata({"tenant": pk.keys_by_dimension["tenant"], **metadata_for(pk)}, partition_key=pk)
        return MaterializeResult()

    @asset_check(asset=report, blocking=True, partitions_def=tenant_month_partitions)
    def gate(context):
        for pk in context.partition_keys:
            yield AssetCheckEvaluation(
                asset_key=report.key, check_name="gate", passed=True, partition=pk, blocking=True
            )
        yield Output(None, output_name=context.op_execution_context.op_def.output_defs[0].name)

    @asset(partitions_def=tenant_month_partitions, backfill_policy=policy, deps=[report])
    def bundle(context: AssetExecutionContext) -> MaterializeResult:
        for pk in context.partition_keys:
            context.add_asset_metadata({"month": pk.keys_by_dimension["month"]}, partition_key=pk)
        return MaterializeResult()

    return [report, gate, bundle]


def _range_run(instance, assets, raise_on_error=True):
    first = MultiPartitionKey({"tenant": TENANTS[0], "month": MONTHS[0]})
    last = MultiPartitionKey({"tenant": TENANTS[-1], "month": MONTHS[-1]})
    tags = {ASSET_PARTITION_RANGE_START_TAG: str(first), ASSET_PARTITION_RANGE_END_TAG: str(last)}
    return materialize(assets, instance=instance, tags=tags, raise_on_error=raise_on_error)


def test_yaml_names_our_storage_classes(instance):
    if instance.event_log_storage.__class__.__module__.endswith("sqlite_event_log"):
        pytest.fail("dagster.yaml should name PooledSqliteEventLogStorage")
    assert isinstance(instance.event_log_storage, (PooledSqliteEventLogStorage, PooledPostgresEventLogStorage))
    if isinstance(instance.event_log_storage, PooledPostgresEventLogStorage):
        assert isinstance(instance.run_storage, PooledPostgresRunStorage)


def test_range_run_records_every_partition_with_its_metadata(instance):
    assert _range_run(instance, _assets(lambda pk: {"pages": 3})).success
    expected = {MultiPartitionKey({"tenant": t, "month": m}) for t in TENANTS for m in MONTHS}
    for name in ("report", "bundle"):
        records = instance.fetch_materializations(AssetRecordsFilter(asset_key=AssetKey(name)), limit=100).records
        assert sorted(r.partition_key for r in records) == sorted(expected)
    for record in instance.fetch_materializations(AssetRecordsFilter(asset_key=AssetKey("report")), limit=100).records:
        metadata = record.asset_materialization.metadata
        assert metadata["tenant"].value == record.partition_key.split("|")[1] and metadata["pages"].value == 3
    history = instance.event_log_storage.get_asset_check_execution_history(
        AssetCheckKey(AssetKey("report"), "gate"), limit=100
    )
    assert sorted(h.evaluation.partition for h in history) == sorted(expected) and all(
        h.evaluation.passed for h in history
    )


def test_storage_reuses_its_connections(instance):
    """Dagster's stock storages open a connection per storage call (thousands per range run); ours keep them."""
    connects = []

    def count(*_):
        connects.append(1)

    sa.event.listen(Pool, "connect", count)
    try:
        result = _range_run(instance, _assets())
    finally:
        sa.event.remove(Pool, "connect", count)
    events = len(instance.all_logs(result.run_id))
    # Stock storages: ~7 connections per event on SQLite, ~4 on PostgreSQL (over 300 here).
    assert events > 60 and len(connects) < 40, (len(connects), events)


def test_a_pooled_connection_the_server_dropped_is_replaced(instance, monkeypatch):
    """PostgreSQL pings a connection that sat idle in the pool before handing it out (not every checkout: a round
    trip per storage call), and replaces it if the server or a proxy dropped it meanwhile."""
    storage = instance.event_log_storage
    if not isinstance(storage, PooledPostgresEventLogStorage):
        pytest.skip("SQLite has no server to drop a connection")
    assert _range_run(instance, _assets()).success  # the pools now hold live connections
    with storage._engine.connect() as conn:  # every other connection of the database, including the pooled one
        conn.execute(
            sa.text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        )
    for cls in (PooledPostgresEventLogStorage, PooledPostgresRunStorage):
        monkeypatch.setattr(cls, "IDLE_PING_SECONDS", -1.0)  # what a long idle does: every checkout pings
    assert _range_run(instance, _assets()).success


def test_patch_is_installed_and_keeps_dagster_errors(instance):
    assert range_runs.install() and StepExecutionContext.add_asset_metadata is range_runs.add_asset_metadata

    @asset(partitions_def=tenant_month_partitions, backfill_policy=BackfillPolicy.multi_run(100))
    def report(context: AssetExecutionContext) -> MaterializeResult:
        context.add_asset_metadata({"x": 1}, partition_key=MultiPartitionKey({"tenant": "zeta", "month": "2026-10-01"}))
        return MaterializeResult()

    result = _range_run(instance, [report], raise_on_error=False)
    assert not result.success
    [failure] = [e for e in result.all_events if e.is_step_failure]
    assert "that is not being targeted" in str(failure.step_failure_data.error)


def test_a_pool_initialized_twice_keeps_its_default_limit(instance):
    """Two runs that first use a pool at the same moment both initialize its limit; the second finds the row.
    Stock dagster-postgres then fails the run (its UPDATE runs in the transaction the duplicate INSERT aborted)."""
    storage = instance.event_log_storage
    assert storage.initialize_concurrency_limit_to_default("render")
    assert storage.initialize_concurrency_limit_to_default("render")  # what the second run does
    assert storage.get_concurrency_info("render").slot_count == 2  # dagster.yaml's default_limit


def test_storages_are_checked_against_this_dagster_and_fall_back_to_stock_otherwise(tmp_path, monkeypatch):
    assert storage.checked()  # fails after a Dagster upgrade until CHECKED_SOURCES is re-checked
    storage.checked.cache_clear()
    monkeypatch.setattr(dagster, "__version__", "1.13.28")
    try:
        with pytest.warns(UserWarning, match="checked against dagster==1.13.27"):
            assert not storage.checked()
        events = PooledSqliteEventLogStorage(str(tmp_path))
        with events._connect("index") as conn:  # Dagster's own engine per call, not a kept one
            assert conn.execute(sa.text("select 1")).scalar() == 1
        assert events._engines == {}
        events.dispose()
    finally:
        storage.checked.cache_clear()


def _stored(instance, run_id: str) -> dict:
    """What a run left in the event log, with its run id and times left out."""
    events = [
        (e.dagster_event_type, e.dagster_event.asset_key, e.dagster_event.partition)
        for e in instance.all_logs(run_id)
        if e.dagster_event
    ]
    storage = instance.event_log_storage
    assets = {}
    for record in storage.get_asset_records():
        key = record.asset_entry.asset_key
        last = record.asset_entry.last_materialization_record
        materialized = instance.fetch_materializations(AssetRecordsFilter(asset_key=key), limit=100).records
        # Tag values: the partition's; the others (data versions, event pointers) differ from run to run.
        tags = sorted(
            sorted((k, v if k.startswith("dagster/partition") else None) for k, v in t.items())
            for t in storage.get_event_tags_for_asset(key)
        )
        assets[key] = (
            last.partition_key if last else None,
            record.asset_entry.last_run_id == run_id,
            [r.partition_key for r in materialized],
            tags,
        )
    return {"events": events, "assets": assets}


def test_sqlite_stores_a_batch_of_asset_events_in_one_transaction_per_shard(tmp_path):
    """A range run's planned events (at its creation) and its steps' materializations come in batches; stock SQLite
    storage commits twice per event (run shard, index), ours once per shard per batch, storing the same."""
    stored, commits = {}, {}
    for name, overrides in (("stock", {}), ("ours", yaml.safe_load((REPO / "dagster.yaml").read_text()))):
        (tmp_path / name).mkdir()
        with instance_for_test(overrides=overrides, temp_dir=str(tmp_path / name)) as instance:
            instance.add_dynamic_partitions("tenant", TENANTS)
            counted = []

            def count(*_, counted=counted):
                counted.append(1)

            sa.event.listen(sa.engine.Engine, "commit", count)
            try:
                result = _range_run(instance, _assets(lambda pk: {"pages": 3}))
            finally:
                sa.event.remove(sa.engine.Engine, "commit", count)
            stored[name], commits[name] = _stored(instance, result.run_id), len(counted)
    assert stored["ours"] == stored["stock"]
    asset_events = sum(
        event_type in ("ASSET_MATERIALIZATION", "ASSET_MATERIALIZATION_PLANNED")
        for event_type, _, _ in stored["ours"]["events"]
    )
    assert asset_events == 2 * 2 * len(TENANTS) * len(MONTHS)  # planned and materialized, two assets
    # Stock: two commits per asset event (run shard, index); ours: two per batch (the planned events, each step's
    # materializations). The run's other events commit as before.
    assert commits["ours"] < commits["stock"] - asset_events, commits
