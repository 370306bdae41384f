"""materialize() of the assets on a real SQLite Dagster instance with tenants added."""

import io
import os
from datetime import date
from unittest.mock import ANY
from urllib.parse import quote

import dagster
import pytest
import sqlalchemy as sa
from dagster import AssetCheckKey, AssetKey, AssetRecordsFilter, materialize
from pypdf import PdfReader

from evidence_pipeline.audit.verify import verify_bundle
from evidence_pipeline.definitions import defs
from evidence_pipeline.defs.assets import evidence_bundle, monthly_report, report_preview, source_revision
from evidence_pipeline.defs.demo import complete_months, run_demo
from evidence_pipeline.defs.extensions import provenance
from evidence_pipeline.defs.partitions import partition_key_for, range_tags
from evidence_pipeline.defs.verdicts import CHECK_NAME
from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.models import EventType, TenantMonth
from evidence_pipeline.monthly import pipeline, publication
from evidence_pipeline.monthly.document_outcomes import counts, outcome
from evidence_pipeline.monthly.validate import validate_report
from evidence_pipeline.synthetic.demo_data import DEMO_TENANTS, demo_transactions
from evidence_pipeline_tests.support.fixture_sources import FIXTURE, FIXTURE_MONTHS, SMALL, publish_revision
from evidence_pipeline_tests.support.signers import Signers
from evidence_pipeline_tests.support.tampering import overwrite

ASSETS = [source_revision, monthly_report, evidence_bundle]
ASSET_NAMES = [a.key.to_user_string() for a in ASSETS]
PARTITIONS = FIXTURE_MONTHS


def _materialize(instance, evidence, tenant_month, **kwargs):
    return materialize(
        ASSETS,
        instance=instance,
        partition_key=partition_key_for(tenant_month),
        resources={"evidence": evidence},
        **kwargs,
    )


def _metadata(instance, asset: str, tenant_month: TenantMonth) -> dict:
    records = instance.fetch_materializations(
        AssetRecordsFilter(asset_key=AssetKey(asset), asset_partitions=[partition_key_for(tenant_month)]), limit=1
    ).records
    return {k: v.value for k, v in records[0].asset_materialization.metadata.items()}


def _lineage(bundle: dict) -> list[tuple]:
    """The bundle's lineage table as (order, step, sha256) rows."""
    return [(r.data["order"], r.data["step"], r.data["sha256"]) for r in bundle["lineage"].records]


def test_materializes_lineage_and_metadata_per_partition(instance, evidence, runtime):
    for tenant_month in PARTITIONS:
        assert _materialize(instance, evidence, tenant_month).success
    for tenant_month in PARTITIONS:
        pinned = _metadata(instance, "source_revision", tenant_month)
        report = _metadata(instance, "monthly_report", tenant_month)
        bundle = _metadata(instance, "evidence_bundle", tenant_month)
        assert report["source_sha256"] == pinned["source_sha256"] == bundle["source_sha256"]
        assert bundle["unsigned_sha256"] == report["unsigned_sha256"] and report["pages"] >= 3
        assert bundle["newly_published"] is True and bundle["location"] == runtime.archive.uri(bundle["bundle_key"])
        assert all(isinstance(bundle[t], float) for t in ("sign_ms", "publish_ms")) and report["render_ms"] > 0
        assert bundle["key_id"].startswith("ed25519-")
        # The lineage: a table with typed columns (sortable in the UI, digests whole), source to manifest.
        assert [(c.name, c.type) for c in bundle["lineage"].schema.columns] == [
            ("order", "int"),
            ("step", "string"),
            ("sha256", "string"),
        ]
        assert _lineage(bundle) == [
            (1, "source revision", bundle["source_sha256"]),
            (2, "document outcomes", bundle["documents_sha256"]),
            (3, f"unsigned report ({report['renderer_version']})", bundle["unsigned_sha256"]),
            (4, "signed report.pdf", bundle["report_sha256"]),
            (5, f"statement.dsse.json ({bundle['key_id']})", bundle["statement_sha256"]),
            (6, f"manifest.json (ledger #{bundle['ledger_seq']})", bundle["manifest_sha256"]),
        ]
        # Links are root-relative (the UI they are clicked in opens them); archive keys are paths.
        key = quote(str(partition_key_for(tenant_month)))
        assert bundle["monthly_report partition"] == f"/assets/monthly_report?view=partitions&partition={key}"
        assert bundle["verification result"].startswith("/runs/")
        assert report["source_revision partition"].startswith("/assets/source_revision?")
        raw = (
            instance.fetch_materializations(
                AssetRecordsFilter(
                    asset_key=evidence_bundle.key, asset_partitions=[str(partition_key_for(tenant_month))]
                ),
                limit=1,
            )
            .records[0]
            .asset_materialization.metadata
        )
        assert isinstance(raw["bundle_key"], dagster.PathMetadataValue)
        assert str(runtime.settings.home) not in str(bundle)  # no local paths in metadata
        assert verify_bundle(runtime.archive, bundle["bundle_key"]).ok
        assert report["gate"] == "passed" and report["validate_ms"] > 0 and bundle["lane"] == "archive"
        assert bundle["queue_wait_ms"] >= 0 and bundle["render_ms"] == report["render_ms"]


