"""The offline_verification asset check: one result per tenant-month, recorded by Dagster, failing with reason codes
when the published bundle is tampered with. Runs on both backend sets (SQLite + local archive, PostgreSQL + S3)."""

from unittest.mock import ANY
from urllib.parse import quote

from dagster import AssetKey, AssetRecordsFilter, materialize
from dagster._core.event_api import PartitionKeyFilter
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus

from evidence_pipeline.audit import verify
from evidence_pipeline.audit.verify import verify_bundle
from evidence_pipeline.defs.assets import evidence_bundle, monthly_report, source_revision
from evidence_pipeline.defs.checks import CHECK_NAME, offline_verification, verify_published
from evidence_pipeline.defs.partitions import partition_key_for, range_tags
from evidence_pipeline.models import TenantMonth
from evidence_pipeline_tests.support.fixture_sources import SMALL
from evidence_pipeline_tests.support.tampering import overwrite
from evidence_pipeline_tests.support.verification_check import CHECK, CHECK_ONLY

ASSETS = [source_revision, monthly_report, evidence_bundle, offline_verification]
EARLIER = TenantMonth("acme-books", "2026-09")  # with SMALL, a range of one tenant's months


def _latest_check(instance, tenant_month: TenantMonth):
    key = str(partition_key_for(tenant_month))
    [record] = instance.event_log_storage.get_asset_check_execution_history(
        CHECK, limit=1, partition_filter=PartitionKeyFilter(key=key)
    )
    assert record.partition == key
    evaluation = record.event.dagster_event.event_specific_data
    return record, evaluation, {name: value.value for name, value in evaluation.metadata.items()}


def _bundle(instance, tenant_month: TenantMonth):
    partition = str(partition_key_for(tenant_month))
    records_filter = AssetRecordsFilter(asset_key=AssetKey("evidence_bundle"), asset_partitions=[partition])
    [record] = instance.fetch_materializations(records_filter, limit=1).records
    return record, {name: value.value for name, value in record.asset_materialization.metadata.items()}


def test_a_range_run_verifies_each_published_partition_and_records_it(instance, evidence, runtime):
    result = materialize(ASSETS, instance=instance, resources={"evidence": evidence}, tags=range_tags(EARLIER, SMALL))
    assert result.success
    evaluations = result.get_asset_check_evaluations()
    assert sorted(e.partition for e in evaluations) == sorted(str(partition_key_for(tm)) for tm in (EARLIER, SMALL))
    for tenant_month in (EARLIER, SMALL):
        record, evaluation, metadata = _latest_check(instance, tenant_month)
        bundle_record, bundle = _bundle(instance, tenant_month)
        assert record.status == AssetCheckExecutionRecordStatus.SUCCEEDED and evaluation.passed
        assert not evaluation.blocking and evaluation.description.startswith("verified: all")
        # It checked this partition's materialization, the bundle that materialization recorded.
        assert evaluation.target_materialization_data.storage_id == bundle_record.storage_id
        assert metadata["bundle"] == bundle["location"] and metadata["pinned_key_id"] == bundle["key_id"]
        assert metadata["result"] == "verified" and metadata["codes"] == metadata["failed_checks"] == "none"
        assert metadata["statement_key_id"] == bundle["key_id"] and metadata["trust_root_id"].startswith("x509-root-")
        checks = len(verify_bundle(runtime.archive, bundle["bundle_key"]).checks)
        assert metadata["checks"] == f"{checks} of {checks} passed"
        rows = {row.data["check"]: row.data["result"] for row in metadata["check_table"].records}
        assert len(rows) == checks and rows["subject_digest"] == rows["pdf_signature"] == "passed"
        # The bundle partition itself shows its verdict at publication, and links to this run's evaluation of it.
        partition = str(partition_key_for(tenant_month))
        verified = f"verified: all {checks} checks passed"
        assert bundle["verification"] == verified == evaluation.description.split(" (")[0]
        assert bundle["verification_codes"] == "none" and bundle["verification_checks"] == metadata["checks"]
        assert bundle["verification result"] == (  # root-relative: the UI it is clicked in opens it
            f"/runs/{result.run_id}?logs={quote(f'{CHECK_NAME} {partition}')}"
        )
        assert evaluation.description.endswith(f"({CHECK_NAME} {partition})")  # what the link's filter finds
    # The statement key is pinned to the one recorded at publication: any other published key is refused.
    assert verify_published(runtime, (bundle["bundle_key"], "ed25519-0000000000000000")).codes == ["KEY_UNKNOWN"]


def test_a_run_verifies_each_bundle_it_publishes_once_and_the_check_alone_verifies_it_again(
    instance, evidence, monkeypatch
):
    """The bundle step verifies what it publishes and records the check's evaluation of it: the check step of the
    same run reads nothing again (on S3 a verification is 8 requests). A later run of the check verifies the
    archive as it is then."""
    verified = []
    monkeypatch.setattr(
        verify,
        "verify_bundle",
        lambda store, prefix, **pins: verified.append(prefix) or verify_bundle(store, prefix, **pins),
    )
    partition = str(partition_key_for(SMALL))
    result = materialize(ASSETS, instance=instance, resources={"evidence": evidence}, partition_key=partition)
    assert result.success and len(verified) == 1
    [evaluation] = [event for event in result.all_events if event.event_type_value == "ASSET_CHECK_EVALUATION"]
    assert evaluation.step_key == "evidence_bundle" and evaluation.event_specific_data.passed
    assert (
        evaluation.event_specific_data.target_materialization_data.storage_id == _bundle(instance, SMALL)[0].storage_id
    )

    again = CHECK_ONLY.execute_in_process(instance=instance, resources={"evidence": evidence}, partition_key=partition)
    assert again.success and verified == [verified[0]] * 2
    record, evaluation, _ = _latest_check(instance, SMALL)
    assert record.run_id == again.run_id and evaluation.passed


