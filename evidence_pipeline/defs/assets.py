"""Per tenant-month lineage: source_revision -> monthly_report (+ blocking gate) -> evidence_bundle.

Each asset body maps its partition to one domain stage and records what the stage produced as metadata.
Downstream assets read the exact digests their upstream materialized for the same partition, so a bundle is
always signed from the report that passed the gate, rendered from the revision that was pinned.
"""

import contextlib

from dagster import (
    AssetCheckExecutionContext, AssetCheckResult, AssetCheckSeverity, AssetExecutionContext, AssetKey,
    AssetRecordsFilter, Backoff, Failure, Jitter, MaterializeResult, MetadataValue, RetryPolicy, asset, asset_check,
)

from evidence_pipeline import pipeline
from evidence_pipeline.defs.partitions import tenant_month_of, tenant_month_partitions
from evidence_pipeline.defs.resources import EvidenceResource
from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.ledger.jobs import CLOSED, RetryBudget
from evidence_pipeline.models import SourceRevision
from evidence_pipeline.render import RENDERER_VERSION

# Transient failures (I/O, unavailable services) are retried with backoff; terminal ones never are.
TRANSIENT_RETRIES = RetryPolicy(max_retries=3, delay=2, backoff=Backoff.EXPONENTIAL, jitter=Jitter.PLUS_MINUS)


@contextlib.contextmanager
def classified_failures(context, runtime: pipeline.Runtime | None = None, job_id: str | None = None):
    """Record a failed attempt on the job, then let only retryable ones reach the op's RetryPolicy.

    Terminal errors, and transient ones whose budget (attempts, elapsed time, Dagster retries) is spent, become a
    Failure that neither the op nor the run retry policy repeats; the job is then rejected or dead. A failure that
    did not move the job (lease contention, after the commit) is retried while it is transient.
    """
    try:
        yield
    except EvidenceError as error:
        state = None
        if job_id is not None:
            budget = RetryBudget(
                min(runtime.settings.max_attempts, TRANSIENT_RETRIES.max_retries + 1),
                runtime.settings.retry_budget_seconds,
            )
            state = pipeline.record_failure(runtime, job_id, error, _run(context), budget)
        if error.retryable and state not in CLOSED and context.retry_number < TRANSIENT_RETRIES.max_retries:
            raise
        raise Failure(
            description=str(error), metadata={"reason_code": error.code}, allow_retries=False
        ) from None


def _run(context) -> pipeline.RunInfo:
    return pipeline.RunInfo(run_id=context.run.run_id, attempt=context.retry_number + 1)


def _upstream(context, asset_key: AssetKey) -> dict:
    """Metadata of the latest materialization of ``asset_key`` for this partition."""
    records = context.instance.fetch_materializations(
        AssetRecordsFilter(asset_key=asset_key, asset_partitions=[context.partition_key]), limit=1
    ).records
    if not records:
        raise EvidenceError("UPSTREAM_NOT_MATERIALIZED", f"{asset_key.to_user_string()} has no materialization here")
    return {name: value.value for name, value in records[0].asset_materialization.metadata.items()}


def _pinned(context) -> pipeline.PinnedSource:
    pinned = _upstream(context, source_revision.key)
    revision = SourceRevision(
        tenant_month_of(context.partition_key), pinned["source_sequence"], pinned["source_sha256"],
        pinned["source_bytes"], pinned["source_key"],
    )
    return pipeline.PinnedSource(revision, pinned["job_id"])


@asset(
    partitions_def=tenant_month_partitions, code_version="pin/1", retry_policy=TRANSIENT_RETRIES,
    description="Pins the tenant-month's latest immutable source revision by digest.",
)
def source_revision(context: AssetExecutionContext, evidence: EvidenceResource) -> MaterializeResult:
    with classified_failures(context):
        pinned = pipeline.pin_source(evidence.runtime(), tenant_month_of(context.partition_key), _run(context))
    revision = pinned.revision
    return MaterializeResult(
        metadata={
            "source_sha256": revision.sha256, "source_sequence": revision.sequence,
            "source_bytes": revision.size, "source_key": revision.key, "job_id": pinned.job_id,
        }
    )


