"""Prometheus metrics on a real intake server (127.0.0.1) and a real ledger, `evidence metrics serve` in its own
process, the queries' plans, and the alert rules under promtool."""

from __future__ import annotations

import os
import shutil
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from evidence_pipeline.audit.checkpoints import publish_checkpoint
from evidence_pipeline.ledger.jobs import RetryBudget
from evidence_pipeline.metrics import ledger_reads
from evidence_pipeline.metrics.collector import METRICS
from evidence_pipeline.models import Deployment, EventType, overdue_deadline_cron, overdue_period
from evidence_pipeline.monthly.pipeline import run_tenant_month
from evidence_pipeline.runtime import RunInfo
from evidence_pipeline_tests.support.fixture_sources import LARGE, SMALL
from evidence_pipeline_tests.support.intake_server import (
    EVIDENCE,
    _free_port,
    client,
    intake_environment,
    pdf_bytes,
    scrape,
    serving,
    submit,
    tokens,
    upload,
    value,
)

ROOT = Path(__file__).resolve().parents[2]
LABEL_VALUES = {  # every label's vocabulary: bounded, and nothing of a tenant's
    "kind": {"tenant-month", "evidence-request", "document"},
    "state": {"accepted", "retry_wait", "running", "succeeded", "rejected", "dead", "pending"},
    "figure": {"size", "used", "available"},
}


@pytest.mark.parametrize("backend", ["local"], indirect=True)
def test_the_intake_servers_metrics_follow_jobs_from_accepted_to_done_and_dead(documents, intake):
    acme, globex = tokens(documents)
    with client(intake, acme) as http:
        document_id = upload(http, pdf_bytes()).json()["document_id"]
        request = {"operation": "inspect", "inputs": [document_id]}
        first, second = (submit(http, key, request).json()["job_id"] for key in ("acme-key-1", "acme-key-2"))
        assert http.get("/no-such-route").status_code == 404
    with client(intake, globex) as http:
        assert http.get(f"/v1/jobs/{first}").status_code == 404  # another tenant's job
    accepted = scrape(f"{intake}/metrics")
    assert value(accepted, "evidence_ledger_up") == 1
    assert value(accepted, "evidence_jobs", kind="document", state="accepted") == 2
    assert value(accepted, "evidence_oldest_unstarted_job_age_seconds", kind="document", lane="inspect") >= 0
    assert value(accepted, "evidence_leases_active", kind="document") == 0
    assert value(accepted, "evidence_ledger_events_total") == _newest_seq(documents)
    # Every label set of the counts exists at 0 before its first job, delivery or dead letter: an alert on its
    # increase sees 0 -> 1 (a series that appears at 1 has no increase).
    for kind in LABEL_VALUES["kind"]:
        assert value(accepted, "evidence_dead_letters", kind=kind) == 0
        assert value(accepted, "evidence_leases_expired", kind=kind) == 0
        assert value(accepted, "evidence_job_retries_per_minute", kind=kind) == 0
        for state in ("retry_wait", "running", "dead", "rejected"):
            assert value(accepted, "evidence_jobs", kind=kind, state=state) == 0
        for state in ("succeeded", "rejected", "dead"):
            assert value(accepted, "evidence_jobs_ended_per_minute", kind=kind, state=state) == 0
    assert value(accepted, "evidence_webhook_outbox", state="pending") == 0
    assert value(accepted, "evidence_webhook_outbox", state="dead") == 0
    assert value(accepted, "evidence_sweep_failed_directories") == 0

    jobs, ledger = documents.document_jobs, documents.ledger
    lease = jobs.start(jobs.job("acme", first), "worker-1", 60, None)
    expired = jobs.start(jobs.job("acme", second), "worker-2", -1, None)  # its worker died: the lease ran out
    leased = scrape(f"{intake}/metrics")
    assert value(leased, "evidence_jobs", kind="document", state="running") == 2
    assert value(leased, "evidence_jobs", kind="document", state="accepted") == 0
    assert value(leased, "evidence_oldest_unstarted_job_age_seconds", kind="document", lane="inspect") is None
    assert value(leased, "evidence_leases_active", kind="document") == 1
    assert value(leased, "evidence_leases_expired", kind="document") == 1

    jobs.complete(
        jobs.job("acme", first),
        lease,
        event_type=EventType.DOCUMENT_PUBLISHED,
        subject_sha256="0" * 64,
        outputs={},
        actor="worker-1",
    )
    assert (
        ledger.record_failure(
            second,
            "STORE_UNAVAILABLE",
            retryable=True,
            actor="worker-2",
            budget=RetryBudget(1, 0),
            attempt=1,
            lease_token=expired.token,
        )
        == "dead"
    )
    ended = scrape(f"{intake}/metrics")
    per_minute = 1 / (ledger_reads.WINDOW_SECONDS / 60)
    assert value(ended, "evidence_jobs_ended_per_minute", kind="document", state="succeeded") == per_minute
    assert value(ended, "evidence_jobs_ended_per_minute", kind="document", state="dead") == per_minute
    assert value(ended, "evidence_job_retry_ratio", kind="document") == 0  # each ended on its first attempt
    assert value(ended, "evidence_dead_letters", kind="document") == 1
    assert value(ended, "evidence_jobs", kind="document", state="dead") == 1
    assert value(ended, "evidence_jobs", kind="document", state="running") == 0
    assert value(ended, "evidence_leases_active", kind="document") == 0

    histogram = "evidence_admission_duration_seconds_count"
    assert value(ended, histogram, endpoint="/v1/documents", code="201") == 1
    assert value(ended, histogram, endpoint="/v1/jobs", code="202") == 2
    assert value(ended, histogram, endpoint="/v1/jobs/{job_id}", code="404") == 1
    assert value(ended, histogram, endpoint="unmatched", code="404") == 1
    assert value(ended, histogram, endpoint="/metrics", code="200") == 2  # the scrapes before this one
    _assert_bounded_labels(ended, {"acme", "globex", first, second, document_id, acme, globex})


