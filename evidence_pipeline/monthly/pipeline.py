"""One tenant-month end to end, in plain Python: pin -> render -> validate -> sign -> publish once -> ledger.

Each stage is a function the Dagster assets call one by one; `run_tenant_month` chains them for tools and
benchmarks. Every stage is safe to repeat: staged and published objects are put-once, and a publication that
already exists for a bundle identity is converged on, never duplicated. Publishing runs under a fenced lease on
the tenant-month's job record, so a stale attempt (a zombie run, an expired lease) cannot commit.

Over 400 lines because it holds every stage of the tenant-month in the order they run, each with its put-once and
convergence rules.
"""

from __future__ import annotations

import io
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable, TypeVar

import pandas as pd

from evidence_pipeline import jsonread
from evidence_pipeline.canonical import utc_iso
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.faults import kill_point
from evidence_pipeline.ledger.jobs import CLOSED, JobKey, Lease, RetryBudget
from evidence_pipeline.ledger.rows import PublicationClaim, PublicationRecord
from evidence_pipeline.models import EventType, Lane, SourceRevision, Stage, TenantMonth
from evidence_pipeline.monthly import document_outcomes, sources
from evidence_pipeline.monthly.bundle import (
    IDENTITY_FIELDS,
    MANIFEST,
    REPORT,
    STATEMENT,
    build_manifest,
    bundle_identity,
    bundle_prefix,
    identity_fields,
    staging_key,
    supersedes_link,
)
from evidence_pipeline.monthly.render import RENDERER_VERSION, report_totals, write_report
from evidence_pipeline.monthly.validate import validate_report
from evidence_pipeline.runtime import RunInfo, Runtime
from evidence_pipeline.signing import dsse
from evidence_pipeline.signing.keyring_document import timestamp
from evidence_pipeline.signing.pades import TIMESTAMPED, check_fresh_signature, sign_pdf, verify_pdf_signature
from evidence_pipeline.store import ArtifactStore, StoredObject, sha256_file, sha256_hex
from evidence_pipeline.tempfiles import attempt_dir, scratch_file

T = TypeVar("T")


@dataclass(frozen=True)
class PinnedSource:
    """What a tenant-month's evidence is made from: the source revision and the document outcomes closed with it."""

    revision: SourceRevision
    documents: document_outcomes.OutcomesRevision
    job_id: str
    lane: Lane = Lane.ARCHIVE


@dataclass(frozen=True)
class StagedReport:
    revision: SourceRevision
    documents_sha256: str
    sha256: str
    size: int
    pages: int
    render_ms: float


@dataclass(frozen=True)
class Preview:
    """A preview-lane rendering: in the preview store only, never signed, archived or recorded as evidence."""

    revision: SourceRevision
    key: str
    sha256: str
    size: int
    pages: int
    render_ms: float


@dataclass(frozen=True)
class GatedReport:
    """A rendering that passed the gate, staged for signing."""

    staged: StagedReport
    validate_ms: float


@dataclass(frozen=True)
class Publication:
    identity: str
    tenant_month: TenantMonth
    bundle_key: str
    location: str  # the bundle's URI in the archive
    source_sha256: str
    documents_sha256: str
    unsigned_sha256: str
    report_sha256: str
    report_size: int
    statement_sha256: str
    manifest_sha256: str
    key_id: str
    ledger_seq: int
    created: bool  # True when this run's commit wrote the publication (its bundle.published event names the run)
    supersedes: dict | None = None  # the tenant-month's bundle this one replaced: identity, prefix, reason
    current_identity: str = ""  # the tenant-month's current bundle in the ledger (this one, unless superseded)
    timings_ms: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class _Inputs:
    """What a bundle is signed from besides its identity fields, and the job it is published under."""

    tenant_month: TenantMonth
    source_sequence: int
    documents_sha256: str
    job_id: str


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 3)


def job_key(rt: Runtime, revision: SourceRevision) -> JobKey:
    tm = revision.tenant_month
    return JobKey(tm.tenant, tm.period, revision.sha256, RENDERER_VERSION, rt.settings.policy_version)


