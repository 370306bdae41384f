"""A snapshot of what the code location exposes, and the schedule, sensor and instance settings in action."""

import fcntl
import os
import subprocess
import sys
import tempfile
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml
from dagster import (
    AssetKey,
    BackfillPolicy,
    DagsterInstance,
    DeleteDynamicPartitionsRequest,
    DynamicPartitionsDefinition,
    MonthlyPartitionsDefinition,
    build_schedule_context,
    build_sensor_context,
    instance_for_test,
)

from evidence_pipeline.config import Settings
from evidence_pipeline.definitions import defs
from evidence_pipeline.defs import automation
from evidence_pipeline.defs.partitions import run_range, stray_dimension_tags, tenant_month_partitions
from evidence_pipeline.models import FIRST_PERIOD, first_open_period
from evidence_pipeline.monthly.render import RENDERER_VERSION
from evidence_pipeline.runtime import runtime_for
from evidence_pipeline_tests.support.pieces import pieces_of
from evidence_pipeline_tests.support.signers import signers_of

REPO = Path(__file__).resolve().parents[2]


def test_snapshot_of_assets_checks_jobs_schedules_sensors():
    repo = defs.get_repository_def()
    graph = repo.asset_graph
    assert sorted(k.to_user_string() for k in graph.get_all_asset_keys()) == [
        "document_jobs",
        "evidence_bundle",
        "monthly_report",
        "report_preview",
        "source_revision",
    ]
    documents = graph.get(AssetKey("document_jobs"))  # recorded by document page runs, never materialized itself
    assert not documents.is_executable
    assert documents.partitions_def == graph.get(AssetKey("monthly_report")).partitions_def
    graph_keys = [key for key in graph.get_all_asset_keys() if key != documents.key]
    assert {k.to_user_string(): sorted(p.to_user_string() for p in graph.get(k).parent_keys) for k in graph_keys} == {
        "source_revision": [],
        "monthly_report": ["document_jobs", "source_revision"],  # the month's document work feeds its report
        "evidence_bundle": ["monthly_report"],
        "report_preview": ["source_revision"],
    }
    partitions = graph.get(graph_keys[0]).partitions_def
    dims = {d.name: type(d.partitions_def) for d in partitions.partitions_defs}
    assert dims == {"month": MonthlyPartitionsDefinition, "tenant": DynamicPartitionsDefinition}
    assert (
        graph.get(next(k for k in graph.get_all_asset_keys() if k.path == ["monthly_report"])).code_version
        == RENDERER_VERSION
    )
    pools = {key.to_user_string(): repo.assets_defs_by_key[key].op.pool for key in graph_keys}
    assert pools == {
        "source_revision": None,
        "monthly_report": "render",
        "evidence_bundle": "publish",
        "report_preview": "preview",
    }
    # One non-blocking verification check per evidence bundle partition, run by every job that builds the bundle.
    [check_key] = graph.asset_check_keys
    check = graph.get(check_key)
    assert (check_key.asset_key.to_user_string(), check_key.name) == ("evidence_bundle", "offline_verification")
    assert not check.blocking and check.partitions_def == graph.get(AssetKey("evidence_bundle")).partitions_def
    assert check_key in defs.resolve_job_def("monthly_evidence").asset_layer.asset_graph.asset_check_keys
    policies = {repo.assets_defs_by_key[key].backfill_policy for key in graph_keys}
    assert policies == {BackfillPolicy.multi_run(100)}  # backfills run ranges of partitions
    assert sorted(j.name for j in repo.get_all_jobs() if not j.name.startswith("__")) == [
        "document_page_job",
        "ledger_maintenance",
        "monthly_evidence",
    ]
    schedules = {s.name: (s.cron_schedule, s.job_name) for s in repo.schedule_defs}
    assert schedules == {
        "monthly_evidence_schedule": ("0 2 1 * *", "monthly_evidence"),
        "ledger_maintenance_schedule": ("17 * * * *", "ledger_maintenance"),
    }
    assert sorted(s.name for s in repo.sensor_defs) == [
        "document_dispatch_sensor",
        "evidence_job_failed",
        "evidence_job_succeeded",
        "source_landing_sensor",
        "tenant_month_retry_sensor",
        "tenant_registry_sensor",
        "webhook_delivery_sensor",
    ]


