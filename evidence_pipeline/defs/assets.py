"""Per tenant-month lineage: source_revision -> monthly_report (rendered and gated) -> evidence_bundle.

A run covers one tenant-month (the schedule, a single launch) or a range of them (an analyst's backfill: the
backfill policy puts up to PARTITIONS_PER_RUN partitions in one run). Every asset body does the same three things:
map its partitions to one domain stage, run the stage for all of them in worker processes (`parallel.map_stage`,
archive lane at EVIDENCE_WORKERS, oversize lane at its lower cap), and record one materialization with metadata per
partition. Downstream assets read the exact digests their upstream materialized for the same partition, so a
bundle is always signed from the report that passed the gate, rendered from the revision that was pinned.

Over 400 lines because the three assets and the range-run plumbing they share stay in one file, so the lineage reads
top to bottom in one place.
"""

import contextlib
from collections.abc import Callable, Iterator
from datetime import timedelta
from functools import partial

from dagster import (
    AssetCheckEvaluation,
    AssetExecutionContext,
    AssetKey,
    AssetMaterialization,
    AssetRecordsFilter,
    AssetSpec,
    BackfillPolicy,
    Backoff,
    Failure,
    FreshnessPolicy,
    Jitter,
    MaterializeResult,
    MetadataValue,
    RetryPolicy,
    TableColumn,
    TableRecord,
    TableSchema,
    asset,
)

from evidence_pipeline import parallel
from evidence_pipeline.audit.verify import Verification, verify_published
from evidence_pipeline.config import Settings
from evidence_pipeline.defs import failures, verdicts
from evidence_pipeline.defs.extensions import provenance
from evidence_pipeline.defs.extensions.provenance import Upstream
from evidence_pipeline.defs.links import archive_key, partition_links
from evidence_pipeline.defs.partitions import partition_key_for, run_range, tenant_month_of, tenant_month_partitions
from evidence_pipeline.defs.resources import EvidenceResource
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.ledger.jobs import CLOSED
from evidence_pipeline.models import Lane, SourceRevision, Stage, overdue_deadline_cron
from evidence_pipeline.monthly import pipeline
from evidence_pipeline.monthly.document_outcomes import OutcomesRevision
from evidence_pipeline.monthly.render import RENDERER_VERSION
from evidence_pipeline.runtime import RunInfo, runtime_for

# Transient failures (I/O, unavailable services) are retried with backoff; terminal ones never are.
TRANSIENT_RETRIES = RetryPolicy(max_retries=3, delay=2, backoff=Backoff.EXPONENTIAL, jitter=Jitter.PLUS_MINUS)
# A backfill runs ranges of up to this many tenant-months per run: Dagster's per-run cost (seconds) is paid once.
PARTITIONS_PER_RUN = 100
RANGES = BackfillPolicy.multi_run(max_partitions_per_run=PARTITIONS_PER_RUN)
# What the catalog shows beside each evidence asset: one group, who answers for it, and what it is about.
GROUP, OWNERS, TAGS = "evidence", ["team:evidence"], {"domain": "compliance", "grain": "tenant-month"}
LINEAGE_COLUMNS = TableSchema(
    columns=[
        TableColumn("order", "int", description="position in the lineage, first to last: sort by it to restore"),
        TableColumn("step", "string", description="what was made (the renderer version, signing key, ledger position)"),
        TableColumn("sha256", "string", description="its digest, whole"),
    ]
)
PARTITIONED = dict(
    partitions_def=tenant_month_partitions,
    backfill_policy=RANGES,
    retry_policy=TRANSIENT_RETRIES,
    group_name=GROUP,
    owners=OWNERS,
    tags=TAGS,
)
# The scheduled assets are due by the month's deadline (models.OVERDUE_AFTER: 02:00 UTC on the 2nd): Dagster's
# freshness daemon marks an asset Failed in the UI when it was not materialized since the 1st's schedule tick. It
# judges an asset as a whole; per tenant-month, evidence_tenant_months_overdue counts the missing bundles.
MONTHLY = PARTITIONED | dict(
    freshness_policy=FreshnessPolicy.cron(deadline_cron=overdue_deadline_cron(), lower_bound_delta=timedelta(days=1))
)  # since the 1st's 02:00 tick

