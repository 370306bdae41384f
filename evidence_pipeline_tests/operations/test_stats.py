"""`evidence stats`: nearest-rank percentiles of the ledger's stages.timed events and the oldest queued run."""

import json
import random
import re
import uuid
from datetime import datetime, timedelta, timezone

import pytest
from click.testing import CliRunner
from dagster import DagsterInstance, DagsterRun, DagsterRunStatus, job, op
from dagster._core.remote_origin import RegisteredCodeLocationOrigin, RemoteRepositoryOrigin

from evidence_pipeline.cli import main
from evidence_pipeline.config import Settings
from evidence_pipeline.defs.queue import oldest_queued_run_age_seconds
from evidence_pipeline.ledger import Ledger
from evidence_pipeline.models import Stage, TenantMonth
from evidence_pipeline.operations.stats import admission_stats, parse_since, percentile, stage_stats, summarize
from evidence_pipeline_tests.support.fixture_sources import LARGE, SMALL

UTC = timezone.utc
# A QUEUED DagsterRun must name the code location the daemon would launch it from.
ORIGIN = RemoteRepositoryOrigin(RegisteredCodeLocationOrigin("evidence_pipeline"), "__repository__").get_job_origin(
    "__ASSET_JOB"
)


def _timed(
    ledger: Ledger,
    tenant_month: TenantMonth,
    lane: str = "archive",
    queue_wait_ms=5.0,
    render_ms=100.0,
    validate_ms=20.0,
    sign_ms=30.0,
    publish_ms=40.0,
) -> dict:
    """One stages.timed event, exactly as the pipeline appends it."""
    return ledger.record(
        tenant_month,
        "stages.timed",
        "ab" * 32,
        "run-1",
        lane=lane,
        queue_wait_ms=queue_wait_ms,
        render_ms=render_ms,
        validate_ms=validate_ms,
        sign_ms=sign_ms,
        publish_ms=publish_ms,
    ).body


def _body(lane: str, **ms) -> dict:
    return {"details": {"lane": lane} | {stage.clock: ms.get(stage) for stage in Stage}}


# --- percentile math ---------------------------------------------------------------------------------------------


def test_percentile_is_nearest_rank():
    hundred = list(range(1, 101))
    random.Random(7).shuffle(hundred)  # input order must not matter
    assert [percentile(hundred, p) for p in (50, 95, 99, 100)] == [50, 95, 99, 100]
    assert percentile(hundred, 7) == 7  # the float rank 7/100·100 = 7.000000000000001 would give 8
    assert [percentile([30.0, 10.0, 20.0], p) for p in (1, 33, 34, 50, 67, 95, 99)] == [10, 10, 20, 20, 30, 30, 30]
    assert [percentile(list(range(1, 21)), p) for p in (50, 95, 99)] == [10, 19, 20]
    assert percentile([4.5], 99) == 4.5


@pytest.mark.parametrize("values, p", [([], 50), ([1.0], 0), ([1.0], 101)])
def test_percentile_refuses_what_it_cannot_answer(values, p):
    with pytest.raises(ValueError):
        percentile(values, p)


def test_summary_skips_stages_that_did_not_happen_and_splits_lanes():
    stats = summarize(
        [
            _body("archive", queue_wait=None, render=10, validate=1, sign=None, publish=4),  # CLI tool, converged
            _body("archive", queue_wait=200, render=30, validate=3, sign=7, publish=5),
            _body("oversize", queue_wait=100, render=900, validate=9, sign=8, publish=6),
        ]
    )
    overall = {s.stage: s for s in stats.stages}
    assert stats.events == 3
    assert (overall["queue_wait"].count, overall["queue_wait"].p50, overall["queue_wait"].p99) == (2, 100, 200)
    assert (overall["sign"].count, overall["sign"].p50) == (2, 7)
    assert (overall["render"].count, overall["render"].p50, overall["render"].p95) == (3, 30, 900)
    assert list(stats.lanes) == ["archive", "oversize"]
    archive = {s.stage: s for s in stats.lanes["archive"]}
    assert (archive["render"].count, archive["render"].p99, archive["sign"].count) == (2, 30, 1)
    assert stats.as_dict()["lanes"]["oversize"]["render"] == {"count": 1, "p50": 900, "p95": 900, "p99": 900}


def test_no_events_means_zero_counts():
    stats = summarize([])
    assert stats.events == 0 and stats.lanes == {}
    assert all((s.count, s.p50, s.p95, s.p99) == (0, None, None, None) for s in stats.stages)


