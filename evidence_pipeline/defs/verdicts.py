"""A bundle's offline verification as the UI shows it: on the check's result, and on the bundle partition itself.

The evidence_bundle step verifies each bundle it published (the check's own function) and records the verdict in
the partition's materialization metadata, with a link to the run's evaluation of that partition: Dagster 1.13's
partition page shows no check result, and the check's own page opens on whichever partition ran last. The step also
records the check's evaluation of each materialization it made, so the check step of the same run verifies nothing
again; when the step fails for some tenant-months, Dagster skips the check step for the whole range, and those
evaluations are the verdicts of the bundles it did publish instead of "execution failed".
"""

from __future__ import annotations

from urllib.parse import quote

from dagster import (
    AssetCheckEvaluation,
    AssetCheckSeverity,
    AssetKey,
    AssetRecordsFilter,
    DagsterInstance,
    MetadataValue,
    TableColumn,
    TableRecord,
    TableSchema,
)

from evidence_pipeline.audit.verify import Verification
from evidence_pipeline.defs.extensions.unexported import AssetCheckEvaluationTargetMaterializationData
from evidence_pipeline.defs.links import ui_link

CHECK_NAME = "offline_verification"
BUNDLE = AssetKey("evidence_bundle")
CHECK_COLUMNS = TableSchema(
    columns=[TableColumn("check"), TableColumn("result"), TableColumn("code"), TableColumn("detail")]
)


def verdict(verification: Verification) -> str:
    codes = ", ".join(verification.codes)
    return f"verified: all {len(verification.checks)} checks passed" if verification.ok else f"not verified: {codes}"


def _passed(verification: Verification) -> str:
    passed = sum(check.passed for check in verification.checks)
    return f"{passed} of {len(verification.checks)} passed"


def result_link(run_id: str, partition: str) -> MetadataValue:
    """The run's log, filtered to this partition's events: its check evaluation names the partition."""
    return ui_link(f"/runs/{run_id}?logs={quote(f'{CHECK_NAME} {partition}')}")


def bundle_metadata(verification: Verification, run_id: str, partition: str) -> dict:
    """What the bundle partition shows of its verification at publication."""
    return {
        "verification": verdict(verification),
        "verification_codes": ", ".join(verification.codes) or "none",
        "verification_checks": _passed(verification),
        "verification result": result_link(run_id, partition),
    }


def evaluation(partition: str, verification: Verification, recorded: dict, target=None) -> AssetCheckEvaluation:
    """What the check's result shows for the partition: the result, its reason codes, which checks failed and why,
    every check. ``recorded`` is the partition's bundle metadata; ``target`` the materialization it checked."""
    failed = [check for check in verification.checks if not check.passed]
    rows = [
        TableRecord(
            {"check": c.name, "result": "passed" if c.passed else "FAILED", "code": c.code or "", "detail": c.detail}
        )
        for c in verification.checks
    ]
    return AssetCheckEvaluation(
        asset_key=BUNDLE,
        check_name=CHECK_NAME,
        partition=str(partition),
        passed=verification.ok,
        severity=AssetCheckSeverity.ERROR,
        blocking=False,
        target_materialization_data=target,
        description=f"{verdict(verification)} ({CHECK_NAME} {partition})",
        metadata={
            "result": "verified" if verification.ok else "NOT VERIFIED",
            "codes": ", ".join(verification.codes) or "none",
            "failed_checks": "; ".join(f"{c.name}: {c.code}: {c.detail}" for c in failed) or "none",
            "checks": _passed(verification),
            "check_table": MetadataValue.table(rows, schema=CHECK_COLUMNS),
            "bundle": MetadataValue.text(recorded.get("location", recorded["bundle_key"])),
            "pinned_key_id": recorded["key_id"],
            "statement_key_id": verification.statement_key_id or "-",
            "trust_root_id": verification.trust_root_id or "-",
        },
    )


def latest_bundles(instance: DagsterInstance, partitions: list[str]) -> dict[str, dict]:
    """partition -> what its latest evidence_bundle materialization recorded, and that event's pointer (``_target``,
    whose ``run_id`` says which run published it)."""
    records_filter = AssetRecordsFilter(asset_key=BUNDLE, asset_partitions=partitions)
    found, cursor = {}, None
    while len(found) < len(partitions):  # newest first: the first record seen for a partition is its latest
        page = instance.fetch_materializations(records_filter, limit=max(len(partitions), 100), cursor=cursor)
        for record in page.records:
            if record.partition_key not in found:
                metadata = record.asset_materialization.metadata
                found[record.partition_key] = {name: value.value for name, value in metadata.items()} | {
                    "_target": AssetCheckEvaluationTargetMaterializationData(
                        storage_id=record.storage_id, run_id=record.run_id, timestamp=record.timestamp
                    )
                }
        if not page.has_more:
            break
        cursor = page.cursor
    return found