def lane_for(rt: Runtime, revision: SourceRevision) -> str:
    """Large tenant-months get their own lane with a lower cap; they are never downgraded to less than evidence."""
    return Lane.OVERSIZE if revision.size > rt.settings.oversize_bytes else Lane.ARCHIVE


def pin_source(rt: Runtime, tenant_month: TenantMonth, run: RunInfo) -> PinnedSource:
    """Resolve the revision once, close the month's document outcomes (or find them closed) and open (or find) the
    job record of this tenant-month identity."""
    if rt.ledger.offboarded_tenants(tenant_month.tenant):
        raise EvidenceError(ReasonCode.TENANT_OFFBOARDED, f"tenant {tenant_month.tenant} was offboarded")
    # the registry, not any event: a partition added in the UI, a token or a landed file is no registration
    if tenant_month.tenant not in rt.tenants.standing([tenant_month.tenant]):
        raise EvidenceError(
            ReasonCode.TENANT_UNKNOWN,
            f"tenant {tenant_month.tenant} is not in the tenant registry: register it (`evidence tenant add`)",
        )
    revision = sources.pin_latest(rt.sources, tenant_month)
    documents, closed_now = document_outcomes.close_month(rt.sources, rt.document_jobs, tenant_month)
    if closed_now:
        rt.ledger.record(tenant_month, EventType.DOCUMENTS_CLOSED, documents.sha256, run.run_id)
    lane = lane_for(rt, revision)
    rt.ledger.record(
        tenant_month,
        EventType.SOURCE_PINNED,
        revision.sha256,
        run.run_id,
        sequence=revision.sequence,
        lane=lane,
        documents_sha256=documents.sha256,
    )
    job = rt.ledger.accept_job(job_key(rt, revision), run.run_id)
    if job.state in CLOSED:  # fail fast: a closed job only reopens through `evidence replay`
        raise EvidenceError(ReasonCode.JOB_CLOSED, f"job {job.job_id} is {job.state} ({job.last_reason}); replay it")
    kill_point("after_pin")
    return PinnedSource(revision, documents, job.job_id, lane)


def render_and_gate(rt: Runtime, pinned: PinnedSource, run: RunInfo) -> GatedReport:
    """Render, stage and gate one report: only a rendering that passed the gate is ever handed to signing.

    The revision is read (digest and schema re-checked) once for both, and the gate's totals are computed from it
    before rendering, so nothing the renderer does to the frame can reach them."""
    frame = sources.read_revision(rt.sources, pinned.revision)
    totals = report_totals(frame, pinned.documents)
    staged = render_stage(rt, pinned, run, frame)
    _, validate_ms = validate_stage(rt, pinned, staged.sha256, run, totals)
    return GatedReport(staged, validate_ms)


def publish_and_time(rt: Runtime, item: tuple[PinnedSource, str, dict], run: RunInfo) -> Publication:
    """Publish once, then append the attempt's stage clocks to the ledger (`stages.timed`).

    ``item`` is (pinned source, unsigned digest, clocks measured upstream: queue_wait_ms, render_ms, validate_ms).
    """
    pinned, unsigned_sha256, clocks = item
    publication = publish_stage(rt, pinned, unsigned_sha256, run)
    publication.timings_ms.update(clocks)
    rt.ledger.record(
        pinned.revision.tenant_month,
        EventType.STAGES_TIMED,
        publication.report_sha256,
        run.run_id,
        lane=pinned.lane,
        **{stage.clock: publication.timings_ms.get(stage.clock) for stage in Stage},
    )
    return publication