# --- since -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("2026-10-01", datetime(2026, 10, 1, tzinfo=UTC)),
        ("2026-10-01T12:30", datetime(2026, 10, 1, 12, 30, tzinfo=UTC)),
        ("2026-10-01T12:30:00Z", datetime(2026, 10, 1, 12, 30, tzinfo=UTC)),
        ("2026-10-01T14:30:00+02:00", datetime(2026, 10, 1, 12, 30, tzinfo=UTC)),
    ],
)
def test_since_is_a_date_or_datetime_in_utc_unless_told(text, expected):
    parsed = parse_since(text)
    assert parsed == expected and parsed.utcoffset() is not None


@pytest.mark.parametrize("text", ["yesterday", "2026-13-01", "2026-10-01T25:00", ""])
def test_since_rejects_what_is_not_iso(text):
    with pytest.raises(ValueError, match="ISO-8601"):
        parse_since(text)


# --- the ledger --------------------------------------------------------------------------------------------------


@pytest.fixture
def ledger(backend):
    return Ledger(Settings.from_env(backend).ledger_url)


def test_stats_filter_by_event_type_tenant_and_since(ledger):
    ledger.record(SMALL, "report.rendered", "cd" * 32, "run-0", render_ms=1.0)  # another event type: not counted
    first = _timed(ledger, SMALL, render_ms=100.0)
    second = _timed(ledger, SMALL, render_ms=300.0)
    _timed(ledger, LARGE, lane="oversize", render_ms=5000.0)
    assert first["recorded_at"] < second["recorded_at"]

    def render(**filters):
        [summary] = [s for s in stage_stats(ledger, **filters).stages if s.stage == "render"]
        return summary.count, summary.p50, summary.p99

    assert render() == (3, 300.0, 5000.0)
    assert render(tenant=SMALL.tenant) == (2, 100.0, 300.0)
    assert render(tenant="nobody") == (0, None, None)
    assert render(tenant=SMALL.tenant, since=datetime.fromisoformat(second["recorded_at"])) == (1, 300.0, 300.0)
    assert render(since=datetime.fromisoformat(first["recorded_at"])) == (3, 300.0, 5000.0)
    assert render(since=datetime.now(UTC) + timedelta(seconds=1)) == (0, None, None)
    assert set(stage_stats(ledger).lanes) == {"archive", "oversize"}


def test_admission_stats_read_only_events_with_the_field(ledger):
    """The database narrows admissions to bodies whose text has the key; the parsed details decide: a value that
    only mentions it is not an admission time, and percent or underscore in it are not LIKE wildcards."""
    ledger.record(SMALL, "job.accepted", "ab" * 32, "intake", admission_ms=40.0)
    ledger.record(SMALL, "job.accepted", "ab" * 32, "run-1", job_id="x", note='"admission_ms":7')
    ledger.record(SMALL, "job.accepted", "ab" * 32, "run-1", job_id="y", admission0ms=9.0)  # `_` is no wildcard
    ledger.record(SMALL, "document.admitted", "ab" * 32, "intake", admission_ms=20.0)
    ledger.record(SMALL, "batch.accepted", "ab" * 32, "intake", admission_ms=30.0)
    summary = admission_stats(ledger)
    assert (summary.count, summary.p50, summary.p99) == (3, 30.0, 40.0)
    assert [
        b["details"]["admission_ms"] for b in ledger.iter_events_of_type("job.accepted", detail="admission_ms")
    ] == [40.0]
    assert len(ledger.events_of_type("job.accepted")) == 3


# --- the CLI -----------------------------------------------------------------------------------------------------


@pytest.fixture
def cli_ledger(backend, monkeypatch, tmp_path):
    """The ledger of the backend whose environment the CLI sees, with an empty Dagster instance directory."""
    for name, value in backend.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "dagster").mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    return Ledger(Settings.from_env(backend).ledger_url)


