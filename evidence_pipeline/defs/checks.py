"""The auditor's answer per partition: does what was published still verify offline? ("verified / failed, why")

`offline_verification` is a non-blocking asset check on `evidence_bundle`, partitioned like it (tenant × month),
so every partition has its own result in the UI. It reads the bundle the partition's latest materialization
recorded (`bundle_key`, `key_id`) and runs `verify.verify_bundle` on the archive, the same checks as
`evidence verify`, with the statement key pinned to the one recorded at publication: a bundle replaced by a
self-consistent one signed with another published key fails (`KEY_UNKNOWN`). The result records the reason codes
and every check, so a failed partition says why.

It runs in every run of `monthly_evidence` right after `evidence_bundle` (Dagster includes a selected asset's checks):
materializing a published tenant-month again converges on its bundle and verifies the archive as it is then. A run
that selects only the check does the same without the assets (Dagster 1.13's UI cannot launch a partitioned check
alone; the tests do it from Python).

Partitioned asset checks are a preview in Dagster 1.13 (`partitions_def` on the check). Their `AssetCheckResult`
targets the run's partition only when the run has a single partition key; a range run (a backfill under
`BackfillPolicy.multi_run`) has none, so the check emits one `AssetCheckEvaluation` per partition with its
`partition` and the materialization it checked, which Dagster stores and the UI shows per partition
(test_auditor_ui.py reads them back through the instance, GraphQL and a browser). Not blocking: publication is
already done when the check runs, and a failed verification is a finding for a person, not a reason to stop the
other tenant-months.
"""

from functools import partial

from dagster import (
    AssetCheckExecutionContext,
    AssetRecordsFilter,
    Failure,
    MetadataValue,
    Output,
    asset_check,
)

# Not exported by `dagster`: the pointer to the materialization a check evaluated (a serialized record type, no patch).
from dagster._core.definitions.asset_checks.asset_check_evaluation import AssetCheckEvaluationTargetMaterializationData

from evidence_pipeline import parallel
from evidence_pipeline.audit.verify import verify_published
from evidence_pipeline.defs import verdicts
from evidence_pipeline.defs.assets import TRANSIENT_RETRIES, evidence_bundle, run_workers
from evidence_pipeline.defs.partitions import tenant_month_partitions
from evidence_pipeline.defs.resources import EvidenceResource
from evidence_pipeline.defs.verdicts import CHECK_NAME
from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.runtime import Runtime, runtime_for


@asset_check(
    asset=evidence_bundle,
    name=CHECK_NAME,
    partitions_def=tenant_month_partitions,
    blocking=False,
    retry_policy=TRANSIENT_RETRIES,
    description="Offline verification of the published bundle (the checks of `evidence verify`, statement key "
    "pinned to the one recorded at publication): passed when every check passes; otherwise the reason codes.",
)
def offline_verification(context: AssetCheckExecutionContext, evidence: EvidenceResource):
    op_context = context.op_execution_context
    published = _published(op_context)
    keys = [key for key in op_context.partition_keys if key in published]
    for key in op_context.partition_keys:
        if key not in published:
            context.log.warning(f"{key}: evidence_bundle has no materialization here; nothing to verify")
    runtime = _runtime(evidence)
    outcomes = parallel.map_stage(
        partial(runtime_for, runtime.settings), verify_published,
        [(published[key]["bundle_key"], published[key]["key_id"]) for key in keys],
        run_workers(op_context, runtime.settings),
    )
    errors = {}
    for key, outcome in zip(keys, outcomes):
        if isinstance(outcome, EvidenceError):  # the archive could not be read: an outage, not a finding
            errors[key] = outcome
            continue
        yield verdicts.evaluation(key, outcome, published[key], published[key]["_target"])
    if errors:
        first = next(iter(errors.values()))
        raise Failure(
            description=f"{len(errors)} of {len(keys)} bundles could not be verified; first: {first}",
            metadata={"reason_code": first.code,
                      "reason_codes": MetadataValue.json({key: error.code for key, error in errors.items()})},
            allow_retries=first.retryable,
        )
    yield Output(None)


def _runtime(evidence: EvidenceResource) -> Runtime:
    try:
        return evidence.runtime()
    except EvidenceError as error:
        raise Failure(description=str(error), metadata={"reason_code": error.code},
                      allow_retries=error.retryable) from None


def _published(context) -> dict[str, dict]:
    """partition -> what its latest evidence_bundle materialization recorded, and that event's pointer."""
    keys = context.partition_keys
    records_filter = AssetRecordsFilter(asset_key=evidence_bundle.key, asset_partitions=keys)
    found, cursor = {}, None
    while len(found) < len(keys):  # newest first: the first record seen for a partition is its latest
        page = context.instance.fetch_materializations(records_filter, limit=max(len(keys), 100), cursor=cursor)
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