def test_schedule_requests_last_complete_month_for_every_tenant_in_range_runs():
    """250 tenants: three range runs of up to 100 (a backfill's runs), not 250 runs, whose ranges expand to every
    tenant exactly once; a tenant registered after the tick is in none of them."""
    schedule = defs.resolve_schedule_def("monthly_evidence_schedule")
    tenants = [f"t{i:03d}" for i in range(250)]
    with DagsterInstance.local_temp() as instance:
        instance.add_dynamic_partitions("tenant", tenants)
        context = build_schedule_context(instance=instance, scheduled_execution_time=datetime(2026, 12, 1, 2))
        requests = schedule.evaluate_tick(context).run_requests
        instance.add_dynamic_partitions("tenant", ["a-latecomer"])  # sorts first, registered last
        expanded = [tenant_month_partitions.get_partition_keys_in_range(run_range(r.tags), instance) for r in requests]
    assert [len(keys) for keys in expanded] == [100, 100, 50]
    assert sorted(key for keys in expanded for key in keys) == [f"2026-11-01|{t}" for t in tenants]
    assert [r.run_key for r in requests] == ["2026-11:t000..t099", "2026-11:t100..t199", "2026-11:t200..t249"]
    assert all(r.partition_key is None and stray_dimension_tags(r.tags) == [] for r in requests)


def test_schedule_skips_without_tenants_or_complete_months():
    schedule = defs.resolve_schedule_def("monthly_evidence_schedule")
    with DagsterInstance.local_temp() as instance:
        nobody = schedule.evaluate_tick(
            build_schedule_context(instance=instance, scheduled_execution_time=datetime(2026, 12, 1, 2))
        )
        instance.add_dynamic_partitions("tenant", ["acme-books"])
        too_early = schedule.evaluate_tick(
            build_schedule_context(instance=instance, scheduled_execution_time=datetime(2025, 1, 1, 2))
        )
    assert not nobody.run_requests and "0 tenants" in nobody.skip_message
    assert not too_early.run_requests and "2025-01" in too_early.skip_message


@pytest.mark.parametrize(
    ("today", "open_months", "first_period", "first"),
    [
        (date(2026, 12, 1), 12, FIRST_PERIOD, "2025-12"),  # the last 12 complete months: 2025-12 .. 2026-11
        (date(2027, 1, 31), 12, FIRST_PERIOD, "2026-01"),
        (date(2027, 3, 15), 1, FIRST_PERIOD, "2027-02"),
        (date(2025, 6, 1), 12, FIRST_PERIOD, "2025-01"),  # never before the first month the deployment covers
        (date(2026, 12, 1), 48, "2023-06", "2023-06"),
        (date(2026, 12, 1), 36, "2023-06", "2023-12"),
    ],
)
def test_the_open_window_holds_the_last_complete_months(today, open_months, first_period, first):
    assert first_open_period(today, open_months, first_period) == first


def test_the_month_dimension_starts_at_the_open_window(tmp_path):
    """The code location, loaded with EVIDENCE_OPEN_MONTHS=3, has exactly the last 3 complete months as partitions;
    a bad value stops it loading with CONFIG_INVALID."""
    script = (
        "from evidence_pipeline.defs.partitions import month_partitions as m\nprint(','.join(m.get_partition_keys()))"
    )
    env = dict(os.environ, EVIDENCE_OPEN_MONTHS="3")
    today = datetime.now(timezone.utc).date()
    keys = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert keys.stdout.split() == [",".join(f"{p}-01" for p in _complete_months(today, 3))]
    bad = subprocess.run(
        [sys.executable, "-c", script], env=env | {"EVIDENCE_OPEN_MONTHS": "0"}, capture_output=True, text=True
    )
    assert bad.returncode != 0 and "CONFIG_INVALID" in bad.stderr and "EVIDENCE_OPEN_MONTHS" in bad.stderr