def record_failure(
    rt: Runtime, job_id: str, error: EvidenceError, run: RunInfo, budget: RetryBudget | None = None
) -> str | None:
    """Classify a failed attempt in the job record; returns the job's new state, or None if it did not move. A
    failure under a lease is the attempt that lease counted; one before any lease (render, gate) is one more, so a
    tenant-month's retries in later runs spend its budget too."""
    attempt = run.attempt if error.lease_token is not None else None
    return rt.ledger.record_failure(
        job_id,
        error.code,
        retryable=error.retryable,
        actor=run.run_id,
        budget=budget or rt.retry_budget,
        attempt=attempt,
        lease_token=error.lease_token,
        message=error.message,
    )


def render_stage(rt: Runtime, pinned: PinnedSource, run: RunInfo, frame: pd.DataFrame | None = None) -> StagedReport:
    """Render the pinned revision (``frame``, when the caller has read it) and document outcomes and stage the
    unsigned PDF, content-addressed, for validation and signing."""
    revision, documents = pinned.revision, pinned.documents
    start = time.perf_counter()
    if frame is None:
        frame = sources.read_revision(rt.sources, revision)
    with scratch_file(rt.settings.work_dir) as pdf:  # the PDF lives on disk, not in memory, once rendered
        sha256, pages = write_report(
            revision, frame, pdf, documents=(documents, document_outcomes.read_outcomes(rt.sources, documents))
        )
        render_ms = _ms(start)
        kill_point("mid_render")
        staged = rt.staging.put_file(staging_key(sha256), pdf)
    kill_point("after_staging")
    rt.ledger.record(
        revision.tenant_month,
        EventType.REPORT_RENDERED,
        sha256,
        run.run_id,
        source_sha256=revision.sha256,
        documents_sha256=documents.sha256,
        renderer_version=RENDERER_VERSION,
        pages=pages,
    )
    return StagedReport(revision, documents.sha256, sha256, staged.size, pages, render_ms)


def preview_stage(rt: Runtime, revision: SourceRevision) -> Preview:
    """The preview lane: a quick, reduced-fidelity rendering of the pinned revision for an analyst to look at.
    It goes to the preview store, content-addressed; it never meets the gate, a signature or the ledger."""
    start = time.perf_counter()
    with scratch_file(rt.settings.work_dir) as pdf:
        sha256, pages = write_report(revision, sources.read_revision(rt.sources, revision), pdf, preview=True)
        render_ms = _ms(start)
        key = f"previews/{revision.tenant_month.tenant}/{revision.tenant_month.period}/{sha256}.pdf"
        stored = rt.previews.put_file(key, pdf)
    return Preview(revision, key, sha256, stored.size, pages, render_ms)


def validate_stage(
    rt: Runtime, pinned: PinnedSource, unsigned_sha256: str, run: RunInfo, totals: tuple[str, ...] | None = None
) -> tuple[int, float]:
    """The gate before signing, against ``totals`` (recomputed from the pinned revision unless the caller has).
    Returns (pages, validate_ms); a rejection is recorded, then raised."""
    revision = pinned.revision
    start = time.perf_counter()
    if totals is None:
        totals = report_totals(sources.read_revision(rt.sources, revision), pinned.documents)
    with scratch_file(rt.settings.work_dir) as pdf:
        rt.staging.get_file(staging_key(unsigned_sha256), pdf, expected_sha256=unsigned_sha256)
        try:
            pages = validate_report(pdf, revision, totals)
        except EvidenceError as error:
            rt.ledger.record(
                revision.tenant_month, EventType.REPORT_REJECTED, unsigned_sha256, run.run_id, reason=error.code
            )
            raise
    rt.ledger.record(
        revision.tenant_month,
        EventType.REPORT_VALIDATED,
        unsigned_sha256,
        run.run_id,
        pages=pages,
        source_sha256=revision.sha256,
        documents_sha256=pinned.documents.sha256,
    )
    kill_point("after_validate")
    return pages, _ms(start)