# Document work in the UI's grid, beside the tenant-month's report: materialized by the page runs
# (defs/documents.py); upstream of the month's report, whose "Document jobs" section closes the month's outcomes.
document_jobs = AssetSpec(
    "document_jobs",
    partitions_def=tenant_month_partitions,
    group_name="documents",
    owners=OWNERS,
    kinds={"pdf"},
    tags={"domain": "documents", "grain": "tenant-month"},
    description="Document jobs worked for the tenant-month, per dispatch page: counts by operation and state, and "
    "the job ids (recorded by document_page_job runs).",
)


def _run(context) -> RunInfo:
    return RunInfo(run_id=context.run.run_id, attempt=context.retry_number + 1)


def run_workers(context, settings: Settings) -> int:
    """Worker processes for this run's partitions: EVIDENCE_WORKERS, or by default the run's share of its host. The
    runs the queue lets run at once (max_concurrent_runs) all start on the code server's host under Dagster's
    default launcher, each forking its own workers, and more busy workers than cores cost CPU without adding
    throughput (bench/README.md, throughput.py), so a run the queue launched takes the CPUs / max_concurrent_runs,
    rounded up (4 runs on 6 CPUs: 2 each, not 1, which left 2 CPUs without a worker).
    A run executed in process (`evidence demo`; it has no code location origin) runs alone: every CPU."""
    queue = context.instance.get_concurrency_config().run_queue_config
    queued = queue is not None and context.run.remote_job_origin is not None and queue.max_concurrent_runs > 0
    return settings.worker_processes(queue.max_concurrent_runs if queued else 1)


def _check_run_partitions(context) -> None:
    """Refuse, before any work, a range run whose partitions are not its range (see defs/coordinator.py): it would
    report partitions done that it never built."""
    partition_range = run_range(context.run.tags)
    if partition_range is None:
        return
    named = set(tenant_month_partitions.get_partition_keys_in_range(partition_range, context.instance))
    if named != set(context.partition_keys):
        raise Failure(
            description=f"RUN_PARTITIONS_MISMATCH: the run would execute {len(context.partition_keys)} partition(s), "
            f"its range tags name {len(named)} ({partition_range.start} to {partition_range.end})",
            metadata={"reason_code": ReasonCode.RUN_PARTITIONS_MISMATCH.value},
            allow_retries=False,
        )