@pytest.mark.slow
def test_a_deployment_may_open_months_before_2025(tmp_path):
    """EVIDENCE_FIRST_PERIOD moves the first month a deployment covers: with 2023-01 and a window wider than the time
    since, the month dimension starts at 2023-01; a value that is not a month stops the location loading."""
    script = "from evidence_pipeline.defs.partitions import month_partitions as m\nprint(m.get_partition_keys()[0])"
    env = dict(os.environ, EVIDENCE_OPEN_MONTHS="120", EVIDENCE_FIRST_PERIOD="2023-01")
    first = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert first.stdout.split() == ["2023-01-01"]
    for bad_value in ("2023-13", "2023", "01-2023"):
        bad = subprocess.run(
            [sys.executable, "-c", script],
            env=env | {"EVIDENCE_FIRST_PERIOD": bad_value},
            capture_output=True,
            text=True,
        )
        assert bad.returncode != 0 and "CONFIG_INVALID" in bad.stderr and "EVIDENCE_FIRST_PERIOD" in bad.stderr


def _complete_months(today: date, count: int) -> list[str]:
    months, cursor = [], today.replace(day=1)
    for _ in range(count):
        cursor = (cursor - timedelta(days=1)).replace(day=1)
        months.append(f"{cursor:%Y-%m}")
    return sorted(months)


def _tick_sensor(tmp_path, monkeypatch, registered: list[str], offboarded: tuple[str, ...] = (), log_handler=None):
    monkeypatch.setenv("EVIDENCE_HOME", str(tmp_path / "home"))
    ledger = runtime_for(Settings.from_env()).ledger
    signers_of(ledger).register_tenants(registered)
    for tenant in offboarded:
        ledger._transact(
            lambda conn, tenant=tenant: pieces_of(ledger).tokens.record_offboarding(
                conn, tenant, "test", {"reason": "test"}
            )
        )
    sensor = defs.get_sensor_def("tenant_registry_sensor")
    with DagsterInstance.local_temp() as instance:
        instance.add_dynamic_partitions("tenant", ["acme-books"])
        context = build_sensor_context(instance=instance, resources={"evidence": defs.resources["evidence"]})
        if log_handler:  # the tick's log is Dagster's own logger, outside the logging hierarchy
            context.log.addHandler(log_handler)
        return sensor.evaluate_tick(context)


def test_sensor_adds_the_registered_tenants_in_registration_order(tmp_path, monkeypatch):
    [request] = _tick_sensor(
        tmp_path, monkeypatch, ["zeta-foods", "acme-books", "delta-foods"]
    ).dynamic_partitions_requests
    assert list(request.partition_keys) == ["zeta-foods", "delta-foods"]


@pytest.mark.parametrize("guidance", [5, 100_000])
def test_sensor_warns_when_the_partitions_pass_dagsters_guidance(tmp_path, monkeypatch, caplog, guidance):
    """The open months times the tenants it adds: past the guidance, the tick's log says which setting to lower."""
    monkeypatch.setattr(automation, "PARTITIONS_GUIDANCE", guidance)
    _tick_sensor(tmp_path, monkeypatch, ["zeta-foods", "acme-books", "delta-foods"], log_handler=caplog.handler)
    months = len(automation.month_partitions.get_partition_keys())
    warned = [r.getMessage() for r in caplog.records if "past Dagster's guidance" in r.getMessage()]
    assert months > 1 and warned == (
        [
            f"{3 * months} partitions per asset once these tenants are added, past "
            f"Dagster's guidance of 5: lower EVIDENCE_OPEN_MONTHS (docs: Open months)"
        ]
        if guidance == 5
        else []
    )


def test_sensor_removes_offboarded_tenants_and_never_adds_them_back(tmp_path, monkeypatch):
    both = ["acme-books", "delta-foods"]
    result = _tick_sensor(tmp_path, monkeypatch, both, offboarded=tuple(both))
    [removed] = result.dynamic_partitions_requests
    assert isinstance(removed, DeleteDynamicPartitionsRequest) and list(removed.partition_keys) == ["acme-books"]


def test_sensor_skips_when_nothing_is_new(tmp_path, monkeypatch):
    result = _tick_sensor(tmp_path, monkeypatch, ["acme-books"])
    assert not result.dynamic_partitions_requests and "no new tenants" in result.skip_message