def test_rematerializing_converges_on_the_published_bundle(instance, evidence, runtime):
    first = _materialize(instance, evidence, SMALL)
    second = _materialize(instance, evidence, SMALL)
    assert first.success and second.success
    bundle = _metadata(instance, "evidence_bundle", SMALL)
    assert bundle["newly_published"] is False
    assert len(runtime.archive.list(f"bundles/{SMALL.tenant}/{SMALL.period}")) == 3


def test_a_correction_supersedes_and_the_latest_materialization_shows_the_current_bundle(instance, evidence, runtime):
    assert _materialize(instance, evidence, SMALL).success
    first = _metadata(instance, "evidence_bundle", SMALL)
    assert "supersedes" not in first and first["current"] is True and first["current_bundle"] == first["identity"]
    corrected = demo_transactions(SMALL)
    corrected.loc[0, "amount_minor"] += 100
    publish_revision(runtime, SMALL, corrected)
    assert _materialize(instance, evidence, SMALL).success
    latest = _metadata(instance, "evidence_bundle", SMALL)  # the partition's latest materialization
    assert latest["identity"] != first["identity"] and latest["newly_published"] is True
    assert latest["current"] is True and latest["current_bundle"] == latest["identity"]
    assert latest["supersedes"] == first["identity"] and latest["supersedes_reason"] == "source_revision"
    assert latest["supersedes_location"] == first["bundle_key"]
    assert _lineage(latest)[:2] == [
        (1, "supersedes (source_revision)", first["identity"]),
        (2, "source revision", latest["source_sha256"]),
    ]


def test_failed_gate_blocks_signing(instance, evidence, runtime, monkeypatch, tmp_path):
    # Simulate a renderer bug: the report lacks a total that the source says must be there.
    real_totals = pipeline.report_totals
    monkeypatch.setattr(pipeline, "report_totals", lambda frame, documents: ("999,999,999.99 EUR",))
    result = _materialize(instance, evidence, SMALL, raise_on_error=False)
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failure.step_key == "monthly_report"
    assert failure.event_specific_data.user_failure_data.metadata["reason_code"].value == "REPORT_INVALID"
    materialized = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    assert materialized == {"source_revision"}  # a report that failed the gate is never materialized
    assert runtime.archive.list("bundles") == []
    [job] = runtime.ledger.jobs_in("rejected")
    assert job.last_reason == "REPORT_INVALID" and (job.tenant, job.period) == (SMALL.tenant, SMALL.period)

    monkeypatch.setattr(pipeline, "report_totals", real_totals)  # fixed, but the job stays closed until a replay
    again = _materialize(instance, evidence, SMALL, raise_on_error=False)
    assert not again.success and not again.get_asset_materialization_events()
    Signers(runtime.ledger, tmp_path / "actors").replay(job.job_id, "renderer bug fixed")
    assert _materialize(instance, evidence, SMALL).success
    assert runtime.ledger.job(job.job_id).state == "succeeded"


def test_terminal_source_error_fails_without_retries(instance, evidence):
    missing = TenantMonth("acme-books", "2025-01")
    result = _materialize(instance, evidence, missing, raise_on_error=False)
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failure.step_key == "source_revision"
    assert failure.event_specific_data.user_failure_data.metadata["reason_code"].value == "SOURCE_NOT_FOUND"
    assert not [e for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]


def test_a_tenant_partition_the_service_never_knew_fails_at_once(instance, evidence, runtime):
    # An analyst adds a tenant partition in the launch dialog (a typo, say): the tenant registry does not hold it.
    # Its run fails at its first step with the code, on one line, and is not retried.
    instance.add_dynamic_partitions("tenant", ["acme-bokks"])
    unknown = TenantMonth("acme-bokks", SMALL.period)
    result = _materialize(instance, evidence, unknown, raise_on_error=False)
    assert not result.success and not result.get_asset_materialization_events()
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    data = failure.event_specific_data.user_failure_data
    assert failure.step_key == "source_revision" and data.metadata["reason_code"].value == "TENANT_UNKNOWN"
    assert data.description == f"source_revision: 1 of 1 tenant-months failed: acme-bokks {SMALL.period} TENANT_UNKNOWN"
    assert failure.event_specific_data.error.to_string() == data.description + "\n"  # no stack trace
    assert not [e for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]
    assert runtime.ledger.jobs_in("accepted") == []
    assert "acme-bokks" not in runtime.tenants.standing(["acme-bokks"])
    # The same month of a registered tenant (its source published) still runs.
    assert _materialize(instance, evidence, SMALL).success