def publish_stage(rt: Runtime, pinned: PinnedSource, unsigned_sha256: str, run: RunInfo) -> Publication:
    """Sign and publish the validated report exactly once per bundle identity, under a fenced lease."""
    revision = pinned.revision
    fields = identity_fields(
        revision.tenant_month, revision.sha256, unsigned_sha256, RENDERER_VERSION, rt.settings.policy_version
    )
    identity = bundle_identity(fields)
    start = time.perf_counter()
    existing = rt.ledger.publication(identity)
    if existing is not None:
        return _converge(rt, existing, {Stage.PUBLISH.clock: _ms(start)}, run)
    validated = rt.ledger.events_about(EventType.REPORT_VALIDATED, unsigned_sha256)
    inputs = {"source_sha256": revision.sha256, "documents_sha256": pinned.documents.sha256}
    if not any(event["details"].items() >= inputs.items() for event in validated):
        raise EvidenceError(
            ReasonCode.REPORT_INVALID,
            "refusing to sign: this report has not passed the gate for this revision and these document outcomes",
        )
    lease = rt.ledger.acquire_lease(pinned.job_id, run.run_id, rt.settings.lease_seconds)
    if lease is None:  # the job succeeded meanwhile: its publication is the answer
        committed = rt.ledger.publication(identity)
        if committed is None:
            raise EvidenceError(ReasonCode.JOB_CLOSED, "the job already succeeded with a different report")
        return _converge(rt, committed, {Stage.PUBLISH.clock: _ms(start)}, run)
    try:
        with (
            attempt_dir(rt.settings.work_dir, pinned.job_id, lease.token) as scratch,
            rt.ledger.keep_alive(lease, rt.settings.lease_seconds),
        ):
            inputs = _Inputs(revision.tenant_month, revision.sequence, pinned.documents.sha256, pinned.job_id)
            return _sign_and_commit(
                rt, inputs, fields=fields | {"identity": identity}, lease=lease, scratch=scratch, run=run
            )
    except EvidenceError as error:
        error.lease_token = lease.token  # recording this failure is fenced by the lease it happened under
        raise