def test_the_catalog_names_group_owners_kinds_and_tags_and_every_sensor_schedule_and_job_is_described():
    repo = defs.get_repository_def()
    graph = repo.asset_graph
    kinds = {
        k.to_user_string(): (
            {t.removeprefix("dagster/kind/") for t in graph.get(k).tags if t.startswith("dagster/kind/")},
            graph.get(k).group_name,
        )
        for k in graph.get_all_asset_keys()
    }
    assert kinds == {
        "source_revision": ({"sql"}, "evidence"),
        "monthly_report": ({"pdf"}, "evidence"),
        "evidence_bundle": ({"pdf", "s3", "pades"}, "evidence"),
        "report_preview": ({"pdf"}, "evidence"),
        "document_jobs": ({"pdf"}, "documents"),
    }
    for key in graph.get_all_asset_keys():
        assert graph.get(key).owners == ["team:evidence"] and graph.get(key).tags["grain"] == "tenant-month"
    freshness = {key.to_user_string(): graph.get(key).freshness_policy for key in graph.get_all_asset_keys()}
    assert {key for key, policy in freshness.items() if policy} == {
        "source_revision",
        "monthly_report",
        "evidence_bundle",
    }  # what the schedule makes
    assert freshness["evidence_bundle"].deadline_cron == "0 2 2 * *"  # the deadline of evidence_tenant_months_overdue
    assert freshness["evidence_bundle"].lower_bound_delta == timedelta(days=1)  # since the schedule's tick
    # The asset page's Materialize runs the asset alone: its description, above the button, says what to select.
    for name in ("monthly_report", "evidence_bundle"):
        assert graph.get(AssetKey(name)).description.endswith(
            "select source_revision, monthly_report and evidence_bundle together (or launch the monthly_evidence job)."
        )
    jobs = [job for job in repo.get_all_jobs() if not job.name.startswith("__")]
    described = [*repo.sensor_defs, *repo.schedule_defs, *jobs]
    assert len(described) == 12 and all(d.description for d in described), [
        d.name for d in described if not d.description
    ]