def _each_partition(
    context,
    evidence: EvidenceResource,
    *,
    stage: Callable,
    items: dict,
    lanes: dict,
    job_ids: dict,
    metadata: Callable[[object], dict],
    failed: dict,
    version_field: str,
    inputs: dict[str, dict[AssetKey, Upstream]] | None = None,
    links: tuple[AssetKey, ...] = (),
    materialized: Callable | None = None,
) -> Iterator:
    """Run ``stage`` for every partition's item and materialize the partitions that succeeded.

    Each partition's materialization carries its own provenance (see provenance.py): its data version is the
    digest in its ``version_field`` metadata, and ``inputs`` names the upstream events it was made from. ``links``
    are the upstream assets whose same partition the UI should open in one click. ``materialized(done)`` yields the
    events the step records after the partitions it materialized (``done``: partition -> outcome), whether or not
    other partitions failed.

    ``failed`` holds partitions that failed before the stage (e.g. no upstream materialization): they never move
    their job, since materializing the upstream again is the remedy. Partitions in neither ``items`` nor ``failed``
    were stopped by an upstream step of this run, which recorded why: they are left alone. Attempts that failed in
    the stage are recorded on their job. If any failure is transient and its budget left, the step raises it, so
    the op's RetryPolicy runs the range again (finished partitions converge).

    Otherwise a tenant-month's failure is its own: the step materializes the partitions that succeeded and none
    other (provenance.not_materialized), records on each failed partition, for this asset and the run's later
    ones, an observation with its reason code, and succeeds, so the later steps publish the rest. Only a step that
    materialized nothing (a run of one tenant-month, or a range that failed whole) fails, with each partition's
    code; so does any step with a failure if Dagster is not the version the wrapper was checked against.
    """
    _check_run_partitions(context)
    with _foreseeable():
        runtime = evidence.runtime()
    settings = runtime.settings
    outcomes = dict(failed)
    for lane, workers in ((Lane.ARCHIVE, run_workers(context, settings)), (Lane.OVERSIZE, settings.oversize_workers)):
        keys = [key for key in items if lanes.get(key, Lane.ARCHIVE) == lane]
        if keys:
            context.log.info(f"{lane} lane: {len(keys)} partition(s), up to {workers} worker process(es) at once")
        results = parallel.map_stage(partial(runtime_for, settings), stage, [items[key] for key in keys], workers)
        outcomes.update(zip(keys, results))

    # The run's last try leaves a transient failure to a later run: the job waits in retry_wait, and the tenant-month
    # retry sensor (retries.py) asks for that run when its next_attempt_at has come, until the budget is spent.
    last_try = context.retry_number >= TRANSIENT_RETRIES.max_retries
    budget = runtime.retry_wait_budget if last_try else runtime.retry_budget
    errors = {key: outcome for key, outcome in outcomes.items() if isinstance(outcome, EvidenceError)}
    retry = None
    for key, error in errors.items():
        attempted = key in job_ids and key not in failed
        with _foreseeable():
            state = pipeline.record_failure(runtime, job_ids[key], error, _run(context), budget) if attempted else None
        if error.retryable and state not in CLOSED and not last_try:
            retry = error
    if retry is not None:  # the op's RetryPolicy runs the range again; finished partitions converge
        raise failures.failure(context.asset_key, errors, len(outcomes), allow_retries=True)

    done = {
        key: {"lane": str(lanes.get(key, Lane.ARCHIVE))} | metadata(outcome) | partition_links(key, links)
        for key, outcome in outcomes.items()
        if key not in errors
    }
    tags = {
        key: provenance.provenance_tags(values[version_field], (inputs or {}).get(key, {}))
        for key, values in done.items()
    }
    if errors and (not done or not provenance.installed()):
        for key, values in done.items():  # the step fails, but what succeeded stays recorded
            yield AssetMaterialization(asset_key=context.asset_key, partition=key, metadata=values, tags=tags[key])
        if materialized is not None:
            yield from materialized({key: outcomes[key] for key in done})
        # The run fails: say so on every partition it will not materialize, then fail the step (terminal).
        yield from failures.not_materialized(context, errors, failures.later_assets(context), context.partition_keys)
        raise failures.failure(context.asset_key, errors, len(outcomes), allow_retries=False)
    for key, values in done.items():
        context.add_asset_metadata(values, partition_key=key)
        provenance.record(context.run.run_id, context.asset_key, str(key), tags[key])
    provenance.not_materialized(
        context.run.run_id, context.asset_key, [key for key in context.partition_keys if key not in done]
    )
    if errors:  # each failed tenant-month says why on its own partitions; the others go on
        context.log.warning(
            f"{failures.describe(context.asset_key, errors, len(outcomes))}; the other {len(done)} go on"
        )
        yield from failures.not_materialized(context, errors, failures.later_assets(context), errors)
    yield MaterializeResult()
    if materialized is not None:
        yield from materialized({key: outcomes[key] for key in done})


@contextlib.contextmanager
def _foreseeable():
    """An EvidenceError outside the per-partition stages (settings, the ledger, a store) fails the step as a
    Failure with its reason code; a transient one is retried by the op's RetryPolicy."""
    try:
        yield
    except EvidenceError as error:
        raise Failure(
            description=str(error), metadata={"reason_code": error.code}, allow_retries=error.retryable
        ) from None


def _latest(context, asset_key: AssetKey) -> tuple[dict[str, dict], dict[str, dict[AssetKey, Upstream]]]:
    """For this run's partitions with a materialization of ``asset_key``: (partition -> metadata of the latest,
    partition -> {asset_key: that event}), so a downstream partition names the exact event it was made from.

    When ``asset_key`` runs in this run, only its materializations by this run count: a partition its step did not
    materialize failed there (and says why), and another materialization, older or a concurrent run's newer one, is
    not what this run pinned."""
    this_run = context.run.run_id if asset_key in failures.run_assets(context) else None
    found, events = {}, {}
    for record in _newest_materializations(context, asset_key, this_run):
        metadata = record.asset_materialization.metadata
        found[record.partition_key] = {name: value.value for name, value in metadata.items()}
        events[record.partition_key] = {asset_key: provenance.upstream_of(record)}
    return found, events