@asset(
    partitions_def=tenant_month_partitions, deps=[source_revision], code_version=RENDERER_VERSION, pool="render",
    retry_policy=TRANSIENT_RETRIES, description="Deterministic, unsigned PDF report rendered from the pinned revision.",
)
def monthly_report(context: AssetExecutionContext, evidence: EvidenceResource) -> MaterializeResult:
    runtime = evidence.runtime()
    with classified_failures(context):
        pinned = _pinned(context)
    revision = pinned.revision
    with classified_failures(context, runtime, pinned.job_id):
        staged = pipeline.render_stage(runtime, revision, _run(context))
    return MaterializeResult(
        metadata={
            "unsigned_sha256": staged.sha256, "bytes": staged.size, "pages": staged.pages,
            "renderer_version": RENDERER_VERSION, "source_sha256": revision.sha256,
            "source_sequence": revision.sequence, "render_ms": staged.render_ms,
        }
    )


def _rendered(context) -> tuple[pipeline.PinnedSource, str]:
    """The pinned source and the unsigned report digest materialized upstream for this partition, which must be
    a rendering of that same pinned revision (a partial re-materialization can leave them out of step)."""
    with classified_failures(context):
        pinned, report = _pinned(context), _upstream(context, monthly_report.key)
        if report["source_sha256"] != pinned.revision.sha256:
            raise EvidenceError(
                "UPSTREAM_NOT_MATERIALIZED", "monthly_report was rendered from another revision: materialize it again"
            )
        return pinned, report["unsigned_sha256"]


@asset_check(
    asset=monthly_report, blocking=True, partitions_def=tenant_month_partitions,
    description="The PDF gate: strict parse under limits, not encrypted, metadata and totals match the revision.",
)
def report_passes_gate(context: AssetCheckExecutionContext, evidence: EvidenceResource) -> AssetCheckResult:
    runtime = evidence.runtime()
    pinned, unsigned_sha256 = _rendered(context)
    with classified_failures(context, runtime, pinned.job_id):
        try:
            pages, validate_ms = pipeline.validate_stage(runtime, pinned.revision, unsigned_sha256, _run(context))
        except EvidenceError as error:
            if error.code != "REPORT_INVALID":
                raise
            pipeline.record_failure(runtime, pinned.job_id, error, _run(context))
            return AssetCheckResult(
                passed=False, severity=AssetCheckSeverity.ERROR,
                metadata={"reason_code": error.code, "detail": error.message, "unsigned_sha256": unsigned_sha256},
            )
    return AssetCheckResult(
        passed=True, metadata={"unsigned_sha256": unsigned_sha256, "pages": pages, "validate_ms": validate_ms}
    )


@asset(
    partitions_def=tenant_month_partitions, deps=[monthly_report], code_version=RENDERER_VERSION, pool="publish",
    retry_policy=TRANSIENT_RETRIES,
    description="PAdES-signed report + DSSE/in-toto statement + manifest, published once and committed to the ledger.",
)
def evidence_bundle(context: AssetExecutionContext, evidence: EvidenceResource) -> MaterializeResult:
    runtime = evidence.runtime()
    pinned, unsigned_sha256 = _rendered(context)
    revision = pinned.revision
    with classified_failures(context, runtime, pinned.job_id):
        publication = pipeline.publish_stage(runtime, pinned, unsigned_sha256, _run(context))
    location = runtime.archive.uri(publication.bundle_key)
    lineage = "\n".join(
        [
            "| step | sha256 |",
            "|---|---|",
            f"| source revision #{revision.sequence} | `{revision.sha256}` |",
            f"| unsigned report ({RENDERER_VERSION}) | `{publication.unsigned_sha256}` |",
            f"| signed report.pdf | `{publication.report_sha256}` |",
            f"| statement.dsse.json ({publication.key_id}) | `{publication.statement_sha256}` |",
            f"| manifest.json (ledger #{publication.ledger_seq}) | `{publication.manifest_sha256}` |",
        ]
    )
    return MaterializeResult(
        metadata={
            "identity": publication.identity,
            "location": MetadataValue.text(location),
            "bundle_key": publication.bundle_key,
            "newly_published": publication.created,
            "report_sha256": publication.report_sha256,
            "report_bytes": publication.report_size,
            "unsigned_sha256": publication.unsigned_sha256,
            "statement_sha256": publication.statement_sha256,
            "manifest_sha256": publication.manifest_sha256,
            "source_sha256": publication.source_sha256,
            "renderer_version": RENDERER_VERSION,
            "key_id": publication.key_id,
            "ledger_seq": publication.ledger_seq,
            "lineage": MetadataValue.md(lineage),
            **publication.timings_ms,
        }
    )