def test_dagster_cli_works_from_the_repository_root_without_dagster_home(tmp_path, repository_root):
    """A fresh clone: `dagster definitions validate` reads workspace.yaml and dagster.yaml with no DAGSTER_HOME
    (Dagster makes a temporary instance directory, and the event log storage takes it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DAGSTER_", "EVIDENCE_"))}
    env["EVIDENCE_OPEN_MONTHS"] = "12"
    validate = subprocess.run(
        [Path(sys.executable).parent / "dagster", "definitions", "validate"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert validate.returncode == 0, validate.stderr[-3000:]
    assert "All code locations passed validation" in validate.stdout + validate.stderr
    assert not list(REPO.glob(".tmp_dagster_home_*"))  # Dagster removed its temporary instance


@pytest.fixture
def repository_root():
    """The repository root to this test alone: the tests that run Dagster's CLI there without DAGSTER_HOME take turns
    (on any xdist worker), since each then looks for a temporary instance the CLI left there."""
    with open(Path(tempfile.gettempdir()) / "evidence-repository-root.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield REPO


def test_dg_checks_the_definitions_from_the_repository_root(repository_root):
    """`dg check defs` (the dg CLI, pyproject's [tool.dg]) loads the code location `dagster dev` loads."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DAGSTER_", "EVIDENCE_", "VIRTUAL_ENV"))}
    check = subprocess.run(
        [Path(sys.executable).parent / "dg", "check", "defs"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
    assert "All definitions loaded successfully" in check.stdout + check.stderr
    assert "does not match the virtual environment" not in check.stdout + check.stderr  # .venv/bin/dg as is
    assert not list(REPO.glob(".tmp_dagster_home_*"))


def test_loading_the_definitions_prints_no_warning(tmp_path):
    """What `evidence demo` and `evidence ui` load: no Dagster warning precedes a command's own output (the
    sensors Dagster builds from the assets' automation once printed a BetaWarning for the assets' owners)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DAGSTER_", "EVIDENCE_"))}
    load = subprocess.run(
        [
            sys.executable,
            "-c",
            "from evidence_pipeline.definitions import defs; defs.get_repository_def().get_all_jobs()",
        ],
        cwd=tmp_path,
        env=env | {"EVIDENCE_HOME": str(tmp_path / "home")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert load.returncode == 0, load.stderr[-3000:]
    assert "Warning" not in load.stderr, load.stderr[-3000:]


def test_the_event_log_lives_in_the_instance_directory_when_no_base_dir_is_named(tmp_path):
    with instance_for_test(temp_dir=str(tmp_path), overrides=_yaml(REPO / "dagster.yaml")) as instance:
        storage = instance.event_log_storage
        assert type(storage).__name__ == "PooledSqliteEventLogStorage"
        assert Path(storage._base_dir) == tmp_path / "history" / "runs"  # where Dagster's default keeps it


def test_instance_yaml_loads_with_pools_queue_and_retries(tmp_path):
    with instance_for_test(temp_dir=str(tmp_path), overrides=_yaml(REPO / "dagster.yaml")) as instance:
        concurrency = instance.get_concurrency_config()
        assert concurrency.pool_config.default_pool_limit == 2
        assert concurrency.run_queue_config.max_concurrent_runs == 4
        [limit] = concurrency.run_queue_config.tag_concurrency_limits
        assert limit["key"] == "evidence/tenant" and limit["value"] == {"applyLimitPerUniqueValue": True}
        assert limit["limit"] == 1
        assert instance.run_monitoring_settings["free_slots_after_run_end_seconds"] == 300
        assert instance.run_retries_enabled and not instance.run_retries_retry_on_asset_or_op_failure


def _yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


@pytest.mark.parametrize("path", ["workspace.yaml", "dagster.yaml"])
def test_project_files_exist(path):
    assert (REPO / path).is_file()


def test_production_yaml_is_dagster_yaml_with_postgres_storage():
    """Both name our pooled storage classes (evidence_pipeline/defs/extensions/storage.py) per storage, so the
    storage blocks differ in shape: dagster.yaml only replaces the event log (runs and schedules keep SQLite
    defaults). Both run 4 runs at once (the embedded default on one machine, each run on its share of the cores; a
    deployment on the EVIDENCE_WORKERS it sets); each caps a tenant below every slot, the embedded default at 1."""
    production, embedded = _yaml(REPO / "dagster.production.yaml"), _yaml(REPO / "dagster.yaml")
    tenant_cap = {"key": "evidence/tenant", "value": {"applyLimitPerUniqueValue": True}}
    assert embedded["concurrency"].pop("runs") == {
        "max_concurrent_runs": 4,
        "tag_concurrency_limits": [tenant_cap | {"limit": 1}],
    }
    assert production["concurrency"].pop("runs") == {
        "max_concurrent_runs": 4,
        "tag_concurrency_limits": [tenant_cap | {"limit": 2}],
    }
    pg = {"postgres_url": {"env": "DAGSTER_PG_URL"}}
    assert production.pop("run_storage") == {
        "module": "evidence_pipeline.defs.extensions.storage",
        "class": "PooledPostgresRunStorage",
        "config": pg,
    }
    assert production.pop("event_log_storage") == {
        "module": "evidence_pipeline.defs.extensions.storage",
        "class": "PooledPostgresEventLogStorage",
        "config": pg,
    }
    assert production.pop("schedule_storage") == {
        "module": "dagster_postgres.schedule_storage",
        "class": "PostgresScheduleStorage",
        "config": pg,
    }
    assert embedded.pop("event_log_storage") == {
        "module": "evidence_pipeline.defs.extensions.storage",
        "class": "PooledSqliteEventLogStorage",
        "config": {},  # the instance's own directory: no DAGSTER_HOME needed to read this file
    }
    assert production == embedded


def test_a_demo_refuses_closed_months():
    from evidence_pipeline.defs.demo import run_demo
    from evidence_pipeline.errors import EvidenceError

    with DagsterInstance.ephemeral() as instance, pytest.raises(EvidenceError) as closed:
        run_demo(30, date(2026, 12, 1), instance=instance, code_location=defs)  # back to 2024-07: before any open month
    assert closed.value.code == "PERIOD_CLOSED"