def test_cli_prints_a_table_and_json(cli_ledger):
    for render_ms in (10.0, 20.0, 30.0, 40.0):
        _timed(cli_ledger, SMALL, render_ms=render_ms, queue_wait_ms=None, sign_ms=None)
    _timed(cli_ledger, LARGE, lane="oversize", render_ms=1000.0)

    table = CliRunner().invoke(main, ["stats", "--tenant", SMALL.tenant, "--since", "2000-01-01"])
    assert table.exit_code == 0, table.output
    assert "4 stages.timed events, tenant acme-books, since 2000-01-01T00:00:00+00:00" in table.output
    assert re.search(r"^all +render +4 +20\.0 +40\.0 +40\.0$", table.output, re.M)
    assert re.search(r"^all +queue_wait +0 +- +- +-$", table.output, re.M)
    assert re.search(r"^archive +render +4 +20\.0", table.output, re.M)
    assert "oversize" not in table.output
    assert table.output.rstrip().endswith("no queued runs")

    out = CliRunner().invoke(main, ["stats", "--json"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)
    assert report["events"] == 5 and report["tenant"] is None and report["percentile_method"] == "nearest-rank"
    assert report["stages"]["render"] == {"count": 5, "p50": 30.0, "p95": 1000.0, "p99": 1000.0}
    assert report["stages"]["sign"]["count"] == 1
    assert report["lanes"]["oversize"]["render"]["count"] == 1
    assert report["oldest_queued_run_age_seconds"] is None


def test_cli_unknown_tenant_is_empty_not_an_error(cli_ledger):
    _timed(cli_ledger, SMALL)
    result = CliRunner().invoke(main, ["stats", "--tenant", "nobody", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["events"] == 0
    assert json.loads(result.output)["stages"]["render"]["count"] == 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["--tenant", "Acme_Books"], "Invalid value for '--tenant': TENANT_ID_INVALID"),
        (["--tenant", "../etc"], "Invalid value for '--tenant': TENANT_ID_INVALID"),
        (["--since", "last tuesday"], "Invalid value for '--since': expected an ISO-8601 date"),
        (["--since", "2026-02-30"], "Invalid value for '--since': expected an ISO-8601 date"),
    ],
)
def test_cli_rejects_bad_input_without_a_traceback(tmp_path, monkeypatch, args, message):
    monkeypatch.setenv("EVIDENCE_HOME", str(tmp_path / "home"))
    result = CliRunner().invoke(main, ["stats", *args])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit)
    assert message in result.output and "Traceback" not in result.output


def test_cli_without_a_dagster_instance_creates_none(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()  # a home without an instance (where there is no home, stats says HOME_NOT_FOUND: test_cli)
    monkeypatch.setenv("EVIDENCE_HOME", str(home))
    monkeypatch.setenv("DAGSTER_HOME", "")
    monkeypatch.delenv("DAGSTER_HOME")  # recorded by the setenv above, so monkeypatch restores the original value
    result = CliRunner().invoke(main, ["stats"])
    assert result.exit_code == 0, result.output
    assert result.output.rstrip().endswith("no queued runs")
    assert not (home / "dagster").exists()


def test_cli_reports_the_oldest_queued_run(cli_ledger):
    with DagsterInstance.get() as instance:  # the instance in $DAGSTER_HOME, as the daemon would see it
        _queued(instance, created=datetime.now(UTC) - timedelta(seconds=90))
    table = CliRunner().invoke(main, ["stats"])
    assert table.exit_code == 0, table.output
    age = int(re.search(r"^oldest queued run: (\d+) s$", table.output, re.M).group(1))
    assert 90 <= age < 150
    report = json.loads(CliRunner().invoke(main, ["stats", "--json"]).output)
    assert 90 <= report["oldest_queued_run_age_seconds"] < 150


# --- the Dagster run queue ---------------------------------------------------------------------------------------


def _queued(instance: DagsterInstance, created: datetime, status=DagsterRunStatus.QUEUED) -> None:
    run = DagsterRun(job_name="__ASSET_JOB", run_id=str(uuid.uuid4()), status=status, remote_job_origin=ORIGIN)
    instance.run_storage.add_historical_run(run, created)


def test_oldest_queued_run_age_ignores_runs_that_are_not_queued():
    now = datetime.now(UTC)
    with DagsterInstance.ephemeral() as instance:
        assert oldest_queued_run_age_seconds(instance, now) is None
        _queued(instance, now - timedelta(hours=2), status=DagsterRunStatus.STARTED)
        _queued(instance, now - timedelta(hours=3), status=DagsterRunStatus.SUCCESS)
        assert oldest_queued_run_age_seconds(instance, now) is None
        _queued(instance, now - timedelta(seconds=300))
        _queued(instance, now - timedelta(seconds=600))  # created after the other one was stored, but older
        _queued(instance, now - timedelta(seconds=60))
        assert oldest_queued_run_age_seconds(instance, now) == 600.0


@op
def _noop() -> None:
    pass


@job
def _probe():
    _noop()


def test_a_run_queued_just_now_is_seconds_old():
    with DagsterInstance.ephemeral() as instance:
        instance.create_run_for_job(_probe, status=DagsterRunStatus.QUEUED, remote_job_origin=ORIGIN)
        age = oldest_queued_run_age_seconds(instance)
    assert age is not None and 0 <= age < 60