def test_a_tenant_with_events_but_no_registration_gets_no_bundle(instance, evidence, runtime):
    # Events of a tenant are no registration: a source published for it (by the landing sensor of old, or a token
    # issued to it) does not let a partition added in the UI have its evidence signed.
    unregistered = TenantMonth("initech", SMALL.period)
    publication.publish(runtime, publication.prepare_frame(unregistered, demo_transactions(SMALL)), FIXTURE)
    instance.add_dynamic_partitions("tenant", [unregistered.tenant])
    result = _materialize(instance, evidence, unregistered, raise_on_error=False)
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failure.event_specific_data.user_failure_data.metadata["reason_code"].value == "TENANT_UNKNOWN"
    assert not result.get_asset_materialization_events()
    assert runtime.ledger.events_of_type(EventType.BUNDLE_PUBLISHED, unregistered.tenant) == []


@pytest.mark.slow
def test_demo_publishes_every_tenant_and_a_second_run_adds_nothing(instance, evidence, runtime):
    assert complete_months(date(2026, 1, 15), 3) == ["2025-10", "2025-11", "2025-12"]
    first = run_demo(1, date(2026, 11, 30), evidence=evidence, instance=instance, code_location=defs)
    second = run_demo(1, date(2026, 11, 30), evidence=evidence, instance=instance, code_location=defs)
    assert sorted(b.tenant_month.tenant for b in first.months) == sorted(DEMO_TENANTS)
    assert all(b.newly_published for b in first.months) and not any(b.newly_published for b in second.months)
    assert [b.report_sha256 for b in first.months] == [b.report_sha256 for b in second.months]
    assert len(runtime.archive.list("bundles")) == 3 * len(DEMO_TENANTS)
    runs = instance.get_runs()  # the named jobs, one run per tenant each, each charged to its tenant
    evidence_runs = [run for run in runs if run.job_name == "monthly_evidence"]
    page_runs = [run for run in runs if run.job_name == "document_page_job"]
    assert len(evidence_runs) + len(page_runs) == len(runs)
    assert sorted(run.tags["evidence/tenant"] for run in evidence_runs) == sorted(list(DEMO_TENANTS) * 2)
    # The documents: one page run per tenant the first time; the second demo finds the same jobs, all done.
    # three dispatch rounds per tenant: its documents, its agreement's part reviews, the merge of the parts
    assert sorted(run.tags["evidence/tenant"] for run in page_runs) == sorted([*DEMO_TENANTS] * 3)
    assert [job.job_id for job in first.documents] == [job.job_id for job in second.documents]
    assert first.documents_period == "2026-10" and {job.period for job in first.documents} == {"2026-10"}
    expected = [  # the agreement's parts reviewed under the district ruleset (the addendum rejected), then merged
        ("contract-review @ district-agreement/2026.1", "rejected: rejected (REVIEW_POLICY_REJECTED)", 1),
        ("contract-review @ district-agreement/2026.1", "succeeded: approved", 3),
        ("contract-review @ lease-review/2026.1", "rejected: rejected (REVIEW_POLICY_REJECTED)", 3),
        ("contract-review @ lease-review/2026.1", "succeeded: approved", 2),
        ("merge", "succeeded", 1),
        ("redact", "succeeded: no_matches", 1),
        ("redact", "succeeded: redacted", 1),
        ("split", "succeeded", 1),
    ]
    for tenant in DEMO_TENANTS:
        jobs = [outcome(job) for job in second.documents if job.tenant == tenant]
        assert [
            (op.split(" @ ")[0] if op.startswith("redact") else op, result, n) for op, result, n in counts(jobs)
        ] == expected
    # The month's report lists them, reviews by decision and redactions per template version and outcome.
    [key] = [k for k in runtime.archive.list("bundles/acme-books/2026-10") if k.endswith("/report.pdf")]
    report = runtime.archive.get(key)
    text = " ".join(page.extract_text() for page in PdfReader(io.BytesIO(report)).pages)
    [version] = {
        job.request["template_version"]
        for job in second.documents
        if job.tenant == "acme-books" and job.operation == "redact"
    }
    for line in (
        "contract-review @ lease-review/2026.1",
        "succeeded: approved",
        "REVIEW_POLICY_REJECTED",
        f"redact @ {version[:12]}",
        "succeeded: no_matches",
        "succeeded: redacted",
    ):
        assert line in text