def _sign_and_commit(rt: Runtime, inputs: _Inputs, *, fields: dict, lease: Lease, scratch, run: RunInfo) -> Publication:
    tenant_month, identity, settings = inputs.tenant_month, fields["identity"], rt.settings
    prefix = bundle_prefix(tenant_month, identity)
    start = time.perf_counter()
    # The generation active now signs, and its signing time is recorded: a rotation between two bundles of a batch
    # is seen here, per bundle (signing/rotation.py).
    (keyring, signed_at), unsigned_sha256 = rt.keys.select(), fields["unsigned_sha256"]
    with scratch_file(scratch) as unsigned:
        rt.staging.get_file(staging_key(unsigned_sha256), unsigned, expected_sha256=unsigned_sha256)
        unsigned_size = unsigned.tell()

        def check_signature(signed: BinaryIO) -> None:
            level = settings.pades_level
            tsa_root = keyring.tsa_root_pem if level in TIMESTAMPED else None
            verify_pdf_signature(signed, keyring.root_pem, level=level, tsa_root_pem=tsa_root)

        def sign() -> BinaryIO:
            signed = sign_pdf(
                unsigned, keyring, level=settings.pades_level, tsa_url=settings.tsa_url, out=scratch_file(scratch)
            )
            kill_point("after_sign")
            # Checked before the put, in the file the put reads: a signature that does not verify is never
            # archived, and the stored object (hashed by the store as it is written) needs no read-back. At B-B
            # the CMS signature over its byte range is checked (no whole-PDF parse); higher levels also carry
            # time stamps and validation data, which only the full verification checks.
            if settings.pades_level == "B-B":
                check_fresh_signature(signed, unsigned_size, keyring.root_pem)
            else:
                check_signature(signed)
            return signed

        def adopt(stored: BinaryIO, sha256: str) -> tuple[str, int] | None:
            # PAdES appends: a signed file of ours begins with the exact unsigned bytes.
            if sha256_file(stored, unsigned_size) != (unsigned_sha256, unsigned_size):
                return None
            check_signature(stored)
            return sha256, stored.seek(0, io.SEEK_END)

        (report_sha256, report_size), report_version = put_or_adopt(
            rt.archive,
            f"{prefix}/{REPORT}",
            scratch=scratch,
            make=sign,
            accept=adopt,
            made=lambda stored: (stored.sha256, stored.size),
        )
    # From here to the commit this attempt holds the tenant-month: the bundle it supersedes stays the current one.
    supersedes = _claim(rt, inputs, fields, lease, run)
    ours = our_statement_keys(rt)
    predicate = fields | {
        "source_sequence": inputs.source_sequence,
        "documents_sha256": inputs.documents_sha256,
        "unsigned_size": unsigned_size,
        "pades_level": settings.pades_level,
        "key_id": keyring.statement_key_id,
        "signed_at": timestamp(signed_at),
        "trust_root_id": keyring.root_id,
        **({"tsa_root_id": keyring.tsa_root_id} if settings.pades_level in TIMESTAMPED else {}),
        "run_id": run.run_id,
        "attempt": run.attempt,
        "completed_at": utc_iso(timespec="seconds"),
        **({"supersedes": supersedes} if supersedes is not None else {}),
    }
    envelope = dsse.sign_envelope(
        dsse.canonical_json(dsse.statement(REPORT, report_sha256, predicate)),
        keyring.statement_key,
        keyring.statement_key_id,
    )
    # The ledger and manifest describe the statement actually published, which an earlier attempt may have
    # written (who signed it, when, at which PAdES level): accept returns its predicate.
    (statement, predicate), statement_version = put_or_adopt(
        rt.archive,
        f"{prefix}/{STATEMENT}",
        scratch=scratch,
        make=lambda: io.BytesIO(envelope),
        accept=lambda stored, _: _statement_for(stored.read(), ours, report_sha256, identity),
        made=lambda stored: (envelope, predicate),
    )
    if predicate.get("supersedes") != supersedes:  # an earlier attempt signed it before another bundle committed
        raise EvidenceError(
            ReasonCode.SUPERSEDES_STALE,
            f"{prefix}/{STATEMENT} supersedes {_named(predicate.get('supersedes'))}, but the tenant-month's "
            f"current bundle is {_named(supersedes)}: committing it would fork the corrections chain",
        )
    kill_point("after_archive_put")
    sign_ms = _ms(start)

    start = time.perf_counter()
    kill_point("during_renew")
    lease = rt.ledger.renew_lease(lease, settings.lease_seconds)  # still ours? then hold it through the commit
    row = {
        "identity": identity,
        "tenant": tenant_month.tenant,
        "period": tenant_month.period,
        "bundle_key": prefix,
        "source_sha256": fields["source_sha256"],
        "unsigned_sha256": fields["unsigned_sha256"],
        "report_sha256": report_sha256,
        "statement_sha256": sha256_hex(statement),
        "renderer_version": fields["renderer_version"],
        "key_id": predicate["key_id"],
    }
    details = predicate | {
        "report_sha256": report_sha256,
        "report_size": report_size,
        "statement_sha256": row["statement_sha256"],
        "statement_size": len(statement),
        "bundle_key": prefix,
        "report_version_id": report_version,
        "statement_version_id": statement_version,
    }
    committed, _ = rt.ledger.publish(row, lease, run.run_id, **details)
    kill_point("after_commit")
    return _converge(rt, committed, {Stage.SIGN.clock: sign_ms, Stage.PUBLISH.clock: _ms(start)}, run)


_CLAIM_POLL_SECONDS = (0.02, 0.5)  # first and longest pause between looks at a claim another attempt holds
_CLAIM_GRACE_SECONDS = 5.0  # waited beyond a lease's lifetime: a holder that died has lost its lease by then