def test_the_check_alone_without_a_partition_verifies_every_published_partition(instance, evidence):
    """The UI's "Execute all" launches the check alone with no partition (ExecuteChecksButton.tsx: an empty
    asset selection, no partition tag): it verifies each published partition, never an unpartitioned run's error."""
    result = materialize(ASSETS, instance=instance, resources={"evidence": evidence}, tags=range_tags(EARLIER, SMALL))
    assert result.success
    again = CHECK_ONLY.execute_in_process(instance=instance, resources={"evidence": evidence}, raise_on_error=False)
    assert again.success
    evaluations = again.get_asset_check_evaluations()
    assert sorted(e.partition for e in evaluations) == sorted(str(partition_key_for(tm)) for tm in (EARLIER, SMALL))
    assert all(e.passed for e in evaluations)
    for tenant_month in (EARLIER, SMALL):
        record, evaluation, _ = _latest_check(instance, tenant_month)
        assert record.run_id == again.run_id and evaluation.passed


def test_a_tampered_bundle_fails_the_check_with_its_codes_and_the_others_still_pass(instance, evidence, runtime):
    for tenant_month in (EARLIER, SMALL):
        assert materialize(
            ASSETS, instance=instance, resources={"evidence": evidence}, partition_key=partition_key_for(tenant_month)
        ).success
        assert _latest_check(instance, tenant_month)[1].passed
    _, bundle = _bundle(instance, SMALL)
    report = runtime.archive.get(f"{bundle['bundle_key']}/report.pdf")
    overwrite(runtime, f"{bundle['bundle_key']}/report.pdf", report[:-64] + b"%% tampered".ljust(64, b" "))

    # The check alone, on the archive as it is now: nothing is rendered, signed or published again.
    for tenant_month in (EARLIER, SMALL):
        result = CHECK_ONLY.execute_in_process(
            instance=instance, resources={"evidence": evidence}, partition_key=str(partition_key_for(tenant_month))
        )
        assert result.success and not result.get_asset_materialization_events()  # non-blocking: the run succeeds
    record, evaluation, metadata = _latest_check(instance, SMALL)
    assert record.status == AssetCheckExecutionRecordStatus.FAILED and not evaluation.passed
    assert metadata["result"] == "NOT VERIFIED" and "SUBJECT_DIGEST_MISMATCH" in metadata["codes"].split(", ")
    assert evaluation.description.startswith(f"not verified: {metadata['codes']} (")
    passed, total = metadata["checks"].removesuffix(" passed").split(" of ")
    assert int(passed) < int(total)
    assert "subject_digest: SUBJECT_DIGEST_MISMATCH: statement subject is not" in metadata["failed_checks"]
    assert {"check": "subject_digest", "result": "FAILED", "code": "SUBJECT_DIGEST_MISMATCH", "detail": ANY} in [
        row.data for row in metadata["check_table"].records
    ]
    record, evaluation, metadata = _latest_check(instance, EARLIER)
    assert record.status == AssetCheckExecutionRecordStatus.SUCCEEDED and metadata["codes"] == "none"


def test_a_range_whose_bundle_step_fails_records_the_verdict_of_what_it_published(instance, evidence, runtime):
    """The bundle step fails for one tenant-month and goes on: the bundles it published get their evaluation from
    the step itself, the check step verifies none of them twice, and the failed month has no evaluation (its check
    reads not executed, never failed)."""
    earliest = TenantMonth("acme-books", "2026-08")  # no source revision
    assert materialize(
        [source_revision, monthly_report],
        instance=instance,
        resources={"evidence": evidence},
        tags=range_tags(EARLIER, SMALL),
    ).success
    # The bundle step alone over a range whose first month has no report: 2026-09 and 2026-10 are published.
    result = materialize(
        ASSETS,
        instance=instance,
        resources={"evidence": evidence},
        raise_on_error=False,
        tags=range_tags(earliest, SMALL),
        selection=[evidence_bundle, offline_verification],
    )
    assert result.success
    assert sorted(e.partition for e in result.get_asset_materialization_events()) == sorted(
        str(partition_key_for(tm)) for tm in (EARLIER, SMALL)
    )
    assert sorted(e.partition for e in result.get_asset_check_evaluations()) == sorted(
        str(partition_key_for(tm)) for tm in (EARLIER, SMALL)
    )
    for tenant_month in (EARLIER, SMALL):
        record, evaluation, metadata = _latest_check(instance, tenant_month)
        assert record.run_id == result.run_id and record.status == AssetCheckExecutionRecordStatus.SUCCEEDED
        assert metadata["result"] == "verified" and _bundle(instance, tenant_month)[1]["verification"].startswith(
            "verified: all"
        )