@pytest.mark.parametrize("backend", ["aws"], indirect=True)
def test_production_instance_keeps_runs_and_events_in_postgres(instance, evidence, runtime, backend):
    result = _materialize(instance, evidence, SMALL)
    engine = sa.create_engine(backend["EVIDENCE_LEDGER_URL"])
    with engine.connect() as conn:
        status = conn.execute(sa.text("SELECT status FROM runs WHERE run_id = :id"), {"id": result.run_id}).scalar()
        events = conn.execute(
            sa.text("SELECT count(*) FROM event_logs WHERE run_id = :id"), {"id": result.run_id}
        ).scalar()
        published = conn.execute(sa.text("SELECT count(*) FROM evidence_publications")).scalar()
    engine.dispose()
    assert status == "SUCCESS" and events > 10 and published == 1
    bundle = _metadata(instance, "evidence_bundle", SMALL)
    assert bundle["location"].startswith("s3://") and verify_bundle(runtime.archive, bundle["bundle_key"]).ok


def test_a_report_rendered_from_another_revision_is_never_signed(instance, evidence, runtime):
    """A partial re-materialization can pin revision B while monthly_report still holds A's rendering."""
    assert _materialize(instance, evidence, SMALL).success
    corrected = demo_transactions(SMALL)
    corrected.loc[0, "amount_minor"] += 100
    publish_revision(runtime, SMALL, corrected)
    key = partition_key_for(SMALL)
    assert materialize(
        [source_revision], instance=instance, partition_key=key, resources={"evidence": evidence}
    ).success
    result = materialize(
        [evidence_bundle], instance=instance, partition_key=key, resources={"evidence": evidence}, raise_on_error=False
    )
    assert not result.success and not result.get_asset_materialization_events()
    assert len({k.rsplit("/", 1)[0] for k in runtime.archive.list("bundles")}) == 1  # only A's bundle
    assert runtime.ledger.jobs_in("rejected", "dead") == []  # re-materializing the report is the remedy
    assert _materialize(instance, evidence, SMALL).success and len(runtime.ledger.jobs_in("succeeded")) == 2


RANGE_MONTHS = [TenantMonth("acme-books", f"2026-{m:02d}") for m in range(5, 11)]


def _materialize_range(instance, evidence, first: TenantMonth, last: TenantMonth, assets=ASSETS, **kwargs):
    """One run over a partition range, as a backfill under the assets' backfill policy launches it."""
    return materialize(
        assets, instance=instance, resources={"evidence": evidence}, tags=range_tags(first, last), **kwargs
    )


def test_a_range_run_records_every_partition_in_dagster_and_in_the_ledger(instance, evidence, runtime, monkeypatch):
    monkeypatch.setenv("EVIDENCE_WORKERS", "2")  # the range is spread over two worker processes
    for tenant_month in RANGE_MONTHS:
        publish_revision(runtime, tenant_month, demo_transactions(tenant_month))
    result = _materialize_range(instance, evidence, RANGE_MONTHS[0], RANGE_MONTHS[-1])
    assert result.success
    events = result.get_asset_materialization_events()
    assert len(events) == 3 * len(RANGE_MONTHS)  # one per partition per asset, in one run
    lane = "archive lane: 6 partition(s), up to 2 worker process(es) at once"
    assert _lane_lines(instance, result.run_id) == [lane] * 3  # EVIDENCE_WORKERS, in each step

    timed = {(e["period"], e["details"]["lane"]): e["details"] for e in runtime.ledger.events_of_type("stages.timed")}
    assert sorted(timed) == [(tm.period, "archive") for tm in RANGE_MONTHS]
    for tenant_month in RANGE_MONTHS:
        report = _metadata(instance, "monthly_report", tenant_month)
        bundle = _metadata(instance, "evidence_bundle", tenant_month)
        assert bundle["unsigned_sha256"] == report["unsigned_sha256"] and report["gate"] == "passed"
        assert verify_bundle(runtime.archive, bundle["bundle_key"]).ok
        clocks = timed[(tenant_month.period, "archive")]
        assert clocks["render_ms"] == report["render_ms"] == bundle["render_ms"] > 0
        assert clocks["sign_ms"] == bundle["sign_ms"] > 0 and clocks["queue_wait_ms"] == bundle["queue_wait_ms"] >= 0
        [published] = [e for e in runtime.ledger.events_about("bundle.published", bundle["report_sha256"])]
        assert published["details"]["run_id"] == result.run_id

    again = _materialize_range(instance, evidence, RANGE_MONTHS[0], RANGE_MONTHS[-1])
    assert again.success and not any(
        _metadata(instance, "evidence_bundle", tm)["newly_published"] for tm in RANGE_MONTHS
    )