def _claim(rt: Runtime, inputs: _Inputs, fields: dict, lease: Lease, run: RunInfo) -> dict | None:
    """Claim the tenant-month for this bundle and return its `supersedes` (None for the tenant-month's first).

    Another attempt's claim is waited for while its lease is live, at most a lease's lifetime (then
    TENANT_MONTH_BUSY, retried like any transient failure). A claim whose lease is no longer live is taken over,
    unless its attempt already stored its signed statement, which names the current bundle as the one it
    supersedes: that publication is completed first (`_complete`), so the statement never goes stale and the new
    bundle supersedes it in turn.
    """
    tenant_month, identity = inputs.tenant_month, fields["identity"]
    deadline = time.monotonic() + rt.settings.lease_seconds + _CLAIM_GRACE_SECONDS
    pause, take_over = _CLAIM_POLL_SECONDS[0], None
    while True:
        claim = rt.ledger.claim_publication(tenant_month, identity, lease, take_over)
        if claim.claimed:
            if claim.head is None:
                return None
            previous = rt.ledger.event(claim.head.event_seq).body["details"]
            return supersedes_link(previous, fields | {"documents_sha256": inputs.documents_sha256})
        take_over = None
        holder = claim.holder
        if not claim.holder_live:
            holder_prefix = bundle_prefix(tenant_month, holder.identity)
            if not rt.archive.exists(f"{holder_prefix}/{STATEMENT}") or not _complete(rt, holder, run):
                take_over = holder.identity
                continue
        if time.monotonic() > deadline:
            raise EvidenceError(
                ReasonCode.TENANT_MONTH_BUSY, f"bundle {holder.identity[:12]} of {tenant_month} is being published"
            )
        time.sleep(pause)
        pause = min(pause * 2, _CLAIM_POLL_SECONDS[1])


def _complete(rt: Runtime, holder: PublicationClaim, run: RunInfo) -> bool:
    """Commit the publication that a claim's attempt signed but did not commit (it died, or stalled past its
    lease), under a lease of its own job. Returns False when it cannot be completed (its job is closed, or its
    statement is not ours or fails), and the claim may be taken over; True when it was, or when its job is being
    worked on again (look at the claim again)."""
    tenant_month = TenantMonth(holder.tenant, holder.period)
    envelope = rt.archive.get(
        f"{bundle_prefix(tenant_month, holder.identity)}/{STATEMENT}", max_bytes=jsonread.MAX_BYTES
    )
    try:
        body, _ = dsse.open_statement(envelope, our_statement_keys(rt))
        predicate = body["predicate"]
        fields = {name: predicate[name] for name in IDENTITY_FIELDS}
        inputs = _Inputs(tenant_month, predicate["source_sequence"], predicate["documents_sha256"], holder.job_id)
    except (EvidenceError, KeyError, TypeError):
        return False
    if bundle_identity(fields) != holder.identity:
        return False
    try:
        lease = rt.ledger.acquire_lease(holder.job_id, run.run_id, rt.settings.lease_seconds)
    except EvidenceError as error:
        if error.code == ReasonCode.LEASE_BUSY:
            return True  # its own retry is at it: wait for its claim
        if error.code == ReasonCode.JOB_CLOSED:
            return False
        raise
    if lease is None:
        return True  # committed meanwhile
    try:
        with (
            attempt_dir(rt.settings.work_dir, holder.job_id, lease.token) as scratch,
            rt.ledger.keep_alive(lease, rt.settings.lease_seconds),
        ):
            _sign_and_commit(
                rt, inputs, fields=fields | {"identity": holder.identity}, lease=lease, scratch=scratch, run=run
            )
    except EvidenceError as error:
        if error.retryable or error.code in (ReasonCode.LEASE_BUSY, ReasonCode.LEASE_FENCED):
            raise
        error.lease_token = lease.token
        record_failure(rt, holder.job_id, error, run)  # its job is rejected with the reason; ours goes on
        return False
    return True


def our_statement_keys(rt: Runtime) -> dict:
    """Every generation's statement key: an earlier attempt may have signed with a generation retired since."""
    return {k.statement_key_id: k.statement_public_key for k in rt.keys.keyrings()}


def _named(supersedes: dict | None) -> str:
    return "nothing" if not supersedes else str(supersedes.get("identity"))[:12]