def _newest_materializations(context, asset_key: AssetKey, run_id: str | None) -> list:
    """The newest materialization of ``asset_key`` of each of the run's partitions that has one; made by run
    ``run_id`` when given (then only records since that run started are read)."""
    keys = context.partition_keys
    started = context.instance.get_run_record_by_id(run_id).start_time if run_id else None
    since = started - 1 if started else None  # a second of slack for the clocks of the writers of the two records
    records_filter = AssetRecordsFilter(asset_key=asset_key, asset_partitions=keys, after_timestamp=since)
    newest, cursor = {}, None
    while len(newest) < len(keys):  # newest first: the first record seen for a partition is its latest
        page = context.instance.fetch_materializations(records_filter, limit=max(len(keys), 100), cursor=cursor)
        for record in page.records:
            if run_id is None or record.run_id == run_id:
                newest.setdefault(record.partition_key, record)
        if not page.has_more:
            break
        cursor = page.cursor
    return list(newest.values())


def _missing(context, asset_key: AssetKey, found: dict) -> dict:
    """Partitions with no materialization of ``asset_key`` to work from, unless its step in this run stopped them
    (they are left alone: that step recorded why)."""
    if asset_key in failures.run_assets(context):
        return {}
    error = EvidenceError(
        ReasonCode.UPSTREAM_NOT_MATERIALIZED,
        f"{asset_key.to_user_string()} has no materialization here; {failures.SELECT_UPSTREAM}",
    )
    return {key: error for key in context.partition_keys if key not in found}


def _pinned(context) -> tuple[dict, dict, dict]:
    """(partition -> PinnedSource, partition -> error, partition -> source_revision event) from its metadata."""
    found, events = _latest(context, source_revision.key)
    pinned = {
        key: pipeline.PinnedSource(
            SourceRevision(
                tenant_month_of(key),
                meta["source_sequence"],
                meta["source_sha256"],
                meta["source_bytes"],
                meta["source_key"],
            ),
            OutcomesRevision(tenant_month_of(key), meta["documents_sha256"], meta["documents_key"]),
            meta["job_id"],
            meta["lane"],
        )
        for key, meta in found.items()
    }
    return pinned, _missing(context, source_revision.key, found), events


def _report_inputs(report_metadata: dict) -> tuple[str, str | None]:
    """The pinned inputs a monthly_report was rendered from: (source sha256, document outcomes sha256)."""
    return report_metadata["source_sha256"], report_metadata.get("documents_sha256")


def _queue_wait_ms(context) -> float | None:
    """Run created -> run started: the wait in Dagster's run queue (and launcher) before any work began."""
    record = context.instance.get_run_record_by_id(context.run.run_id)
    if record is None or record.start_time is None:
        return None
    return round((record.start_time - record.create_timestamp.timestamp()) * 1000, 3)


@asset(
    **MONTHLY,
    kinds={"sql"},
    code_version="pin/2",
    description="Pins the tenant-month's latest immutable source revision "
    "by digest and routes it to its lane (archive, or oversize above EVIDENCE_OVERSIZE_BYTES).",
)
def source_revision(context: AssetExecutionContext, evidence: EvidenceResource):
    items = {key: tenant_month_of(key) for key in context.partition_keys}
    yield from _each_partition(
        context,
        evidence,
        stage=partial(pipeline.pin_source, run=_run(context)),
        items=items,
        lanes={},
        job_ids={},
        failed={},
        metadata=lambda pinned: {
            "source_sha256": pinned.revision.sha256,
            "source_sequence": pinned.revision.sequence,
            "source_bytes": pinned.revision.size,
            "source_key": archive_key(pinned.revision.key),
            "documents_sha256": pinned.documents.sha256,
            "documents_key": archive_key(pinned.documents.key),
            "job_id": pinned.job_id,
            "lane": str(pinned.lane),
        },
        version_field="source_sha256",
    )