def _observed(result) -> dict:
    """(asset, partition) -> the observation a run recorded there."""
    return {
        (o.asset_key.to_user_string(), o.partition): o
        for o in (
            e.event_specific_data.asset_observation
            for e in result.all_events
            if e.event_type_value == "ASSET_OBSERVATION"
        )
    }


def test_a_failed_tenant_month_is_its_own_and_the_rest_of_the_range_publishes(instance, evidence, runtime):
    # 2026-08 has no source revision; 2026-09 and 2026-10 (fixtures) do.
    result = _materialize_range(instance, evidence, TenantMonth("acme-books", "2026-08"), SMALL, raise_on_error=False)
    assert result.success and not [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    keys = ["2026-08-01|acme-books", "2026-09-01|acme-books", "2026-10-01|acme-books"]
    materialized = {(e.asset_key.to_user_string(), e.partition) for e in result.get_asset_materialization_events()}
    assert materialized == {(asset, key) for asset in ASSET_NAMES for key in keys[1:]}  # the others published
    for tenant_month in (TenantMonth("acme-books", "2026-09"), SMALL):
        assert verify_bundle(runtime.archive, _metadata(instance, "evidence_bundle", tenant_month)["bundle_key"]).ok
    verdicts = [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    assert sorted((v.partition, v.passed) for v in verdicts) == [(keys[1], True), (keys[2], True)]
    # Its check did not run and the run did not fail: no execution of it reads failed (the UI: not executed).
    history = instance.event_log_storage.get_asset_check_execution_history(
        AssetCheckKey(evidence_bundle.key, CHECK_NAME), limit=10
    )
    assert sorted((h.partition, h.status.value) for h in history) == [(keys[1], "SUCCEEDED"), (keys[2], "SUCCEEDED")]
    # The failed one says why on its own partition of every asset of the run, with its code and one-line message.
    observed = _observed(result)
    assert set(observed) == {(asset, keys[0]) for asset in ASSET_NAMES}
    assert observed[("source_revision", keys[0])].description.startswith("not materialized: SOURCE_NOT_FOUND: ")
    because = (
        f"not materialized: run {result.run_id[:8]} stopped at source_revision: acme-books 2026-08 "
        f"{observed[('source_revision', keys[0])].description.removeprefix('not materialized: ')}"
    )
    assert because.count("SOURCE_NOT_FOUND: ") == 1  # the code and its one-line message, on the later assets too
    assert [observed[(asset, keys[0])].description for asset in ASSET_NAMES[1:]] == [because, because]
    for observation in observed.values():
        assert observation.metadata["reason_code"].value == "SOURCE_NOT_FOUND"
        table = observation.metadata["failed_partitions"]
        assert [c.name for c in table.schema.columns] == ["tenant", "month", "code", "message"]
        assert [r.data for r in table.records] == [
            {"tenant": "acme-books", "month": "2026-08", "code": "SOURCE_NOT_FOUND", "message": ANY}
        ]
    warnings = [e.user_message for e in instance.all_logs(result.run_id) if "tenant-months failed" in e.user_message]
    assert warnings == [
        "source_revision: 1 of 3 tenant-months failed: acme-books 2026-08 SOURCE_NOT_FOUND; the other 2 go on"
    ]
    assert not [e for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]  # terminal: not retried


def test_a_range_that_failed_whole_fails_with_each_reason_and_no_stack_trace(instance, evidence):
    first, last = TenantMonth("acme-books", "2025-01"), TenantMonth("acme-books", "2025-02")  # no sources
    result = _materialize_range(instance, evidence, first, last, raise_on_error=False)
    assert not result.success and not result.get_asset_materialization_events()
    cpus = len(os.sched_getaffinity(0))  # EVIDENCE_WORKERS unset: a run in process runs alone, on every CPU
    [lane] = _lane_lines(instance, result.run_id)  # only source_revision ran: nothing was left to go on
    assert lane == f"archive lane: 2 partition(s), up to {cpus} worker process(es) at once"
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    failure_metadata = failure.event_specific_data.user_failure_data.metadata
    assert failure.step_key == "source_revision" and failure_metadata["reason_code"].value == "SOURCE_NOT_FOUND"
    line = (
        "source_revision: 2 of 2 tenant-months failed: acme-books 2025-01 SOURCE_NOT_FOUND, "
        "acme-books 2025-02 SOURCE_NOT_FOUND"
    )
    assert failure.event_specific_data.user_failure_data.description == line
    # No stack trace (Dagster's frames, install paths): the step failure and the run failure read as that line.
    assert failure.event_specific_data.error.to_string() == line + "\n"
    [run_failure] = instance.all_logs(result.run_id, of_type=dagster.DagsterEventType.RUN_FAILURE)
    assert "Stack Trace" not in run_failure.message and ".py" not in run_failure.message, run_failure.message
    assert [r.data["code"] for r in failure_metadata["failed_partitions"].records] == ["SOURCE_NOT_FOUND"] * 2
    # Every partition the run did not materialize says why: all of the later assets' range too.
    keys = ["2025-01-01|acme-books", "2025-02-01|acme-books"]
    assert set(_observed(result)) == {(asset, key) for asset in ASSET_NAMES for key in keys}
    assert not [e for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]


RANGE_TENANTS = [f"t-{n:03d}" for n in range(100)]
# month -> the tenants that fail, by how: no source for the month, a stored source that changed since publication
# (both at source_revision), a report the gate rejects (at monthly_report), the archive down for them (at
# evidence_bundle: transient, it outlasts the step's retries)
FAILING = {
    "2026-04": {"SOURCE_NOT_FOUND": RANGE_TENANTS[:1]},
    "2026-05": {
        "SOURCE_NOT_FOUND": RANGE_TENANTS[:3],
        "SOURCE_DIGEST_MISMATCH": RANGE_TENANTS[3:6],
        "REPORT_INVALID": RANGE_TENANTS[6:9],
        "STORE_UNAVAILABLE": RANGE_TENANTS[9:10],
    },
    "2026-06": {
        "SOURCE_NOT_FOUND": RANGE_TENANTS[:40],
        "SOURCE_DIGEST_MISMATCH": RANGE_TENANTS[40:70],
        "REPORT_INVALID": RANGE_TENANTS[70:99],
    },
}
FAILED_AT = {"SOURCE_NOT_FOUND": 0, "SOURCE_DIGEST_MISMATCH": 0, "REPORT_INVALID": 1, "STORE_UNAVAILABLE": 2}


def _failing(period: str, code: str) -> list[str]:
    return FAILING[period].get(code, [])


@pytest.mark.slow
def test_in_a_range_of_100_each_failing_tenant_month_fails_alone_and_exactly_the_others_publish(
    instance, evidence, runtime, monkeypatch
):
    monkeypatch.setenv("EVIDENCE_WORKERS", "1")  # one worker process per step: the CPU stays modest
    instance.add_dynamic_partitions("tenant", RANGE_TENANTS)
    known = demo_transactions(TenantMonth("acme-books", "2026-03")).head(4)
    for tenant in RANGE_TENANTS:  # known to the service: a source of another month
        publish_revision(runtime, TenantMonth(tenant, "2026-03"), known.copy())
    for period in FAILING:
        frame = demo_transactions(TenantMonth("acme-books", period)).head(4)  # a small, valid month
        for tenant in RANGE_TENANTS:
            if tenant not in _failing(period, "SOURCE_NOT_FOUND"):
                revision = publish_revision(runtime, TenantMonth(tenant, period), frame.copy())
                if tenant in _failing(period, "SOURCE_DIGEST_MISMATCH"):  # its bytes no longer match its digest
                    overwrite(runtime, revision.key, b"txn_id\n", store=runtime.sources)
    # The gate finds other totals in these tenants' reports; the archive is down for these (forked workers inherit
    # both).
    real_totals, real_publish = pipeline.report_totals, pipeline.publish_and_time
    bad = {(tenant, period) for period in FAILING for tenant in _failing(period, "REPORT_INVALID")}
    down = {(tenant, period) for period in FAILING for tenant in _failing(period, "STORE_UNAVAILABLE")}

    def totals(frame, documents):
        month = documents.tenant_month
        return ("999,999,999.99 EUR",) if (month.tenant, month.period) in bad else real_totals(frame, documents)

    def publish(rt, item, run):
        month = item[0].revision.tenant_month
        if (month.tenant, month.period) in down:
            raise EvidenceError("STORE_UNAVAILABLE", "the archive did not answer")
        return real_publish(rt, item, run)

    monkeypatch.setattr(pipeline, "report_totals", totals)
    monkeypatch.setattr(pipeline, "publish_and_time", publish)

    for period, failing in FAILING.items():
        result = _materialize_range(
            instance,
            evidence,
            TenantMonth(RANGE_TENANTS[0], period),
            TenantMonth(RANGE_TENANTS[-1], period),
            raise_on_error=False,
        )
        assert result.success
        failed = {tenant for tenants in failing.values() for tenant in tenants}
        publishable = [t for t in RANGE_TENANTS if t not in failed]
        published = {
            e.partition for e in result.get_asset_materialization_events() if e.asset_key == evidence_bundle.key
        }
        assert published == {str(partition_key_for(TenantMonth(t, period))) for t in publishable}
        assert (
            sorted(e["tenant"] for e in runtime.ledger.events_of_type("bundle.published") if e["period"] == period)
            == publishable
        )
        # Each failed tenant-month is recorded for itself: its code on its partition of the asset where it failed
        # and of the later ones, and its job in its own state.
        codes = {
            (o.asset_key.to_user_string(), o.partition): o.metadata["reason_code"].value
            for o in _observed(result).values()
        }
        assert codes == {
            (asset, str(partition_key_for(TenantMonth(tenant, period)))): code
            for code, tenants in failing.items()
            for tenant in tenants
            for asset in ASSET_NAMES[FAILED_AT[code] :]
        }
        jobs = {
            j.tenant: j
            for j in runtime.ledger.jobs_in("accepted", "running", "succeeded", "rejected", "dead")
            if j.period == period
        }
        assert sorted(t for t, j in jobs.items() if j.state == "rejected") == _failing(period, "REPORT_INVALID")
        assert {jobs[t].last_reason for t in _failing(period, "REPORT_INVALID")} <= {"REPORT_INVALID"}
        for tenant in _failing(period, "STORE_UNAVAILABLE"):  # retry_wait: the retry sensor runs it when due
            job = jobs[tenant]
            assert (job.state, job.last_reason, job.attempts) == ("accepted", "STORE_UNAVAILABLE", 4)
            assert job.next_attempt_at and job.last_message == "the archive did not answer"
        assert sorted(t for t, j in jobs.items() if j.state == "succeeded") == publishable


def test_a_bundle_backfilled_alone_fails_saying_what_to_select(instance, evidence):
    result = materialize(
        [evidence_bundle],
        instance=instance,
        partition_key=partition_key_for(SMALL),
        resources={"evidence": evidence},
        raise_on_error=False,
    )
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failure.event_specific_data.user_failure_data.description == (
        "evidence_bundle: 1 of 1 tenant-months failed: acme-books 2026-10 UPSTREAM_NOT_MATERIALIZED; select "
        "source_revision, monthly_report and evidence_bundle together (or launch the monthly_evidence job)"
    )


def test_oversize_tenant_months_take_their_own_lane_with_the_same_checks(instance, evidence, runtime, monkeypatch):
    monkeypatch.setenv("EVIDENCE_OVERSIZE_BYTES", "1")  # every source is now above the oversize threshold
    result = _materialize_range(instance, evidence, TenantMonth("acme-books", "2026-09"), SMALL)
    assert result.success
    for tenant_month in (TenantMonth("acme-books", "2026-09"), SMALL):
        assert _metadata(instance, "source_revision", tenant_month)["lane"] == "oversize"
        bundle = _metadata(instance, "evidence_bundle", tenant_month)
        assert bundle["lane"] == "oversize" and verify_bundle(runtime.archive, bundle["bundle_key"]).ok
    assert {e["details"]["lane"] for e in runtime.ledger.events_of_type("stages.timed")} == {"oversize"}


def test_the_preview_lane_is_quick_and_never_evidence(instance, evidence, runtime, tmp_path):
    result = _materialize_range(
        instance, evidence, TenantMonth("acme-books", "2026-09"), SMALL, assets=[source_revision, report_preview]
    )
    assert result.success
    preview = _metadata(instance, "report_preview", SMALL)
    assert preview["lane"] == "preview" and preview["location"] == runtime.previews.uri(
        f"previews/{SMALL.tenant}/{SMALL.period}/{preview['preview_sha256']}.pdf"
    )
    pdf = runtime.previews.get(f"previews/{SMALL.tenant}/{SMALL.period}/{preview['preview_sha256']}.pdf")
    with pytest.raises(EvidenceError) as rejected:  # the gate refuses it: a preview cannot pass as a report
        validate_report(io.BytesIO(pdf), pipeline.sources.pin_latest(runtime.sources, SMALL), ())
    assert rejected.value.code == "REPORT_INVALID"
    assert runtime.archive.list("bundles") == [] and runtime.ledger.jobs_in("succeeded") == []
    assert not runtime.ledger.events_of_type("report.rendered")  # not recorded as evidence

    assert _materialize(instance, evidence, SMALL).success  # the archive lane, for comparison
    assert preview["pages"] < _metadata(instance, "monthly_report", SMALL)["pages"]


def _record(instance, asset: str, tenant_month: TenantMonth):
    return instance.fetch_materializations(
        AssetRecordsFilter(asset_key=AssetKey(asset), asset_partitions=[partition_key_for(tenant_month)]), limit=1
    ).records[0]


def test_each_partition_of_a_range_run_has_its_own_data_version_and_upstream_events(instance, evidence):
    months = [TenantMonth("acme-books", "2026-09"), SMALL]
    assert _materialize_range(instance, evidence, months[0], months[-1]).success
    versions = set()
    for tenant_month in months:
        source, report, bundle = (_record(instance, asset, tenant_month) for asset in ASSET_NAMES)
        meta = {
            r.asset_key.to_user_string(): {k: v.value for k, v in r.asset_materialization.metadata.items()}
            for r in (source, report, bundle)
        }
        tags = {r.asset_key.to_user_string(): r.asset_materialization.tags for r in (source, report, bundle)}
        # The data version is the partition's own digest; the input pointer is the same partition's upstream event.
        assert tags["source_revision"]["dagster/data_version"] == meta["source_revision"]["source_sha256"]
        assert tags["monthly_report"]["dagster/data_version"] == meta["monthly_report"]["unsigned_sha256"]
        assert tags["monthly_report"]["dagster/input_event_pointer/source_revision"] == str(source.storage_id)
        assert (
            tags["monthly_report"]["dagster/input_data_version/source_revision"]
            == tags["source_revision"]["dagster/data_version"]
        )
        assert tags["evidence_bundle"]["dagster/data_version"] == meta["evidence_bundle"]["identity"]
        assert tags["evidence_bundle"]["dagster/input_event_pointer/monthly_report"] == str(report.storage_id)
        assert (
            tags["evidence_bundle"]["dagster/input_data_version/monthly_report"]
            == tags["monthly_report"]["dagster/data_version"]
        )
        versions.add(tags["evidence_bundle"]["dagster/data_version"])
        # One click from the bundle to the same partition of its report and its source revision (root-relative).
        link = f"partition={tenant_month.period}-01%7Cacme-books"
        ui = "/assets"
        assert meta["evidence_bundle"]["monthly_report partition"] == f"{ui}/monthly_report?view=partitions&{link}"
        assert meta["evidence_bundle"]["source_revision partition"] == f"{ui}/source_revision?view=partitions&{link}"
    assert len(versions) == len(months)


def test_the_provenance_wrapper_is_installed_and_guarded(monkeypatch):
    from dagster._core.execution.plan import execute_step

    assert provenance.install() and execute_step._get_output_asset_events is provenance._output_asset_events
    monkeypatch.setattr(execute_step, "_get_output_asset_events", provenance._dagster_output_asset_events)
    monkeypatch.setattr(dagster, "__version__", "1.13.28")
    with pytest.warns(UserWarning, match="checked against dagster==1.13.27"):
        assert not provenance.install()
    assert execute_step._get_output_asset_events is provenance._dagster_output_asset_events


def test_a_run_whose_partitions_differ_from_its_range_fails_before_any_work(instance, evidence, runtime):
    # What a job backfill's range run looks like when nothing removed the first partition's dimension tags.
    first = TenantMonth("acme-books", "2026-09")
    tags = range_tags(first, SMALL) | {
        "dagster/partition/month": "2026-09-01",
        "dagster/partition/tenant": "acme-books",
    }
    result = materialize(ASSETS, instance=instance, resources={"evidence": evidence}, tags=tags, raise_on_error=False)
    assert not result.success and not result.get_asset_materialization_events()
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failure.event_specific_data.user_failure_data.metadata["reason_code"].value == "RUN_PARTITIONS_MISMATCH"
    assert runtime.ledger.events_of_type("source.pinned") == []  # nothing was done


def _lane_lines(instance, run_id: str) -> list[str]:
    """What each step of the run logged about its archive lane: its partitions and worker processes."""
    return [entry.user_message for entry in instance.all_logs(run_id) if entry.user_message.startswith("archive lane")]


def test_the_quiet_failures_wrapper_is_installed_and_guarded(monkeypatch):
    from dagster._core.execution.plan import execute_plan

    from evidence_pipeline.defs.extensions import quiet_failures
    from evidence_pipeline_tests.support.guarded_patch import assert_patched_only_on_the_checked_dagster

    assert execute_plan.step_failure_event_from_exc_info is quiet_failures._step_failure_event
    assert_patched_only_on_the_checked_dagster(
        monkeypatch,
        quiet_failures.install,
        execute_plan,
        "step_failure_event_from_exc_info",
        quiet_failures._dagster_step_failure_event,
    )