def _newest_seq(documents) -> int:
    with documents.ledger.engine.connect() as conn:
        return conn.execute(text("SELECT max(seq) FROM evidence_audit_events")).scalar()


def _assert_bounded_labels(samples: dict, secrets: set[str]) -> None:
    declared = {metric.name: set(metric.labels) for metric in METRICS}
    for name, labels in samples:
        family = name if name in declared else next(m for m in declared if name.startswith(m + "_"))
        assert {label for label, _ in labels} - {"le"} == declared[family], name
        for label, text_ in labels:
            assert not any(secret in text_ for secret in secrets), (name, label)
            if label in LABEL_VALUES:
                assert text_ in LABEL_VALUES[label], (name, label, text_)


@pytest.mark.parametrize("backend", ["local"], indirect=True)
def test_metrics_serve_alone_with_the_checkpoint_and_the_temporary_volume(backend, documents):
    runtime = documents
    runtime.ledger.record(
        Deployment(), EventType.SWEEP_COMPLETED, "0" * 64, "test", removed=2, kept_live=0, kept_young=0, failed=1
    )  # the newest sweep could not remove one directory
    runtime.ledger.record(_tenant_month(), EventType.TENANT_DATA_ERASED, "0" * 64, "test")
    publish_checkpoint(runtime.ledger, runtime.archive, runtime.keyring, runtime.witness_key)
    runtime.ledger.record(_tenant_month(), EventType.TENANT_DATA_ERASED, "0" * 64, "test")  # one after it
    (runtime.settings.work_dir / "evidence-attempt-0123").mkdir(parents=True)
    port = _free_port()
    server = subprocess.Popen(
        [EVIDENCE, "metrics", "serve", "--port", str(port)],
        env=os.environ | intake_environment(backend),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        samples = _scrape_when_up(f"http://127.0.0.1:{port}/metrics", server)
    finally:
        server.terminate()
        output = server.communicate(timeout=30)[0].decode()
    assert "Traceback" not in output
    assert value(samples, "evidence_ledger_up") == 1
    assert value(samples, "evidence_checkpoint_lag_events") == 1
    assert 0 <= value(samples, "evidence_checkpoint_age_seconds") < 3600
    assert value(samples, "evidence_attempt_directories") == 1
    assert value(samples, "evidence_sweep_failed_directories") == 1
    volume = {figure: value(samples, "evidence_temp_volume_bytes", figure=figure) for figure in LABEL_VALUES["figure"]}
    assert 0 < volume["available"] <= volume["size"] and 0 < volume["used"] <= volume["size"]
    assert not any(name.startswith("evidence_admission") for name, _ in samples)  # intake's own histogram


def _tenant_month():
    from evidence_pipeline.models import TenantMonth

    return TenantMonth("acme", "2026-01")


def _scrape_when_up(url: str, server: subprocess.Popen) -> dict:
    for _ in range(300):
        try:
            return scrape(url)
        except httpx.TransportError:
            assert server.poll() is None, "evidence metrics serve exited"
            subprocess.run(["sleep", "0.2"], check=True)
    raise AssertionError("evidence metrics serve did not answer")


def test_a_ledger_it_cannot_read_is_a_zero_not_an_error(tmp_path):
    from prometheus_client import generate_latest

    from evidence_pipeline.config import Settings
    from evidence_pipeline.metrics.http import registry_for
    from evidence_pipeline.runtime import runtime_for

    settings = Settings.from_env({"EVIDENCE_HOME": str(tmp_path / "home")})
    runtime = runtime_for(settings)
    registry = registry_for(runtime)
    runtime.ledger.engine.dispose()
    database = Path(settings.ledger_url.removeprefix("sqlite:///"))
    database.rename(database.with_suffix(".away"))
    database.mkdir()  # SQLite cannot open a folder: the ledger is unavailable from now on
    exposition = generate_latest(registry).decode()
    assert "evidence_ledger_up 0.0" in exposition and "evidence_jobs{" not in exposition


@pytest.mark.parametrize("backend", ["local"], indirect=True)
def test_every_ledger_query_is_a_range_of_an_index(documents):
    """The queries' plans (SQLite's EXPLAIN QUERY PLAN): no query reads a table or an index from end to end, so
    a scrape's cost follows the work in flight and the dead letters, not the history (bench/metrics_scrape.py)."""
    ledger = documents.ledger
    queries = [
        ledger_reads._live_jobs(ledger, 0.0),
        ledger_reads._ended_jobs(ledger, 0.0),
        *ledger_reads._dead_letters(ledger),
    ]
    with ledger.engine.connect() as conn:
        for query in queries:
            compiled = query.compile(conn, compile_kwargs={"literal_binds": True})
            plan = [row[-1] for row in conn.execute(text(f"EXPLAIN QUERY PLAN {compiled}"))]
            scans = [step for step in plan if step.startswith("SCAN ") and "evidence_jobs" in step]
            assert not scans, plan
            assert any(
                "USING INDEX ix_evidence_jobs_state" in step or "USING COVERING INDEX" in step for step in plan
            ), plan
        # overdue tenant-months: the registry once, each tenant one seek of its publications
        overdue = ledger_reads._overdue(ledger, "2026-10", 0.0).compile(conn, compile_kwargs={"literal_binds": True})
        plan = [row[-1] for row in conn.execute(text(f"EXPLAIN QUERY PLAN {overdue}"))]
        assert any(
            "evidence_publications USING" in step and "INDEX ix_evidence_publications_tenant_period" in step
            for step in plan
        ), plan


def test_a_month_is_overdue_from_02_00_utc_on_the_second_of_the_next():
    assert overdue_deadline_cron() == "0 2 2 * *"  # the monthly assets' freshness deadline (defs/assets.py)
    october_closed = datetime(2026, 11, 1, tzinfo=timezone.utc)
    assert overdue_period(datetime(2026, 11, 2, 1, 59, tzinfo=timezone.utc)) == (
        "2026-09",
        datetime(2026, 10, 1, tzinfo=timezone.utc),
    )
    assert overdue_period(datetime(2026, 11, 2, 2, tzinfo=timezone.utc)) == ("2026-10", october_closed)
    assert overdue_period(datetime(2027, 1, 1, tzinfo=timezone.utc))[0] == "2026-11"  # across the year


@pytest.mark.parametrize("backend", ["local"], indirect=True)
def test_a_registered_tenants_month_without_its_bundle_past_the_deadline_is_overdue(runtime):
    """acme-books's 2026-10 is published, evergreen-market's is not: from the deadline on, one tenant-month is
    overdue; a tenant registered after the month closed owes none, and a month before the first none either."""
    from prometheus_client import generate_latest

    from evidence_pipeline.metrics.http import registry_for

    ledger = runtime.ledger
    assert "evidence_tenant_months_overdue 0.0" in generate_latest(registry_for(runtime)).decode()  # at zero
    registered = datetime(2026, 10, 15, tzinfo=timezone.utc).timestamp()
    with ledger.engine.begin() as conn:  # as if both had been registered in October
        conn.execute(ledger.tenants.update().values(registered_at=registered))
    run_tenant_month(runtime, SMALL, RunInfo("overdue"))
    deadline = datetime(2026, 11, 2, 2, tzinfo=timezone.utc).timestamp()
    assert ledger_reads.read(ledger, deadline - 1).overdue == 0  # September: closed before either registered
    assert ledger_reads.read(ledger, deadline).overdue == 1  # evergreen-market's October
    assert ledger_reads.read(ledger, deadline, first_period="2026-11").overdue == 0
    run_tenant_month(runtime, LARGE, RunInfo("overdue"))
    assert ledger_reads.read(ledger, deadline).overdue == 0


@pytest.mark.skipif(not shutil.which("promtool"), reason="promtool (Debian's prometheus) is not installed")
def test_the_alert_rules_pass_promtool():
    rules = ROOT / "deploy" / "prometheus"
    checked = subprocess.run(["promtool", "check", "rules", str(rules / "alerts.yaml")], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run(
        ["promtool", "test", "rules", "alerts_test.yaml"], cwd=rules, capture_output=True, text=True
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_alert_links_a_runbook_page_in_the_nav_and_every_metric_is_in_the_reference():
    import yaml

    from evidence_pipeline_tests.support.docs_pages import generated_page

    rules = yaml.safe_load((ROOT / "deploy" / "prometheus" / "alerts.yaml").read_text())["groups"][0]["rules"]
    navigation = (ROOT / "mkdocs.yml").read_text()
    for rule in rules:
        page = rule["annotations"]["runbook_url"].strip("/") + ".md"
        assert (ROOT / "docs" / page).is_file() and f": {page}\n" in navigation, rule["alert"]
        assert rule["alert"] in (ROOT / "docs" / page).read_text()
    reference = generated_page("reference/metrics.md")
    assert all(f"| `{metric.name}` | {metric.type} |" in reference for metric in METRICS)


@pytest.mark.parametrize("backend", ["local"], indirect=True)
def test_every_worker_of_a_server_reports_every_workers_admissions(backend, documents):
    """`evidence intake serve --workers 2`: the kernel spreads connections over the workers, and whichever worker
    a scrape reaches counts the requests that all of them answered."""
    with serving(backend, workers=2) as (port, _):
        base = f"http://127.0.0.1:{port}"
        for _ in range(20):  # new connections each: both workers answer some
            assert httpx.get(f"{base}/openapi.json", timeout=30).status_code == 200
        scrapes = [scrape(f"{base}/metrics") for _ in range(6)]
    counts = {
        value(samples, "evidence_admission_duration_seconds_count", endpoint="/openapi.json", code="200")
        for samples in scrapes
    }
    assert counts == {20}
    assert {value(samples, "evidence_intake_uploads_receiving") for samples in scrapes} == {0}  # the live workers'