@asset(
    **MONTHLY,
    deps=[source_revision, document_jobs],
    kinds={"pdf"},
    code_version=RENDERER_VERSION,
    pool="render",
    description="Deterministic, unsigned PDF report rendered from the pinned revision; materialized only once it "
    "passed the gate (strict parse under limits, not encrypted, metadata and totals match the revision). "
    + failures.MATERIALIZE_ALONE,
)
def monthly_report(context: AssetExecutionContext, evidence: EvidenceResource):
    pinned, failed, sources = _pinned(context)
    yield from _each_partition(
        context,
        evidence,
        stage=partial(pipeline.render_and_gate, run=_run(context)),
        version_field="unsigned_sha256",
        inputs=sources,
        links=(source_revision.key,),
        items=pinned,
        lanes={key: p.lane for key, p in pinned.items()},
        job_ids={key: p.job_id for key, p in pinned.items()},
        failed=failed,
        metadata=lambda gated: {
            "unsigned_sha256": gated.staged.sha256,
            "bytes": gated.staged.size,
            "pages": gated.staged.pages,
            "renderer_version": RENDERER_VERSION,
            "source_sha256": gated.staged.revision.sha256,
            "source_sequence": gated.staged.revision.sequence,
            "documents_sha256": gated.staged.documents_sha256,
            "gate": "passed",
            Stage.RENDER.clock: gated.staged.render_ms,
            Stage.VALIDATE.clock: gated.validate_ms,
        },
    )


@asset(
    **MONTHLY,
    deps=[monthly_report],
    kinds={"pdf", "s3", "pades"},
    code_version=RENDERER_VERSION,
    pool="publish",
    description="PAdES-signed report + DSSE/in-toto statement + manifest, published once and committed to the "
    "ledger with the tenant-month's stage clocks. " + failures.MATERIALIZE_ALONE,
)
def evidence_bundle(context: AssetExecutionContext, evidence: EvidenceResource):
    pinned, failed, _ = _pinned(context)
    reports, report_events = _latest(context, monthly_report.key)
    failed |= _missing(context, monthly_report.key, reports) | {
        # A partial re-materialization can leave the report rendered from other inputs than the pinned ones.
        key: EvidenceError(ReasonCode.UPSTREAM_NOT_MATERIALIZED, "monthly_report was rendered from other inputs")
        for key, p in pinned.items()
        if key in reports and _report_inputs(reports[key]) != (p.revision.sha256, p.documents.sha256)
    }
    queue_wait_ms = _queue_wait_ms(context)
    items = {
        key: (
            p,
            reports[key]["unsigned_sha256"],
            {
                Stage.QUEUE_WAIT.clock: queue_wait_ms,
                Stage.RENDER.clock: reports[key][Stage.RENDER.clock],
                Stage.VALIDATE.clock: reports[key][Stage.VALIDATE.clock],
            },
        )
        for key, p in pinned.items()
        if key in reports and key not in failed
    }
    run_id = context.run.run_id
    yield from _each_partition(
        context,
        evidence,
        stage=partial(publish_and_verify, run=_run(context)),
        items=items,
        lanes={key: p.lane for key, p in pinned.items()},
        job_ids={key: p.job_id for key, p in pinned.items()},
        failed=failed,
        metadata=lambda done: (
            _bundle_metadata(done[0])
            | verdicts.bundle_metadata(done[1], run_id, str(partition_key_for(done[0].tenant_month)))
        ),
        version_field="identity",
        inputs=report_events,
        links=(monthly_report.key, source_revision.key),
        materialized=partial(_verdicts, context),
    )


def _verdicts(context: AssetExecutionContext, done: dict) -> Iterator[AssetCheckEvaluation]:
    """The check's evaluation of each bundle this step published and verified (``done``: partition ->
    (publication, verification)), on the materialization just recorded. The check step of the same run then
    verifies nothing twice; when this step fails, Dagster skips that step, and these are the bundles' verdicts."""
    targets = verdicts.latest_bundles(context.instance, list(done))
    for key, (publication, verification) in done.items():
        recorded = {
            "location": publication.location,
            "key_id": publication.key_id,
            "bundle_key": publication.bundle_key,
        }
        yield verdicts.evaluation(key, verification, recorded, targets[key]["_target"])


