"""The auditor's answer per partition: does what was published still verify offline? ("verified / failed, why")

`offline_verification` is a non-blocking asset check on `evidence_bundle`, partitioned like it (tenant × month),
so every partition has its own result in the UI. It reads the bundle the partition's latest materialization
recorded (`bundle_key`, `key_id`) and runs `verify.verify_bundle` on the archive, the same checks as
`evidence verify`, with the statement key pinned to the one recorded at publication: a bundle replaced by a
self-consistent one signed with another published key fails (`KEY_UNKNOWN`). The result records the reason codes
and every check, so a failed partition says why.

Dagster includes it in every run of `monthly_evidence`, after `evidence_bundle`. That step has already verified each
bundle it published with the same function and recorded this check's evaluation of it (verdicts.py), so here only
partitions whose latest materialization came from another run are verified: no bundle twice in one run.
Materializing a published tenant-month again converges on its bundle and verifies the archive as it is then. A run
that selects only the check verifies every partition it selects, without the assets; the UI's "Execute all"
launches the check alone with no partition, and that run verifies every published partition.

Partitioned asset checks are a preview in Dagster 1.13 (`partitions_def` on the check). Their `AssetCheckResult`
targets the run's partition only when the run has a single partition key; a range run (a backfill under
`BackfillPolicy.multi_run`) has none, so the check emits one `AssetCheckEvaluation` per partition with its
`partition` and the materialization it checked, which Dagster stores and the UI shows per partition
(test_auditor_ui.py reads them back through the instance, GraphQL and a browser). Not blocking: publication is
already done when the check runs, and a failed verification is a finding for a person, not a reason to stop the
other tenant-months.
"""

from functools import partial

from dagster import AssetCheckExecutionContext, Failure, MetadataValue, Output, asset_check

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
    if op_context.has_partitions:
        selected = op_context.partition_keys
    else:  # the UI's "Execute all" launches the check alone, with no partition: every published partition
        selected = sorted(op_context.instance.get_materialized_partitions(evidence_bundle.key))
    published = verdicts.latest_bundles(op_context.instance, selected)
    for key in selected:
        if key not in published:
            context.log.warning(f"{key}: evidence_bundle has no materialization here; nothing to verify")
    # This run's evidence_bundle step verified what it published and recorded this check's evaluation of it.
    keys = [key for key in selected if key in published and published[key]["_target"].run_id != op_context.run_id]
    if len(keys) < len(published):
        context.log.info(
            f"{len(published) - len(keys)} bundle(s) published by this run were verified at "
            "publication; their evaluations are recorded"
        )
    runtime = _runtime(evidence)
    outcomes = parallel.map_stage(
        partial(runtime_for, runtime.settings),
        verify_published,
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
            metadata={
                "reason_code": first.code,
                "reason_codes": MetadataValue.json({key: error.code for key, error in errors.items()}),
            },
            allow_retries=first.retryable,
        )
    yield Output(None)


def _runtime(evidence: EvidenceResource) -> Runtime:
    try:
        return evidence.runtime()
    except EvidenceError as error:
        raise Failure(
            description=str(error), metadata={"reason_code": error.code}, allow_retries=error.retryable
        ) from None