def run_tenant_month(rt: Runtime, tenant_month: TenantMonth, run: RunInfo) -> Publication:
    """The whole chain for one tenant-month, as the assets run it but without Dagster (tools, the raw benchmark)."""
    pinned = pin_source(rt, tenant_month, run)
    try:
        gated = render_and_gate(rt, pinned, run)
        clocks = {Stage.RENDER.clock: gated.staged.render_ms, Stage.VALIDATE.clock: gated.validate_ms}
        return publish_and_time(rt, (pinned, gated.staged.sha256, clocks), run)
    except EvidenceError as error:
        record_failure(rt, pinned.job_id, error, run)
        raise


def _converge(rt: Runtime, row: PublicationRecord, timings: dict[str, float], run: RunInfo) -> Publication:
    """Make the committed publication visible: (re)write its manifest, which is derived from the ledger.

    Whether ``run`` published it is read from the commit itself (the actor of its ``bundle.published`` event), not
    from what this attempt saw: a step retried after its range met another run's lease converges on the bundle
    that its own first attempt committed, and still counts it, while a concurrent run never does."""
    event = rt.ledger.event(row.event_seq)
    manifest = rt.archive.put_once(f"{row.bundle_key}/{MANIFEST}", build_manifest(event))
    details = event.body["details"]
    tenant_month = TenantMonth(row.tenant, row.period)
    current = rt.ledger.current_publication(tenant_month) or row
    return Publication(
        identity=row.identity,
        tenant_month=tenant_month,
        bundle_key=row.bundle_key,
        location=rt.archive.uri(row.bundle_key),
        source_sha256=row.source_sha256,
        documents_sha256=details["documents_sha256"],
        unsigned_sha256=row.unsigned_sha256,
        report_sha256=row.report_sha256,
        report_size=details["report_size"],
        statement_sha256=row.statement_sha256,
        manifest_sha256=manifest.sha256,
        key_id=row.key_id,
        ledger_seq=event.seq,
        created=event.body["actor"] == run.run_id,
        supersedes=details.get("supersedes"),
        current_identity=current.identity,
        timings_ms=timings,
    )


def put_or_adopt(
    store: ArtifactStore,
    key: str,
    *,
    scratch: Path,
    make: Callable[[], BinaryIO],
    accept: Callable[[BinaryIO, str], T | None],
    made: Callable[[StoredObject], T] | None = None,
) -> tuple[T, str | None]:
    """Put-once, converging on what an earlier or concurrent attempt already stored under the key, if it is ours.

    ``make`` returns a file to store. ``accept`` turns the stored object (a private copy, rewound, and its sha256)
    into the caller's value, or None when it is not ours. ``made``, where given, is the value of an object this
    call stored itself, from what the store reports, without reading it back. Returns the value and the object's
    version id (None in unversioned stores).
    """
    if not store.exists(key):
        try:
            with make() as file:
                stored = store.put_file(key, file)
        except EvidenceError as error:
            if (
                error.code != ReasonCode.STORE_CONFLICT
            ):  # a conflict means another attempt won the race: check its object
                raise
        else:
            if made is not None and stored.created:
                return made(stored), stored.version_id
    with scratch_file(scratch) as stored:
        sha256 = store.get_file(key, stored)
        stored.seek(0)
        accepted = accept(stored, sha256)
    if accepted is None:
        raise EvidenceError(ReasonCode.STORE_CONFLICT, f"{key} holds an object that does not belong to this bundle")
    return accepted, store.version_id(key)


def _statement_for(envelope: bytes, keys: dict, report_sha256: str, identity: str) -> tuple[bytes, dict] | None:
    """(envelope, predicate) if ``envelope`` is our signed statement about this report of this bundle."""
    try:
        body, _ = dsse.open_statement(envelope, keys)
    except EvidenceError:
        return None
    if body.get("subject") != dsse.subject(REPORT, report_sha256) or body["predicate"].get("identity") != identity:
        return None
    return envelope, body["predicate"]