def publish_and_verify(rt, item, run) -> tuple[pipeline.Publication, Verification]:
    """Publish once (see pipeline.publish_and_time), then verify the bundle from the archive as the check does."""
    publication = pipeline.publish_and_time(rt, item, run)
    return publication, verify_published(rt, (publication.bundle_key, publication.key_id))


@asset(
    **PARTITIONED,
    deps=[source_revision],
    kinds={"pdf"},
    code_version=RENDERER_VERSION,
    pool="preview",
    description="Preview lane: a quick, reduced-fidelity rendering (cover and summary) of the pinned revision for "
    "analysts. Stored in the preview store; never gated, signed, archived or recorded as evidence.",
)
def report_preview(context: AssetExecutionContext, evidence: EvidenceResource):
    pinned, failed, sources = _pinned(context)
    with _foreseeable():
        previews = evidence.runtime().previews
    yield from _each_partition(
        context,
        evidence,
        stage=pipeline.preview_stage,
        items={key: p.revision for key, p in pinned.items()},
        lanes={},
        job_ids={},
        failed=failed,
        version_field="preview_sha256",
        inputs=sources,
        metadata=lambda preview: {
            "lane": str(Lane.PREVIEW),
            "preview_sha256": preview.sha256,
            "bytes": preview.size,
            "pages": preview.pages,
            "location": MetadataValue.text(previews.uri(preview.key)),
            "source_sha256": preview.revision.sha256,
            Stage.RENDER.clock: preview.render_ms,
        },
    )


def _lineage(publication: pipeline.Publication) -> MetadataValue:
    """Source revision -> manifest, each step with its sha256 (a correction's first row names the bundle it replaced,
    by identity): a table, so the UI sorts it and shows digests whole (a markdown table clipped them)."""
    corrects = publication.supersedes
    steps = [(f"supersedes ({', '.join(corrects['reason'])})", corrects["identity"])] if corrects else []
    steps += [
        ("source revision", publication.source_sha256),
        ("document outcomes", publication.documents_sha256),
        (f"unsigned report ({RENDERER_VERSION})", publication.unsigned_sha256),
        ("signed report.pdf", publication.report_sha256),
        (f"statement.dsse.json ({publication.key_id})", publication.statement_sha256),
        (f"manifest.json (ledger #{publication.ledger_seq})", publication.manifest_sha256),
    ]
    rows = [
        TableRecord({"order": order, "step": step, "sha256": digest}) for order, (step, digest) in enumerate(steps, 1)
    ]
    return MetadataValue.table(rows, schema=LINEAGE_COLUMNS)


def _bundle_metadata(publication: pipeline.Publication) -> dict:
    corrects = publication.supersedes
    return {
        "identity": publication.identity,
        "location": MetadataValue.text(publication.location),
        "bundle_key": archive_key(publication.bundle_key),
        "newly_published": publication.created,
        "report_sha256": publication.report_sha256,
        "report_bytes": publication.report_size,
        "unsigned_sha256": publication.unsigned_sha256,
        "statement_sha256": publication.statement_sha256,
        "manifest_sha256": publication.manifest_sha256,
        "source_sha256": publication.source_sha256,
        "documents_sha256": publication.documents_sha256,
        "renderer_version": RENDERER_VERSION,
        "key_id": publication.key_id,
        "ledger_seq": publication.ledger_seq,
        "lineage": _lineage(publication),
        # The corrections chain: the tenant-month's current bundle in the ledger (this one, unless a newer bundle
        # superseded it), and the bundle this one replaced and why.
        "current": publication.current_identity == publication.identity,
        "current_bundle": publication.current_identity,
        **(
            {
                "supersedes": corrects["identity"],
                "supersedes_reason": ", ".join(corrects["reason"]),
                "supersedes_location": archive_key(corrects["prefix"]),
            }
            if corrects
            else {}
        ),
        # Numeric clocks, so the UI plots them per partition; None (no queue: not a queued run) is left out.
        **{stage: ms for stage, ms in publication.timings_ms.items() if ms is not None},
    }
