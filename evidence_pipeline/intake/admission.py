"""Admission: the cheap, durable checks and writes behind intake's endpoints. No PDF is parsed here."""

from __future__ import annotations

import re
from collections.abc import Callable, Set
from datetime import date, datetime, timezone
from typing import BinaryIO

from evidence_pipeline.canonical import canonical, sha256_text, utc_iso
from evidence_pipeline.documents import document_key
from evidence_pipeline.documents.registry import Operation, operation, request_digest
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.ledger.admission import Clock, JobLimits
from evidence_pipeline.ledger.document_jobs import EVIDENCE, stage_of
from evidence_pipeline.ledger.documents import stored_bytes_exceeded
from evidence_pipeline.ledger.job_states import ACCEPTED, RUNNING
from evidence_pipeline.ledger.jobs import document_job_id
from evidence_pipeline.ledger.rows import Batch, Document, DocumentJob, JobAttempt
from evidence_pipeline.models import first_open_period, validate_period
from evidence_pipeline.runtime import Runtime
from evidence_pipeline.store import sha256_hex

PDF = "application/pdf"
ALLOWED_MEDIA_TYPES = {PDF: b"%PDF-"}  # declared type -> the magic its bytes must begin with
SNIFF_BYTES = 8
IDEMPOTENCY_KEY_PATTERN = r"^[\x21-\x7e]{1,255}$"
_IDEMPOTENCY_KEY = re.compile(IDEMPOTENCY_KEY_PATTERN)
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_PERIOD = re.compile(r"^[0-9]{4}-[0-9]{2}$")
MAX_INPUTS = 100
MAX_BATCH_JOBS = 5_000


def sniff(head: bytes) -> str | None:
    """The allowed media type the first bytes prove, or None."""
    return next((media for media, magic in ALLOWED_MEDIA_TYPES.items() if head.startswith(magic)), None)


def declared_media_type(content_type: str | None) -> str:
    """The media type of a Content-Type header (parameters dropped), refused unless allowed."""
    media = (content_type or "").split(";")[0].strip().lower()
    if media not in ALLOWED_MEDIA_TYPES:
        raise EvidenceError(
            ReasonCode.MEDIA_TYPE_UNSUPPORTED, "Content-Type must be one of " + ", ".join(ALLOWED_MEDIA_TYPES)
        )
    return media


def expected_digest(header: str | None) -> str | None:
    if header is None:
        return None
    if not _SHA256.fullmatch(header.strip().lower()):
        raise EvidenceError(ReasonCode.REQUEST_INVALID, "X-Content-SHA256 must be 64 hexadecimal digits")
    return header.strip().lower()


def store_document(
    rt: Runtime,
    tenant: str,
    *,
    spool: BinaryIO,
    sha256: str,
    size: int,
    media_type: str,
    actor: str,
    clock: Clock,
) -> tuple[Document, bool]:
    """Put the received bytes (a spool of the document store, hashed while received) once, content-addressed,
    then commit `document.admitted`. Returns (row, created). Bytes that the quota refuses are erased again: no
    document of the tenant has them (it would have been answered instead)."""
    key = document_key(tenant, sha256)
    rt.document_store.put_spooled(key, spool, sha256, size)
    try:
        return rt.document_records.admit_document(
            tenant,
            sha256,
            size=size,
            media_type=media_type,
            store_key=key,
            actor=actor,
            clock=clock,
            max_bytes=rt.settings.tenant_max_bytes,
        )
    except EvidenceError as error:
        if error.code == ReasonCode.REQUEST_EXCEEDS_QUOTA:
            rt.document_store.erase(key)
        raise


def document_view(row: Document) -> dict:
    return {"document_id": row.document_id, "sha256": row.sha256, "bytes": row.size, "media_type": row.media_type}


def check_idempotency_key(key) -> str:
    if not isinstance(key, str) or not _IDEMPOTENCY_KEY.fullmatch(key):  # a batch spec's key may be any JSON
        raise EvidenceError(
            ReasonCode.IDEMPOTENCY_KEY_INVALID, "Idempotency-Key must be 1-255 visible ASCII characters"
        )
    return key


def job_spec(
    body, routed: Callable[[Operation], dict], fields: Set[str] = frozenset({"operation", "inputs", "options"})
) -> tuple[Operation, list, dict]:
    """A job request's operation, inputs and options (the tenant's ``routed`` values, then defaults, filled in
    where it names none), checked against the operation's schema; whether the inputs exist is the caller's to
    check."""
    if not isinstance(body, dict):
        raise EvidenceError(ReasonCode.REQUEST_INVALID, "a job request must be a JSON object")
    unknown = sorted(set(body) - fields)
    if unknown:
        raise EvidenceError(ReasonCode.REQUEST_INVALID, f"unknown field {unknown[0][:64]!r}")
    op = operation(body.get("operation"))
    given = body.get("options", {})
    options = op.normalize(routed(op) | given if isinstance(given, dict) else given)
    inputs = body.get("inputs")
    least, most = op.inputs
    if not (
        isinstance(inputs, list)
        and all(isinstance(i, str) for i in inputs)
        and least <= len(inputs) <= most
        and len(inputs) <= MAX_INPUTS
    ):
        raise EvidenceError(ReasonCode.INPUTS_INVALID, f"{op.name} takes {least}..{most} document ids in `inputs`")
    return op, inputs, options


def _pinned(rt: Runtime, op: Operation, tenant: str, inputs: list[str]) -> dict:
    """What the operation fixes when a job is accepted (a redaction's template version, a merge's approving
    reviews), kept in its request but not in its digest: the same idempotency key answers the same job after the
    policy moves on."""
    pinned = op.pin_policy(rt.ledger, tenant) if op.pin_policy else {}
    return pinned | (op.admit_inputs(rt, tenant, inputs) if op.admit_inputs else {})


def _router(rt: Runtime, tenant: str, repeated: DocumentJob | None = None) -> Callable[[Operation], dict]:
    """The option values an operation routes ``tenant``'s new jobs to (a ruleset canary). A request repeated under
    an accepted idempotency key keeps the values it was accepted with, so it still answers the same job after the
    route changed."""

    def routed(op: Operation) -> dict:
        values = op.route(rt.ledger, tenant) if op.route else {}
        if repeated is not None and repeated.operation == op.name:
            return {name: repeated.request["options"][name] for name in values}
        return values

    return routed


def _limits(rt: Runtime) -> JobLimits:
    settings = rt.settings
    return JobLimits(settings.tenant_max_jobs, settings.intake_max_queue_age_seconds, settings.intake_max_queued_jobs)


def submit_job(
    rt: Runtime, tenant: str, *, idempotency_key: str, body, actor: str, clock: Clock
) -> tuple[DocumentJob, bool]:
    """Validate a job request and accept it once per idempotency key. Returns (job, created)."""
    repeated = rt.document_jobs.job(tenant, document_job_id(tenant, idempotency_key))
    op, inputs, options = job_spec(body, _router(rt, tenant, repeated))
    if rt.document_records.existing_inputs(tenant, set(inputs)) != set(inputs):
        raise EvidenceError(ReasonCode.DOCUMENT_NOT_FOUND, "no such document")
    policy = rt.settings.policy_version
    return rt.submissions.submit_job(
        tenant,
        idempotency_key,
        request_sha256=request_digest(tenant, op, inputs, options, policy),
        operation=op.name,
        request={"inputs": inputs, "options": options} | _pinned(rt, op, tenant, inputs),
        policy_version=policy,
        actor=actor,
        limits=_limits(rt),
        clock=clock,
    )


def submit_evidence_job(
    rt: Runtime, tenant: str, *, idempotency_key: str, body, actor: str, clock: Clock, today: date | None = None
) -> tuple[DocumentJob, bool]:
    """Ask for a tenant-month's evidence bundle: a complete, open month, not before the tenant's first source data."""
    if not isinstance(body, dict) or set(body) != {"period"}:
        raise EvidenceError(ReasonCode.REQUEST_INVALID, 'an evidence job is {"period": "YYYY-MM"}')
    period = validate_period(body["period"])
    today = today or datetime.now(timezone.utc).date()
    if period >= f"{today.year:04d}-{today.month:02d}":
        raise EvidenceError(ReasonCode.PERIOD_NOT_AVAILABLE, "only complete months have evidence")
    settings = rt.settings
    if period < first_open_period(today, settings.open_months, settings.first_period):
        raise EvidenceError(ReasonCode.PERIOD_CLOSED, "the month is closed: its evidence is in the archive")
    folders = {key.split("/")[1] for key in rt.sources.list(tenant)}
    periods = sorted(folder for folder in folders if _PERIOD.fullmatch(folder))  # not the tenant's requests/
    if not periods or period < periods[0]:
        raise EvidenceError(ReasonCode.PERIOD_NOT_AVAILABLE, "the period is before the tenant's first data")
    policy = settings.policy_version
    digest = sha256_text(
        canonical({"tenant": tenant, "operation": EVIDENCE, "period": period, "policy_version": policy})
    )
    return rt.submissions.submit_job(
        tenant,
        idempotency_key,
        request_sha256=digest,
        operation=EVIDENCE,
        request={"inputs": [], "options": {}, "period": period},
        policy_version=policy,
        actor=actor,
        limits=_limits(rt),
        clock=clock,
    )


def submit_batch(rt: Runtime, tenant: str, body, actor: str, clock: Clock) -> tuple[Batch, bool]:
    """Admit a manifest of job specs: every spec is checked, the manifest is stored once and one batch row
    committed; no child job is created here (the dispatcher does, in pages). Returns (batch, created)."""
    if not isinstance(body, dict) or set(body) != {"jobs"} or not isinstance(body["jobs"], list):
        raise EvidenceError(ReasonCode.REQUEST_INVALID, 'a batch is {"jobs": [job specs]}')
    if not 1 <= len(body["jobs"]) <= MAX_BATCH_JOBS:
        raise EvidenceError(ReasonCode.REQUEST_INVALID, f"a batch holds 1..{MAX_BATCH_JOBS} job specs")
    rt.batches.check_batch_load(tenant, len(body["jobs"]), _limits(rt))
    manifest, keys, inputs, routed = [], set(), set(), _router(rt, tenant)
    for index, spec in enumerate(body["jobs"]):
        try:
            key = check_idempotency_key(spec.get("idempotency_key") if isinstance(spec, dict) else None)
            if key in keys:
                raise EvidenceError(ReasonCode.IDEMPOTENCY_KEY_INVALID, "idempotency keys repeat within the batch")
            op, spec_inputs, options = job_spec(spec, routed, {"idempotency_key", "operation", "inputs", "options"})
        except EvidenceError as error:
            raise EvidenceError(error.code, f"jobs[{index}]: {error.message}") from None
        keys.add(key)
        inputs.update(spec_inputs)
        pinned = _pinned(rt, op, tenant, spec_inputs)
        manifest.append(
            {"idempotency_key": key, "operation": op.name, "inputs": spec_inputs, "options": options}
            | ({"pinned": pinned} if pinned else {})
        )
    if rt.document_records.existing_inputs(tenant, inputs) != inputs:
        raise EvidenceError(ReasonCode.DOCUMENT_NOT_FOUND, "a job spec names a document that does not exist")
    data = canonical(manifest).encode("utf-8")
    manifest_sha256 = sha256_hex(data)
    stored = rt.document_store.put_once(f"{tenant}/batches/{manifest_sha256}.json", data)
    batch_id = "bat_" + sha256_text(f"{tenant}/{manifest_sha256}")[:40]
    return rt.batches.create_batch(
        tenant,
        batch_id,
        manifest_sha256=manifest_sha256,
        store_key=stored.key,
        jobs=len(manifest),
        actor=actor,
        limits=_limits(rt),
        clock=clock,
    )


def cancel_batch(rt: Runtime, tenant: str, batch_id: str, actor: str) -> dict[str, int]:
    """Stop a batch: undispatched children are never created, dispatched ones not yet started are rejected with
    JOB_CANCELLED, leased ones finish. Counts add up to the batch's size."""
    batch = rt.batches.stop_batch(tenant, batch_id, actor)
    if batch is None:
        raise EvidenceError(ReasonCode.BATCH_NOT_FOUND, "no such batch")
    for job_id in rt.batches.batch_children_in(batch_id, ACCEPTED):
        if (
            rt.ledger.record_failure(
                job_id, ReasonCode.JOB_CANCELLED, retryable=False, actor=actor, budget=rt.retry_budget, attempt=0
            )
            is not None
        ):
            rt.document_jobs.mark_finished(job_id)
    return batch_outcome(rt, batch)


def batch_outcome(rt: Runtime, batch: Batch) -> dict[str, int]:
    """{"cancelled", "running", "finished"} of a cancelled batch: never-created children count as cancelled."""
    counts = rt.batches.batch_counts(batch.batch_id)
    created = sum(counts.values())
    cancelled = rt.batches.cancelled_children(batch.batch_id)
    running = counts.get(RUNNING, 0) + counts.get(ACCEPTED, 0)
    return {
        "cancelled": batch.jobs - created + cancelled,
        "running": running,
        "finished": created - running - cancelled,
    }


def batch_view(rt: Runtime, batch: Batch) -> dict:
    counts = rt.batches.batch_counts(batch.batch_id)
    return {
        "batch_id": batch.batch_id,
        "jobs": batch.jobs,
        "state": batch.state,
        "undispatched": batch.jobs - sum(counts.values()),
        "states": counts,
    }


def check_byte_quota(rt: Runtime, tenant: str, declared: int) -> None:
    """Refuse an upload that would take the tenant past its stored-bytes quota, before reading it (the exact
    check is admit_document's, which counts the uploads admitted meanwhile)."""
    quota = rt.settings.tenant_max_bytes
    if rt.document_records.stored_bytes(tenant) + declared > quota:
        raise stored_bytes_exceeded(quota)


def job_status(rt: Runtime, tenant: str, job_id: str) -> dict:
    """``tenant``'s job as its status resource shows it, with its stage (JOB_NOT_FOUND for anyone else's)."""
    job = rt.document_jobs.job(tenant, job_id)
    if job is None:
        raise EvidenceError(ReasonCode.JOB_NOT_FOUND, "no such job")
    attempts = rt.ledger.job_attempts(job_id)
    return job_view(job, rt.document_jobs.stage(job) if job.state == RUNNING else None, attempts)


def job_view(job: DocumentJob, recorded_stage: str | None, attempts: list[JobAttempt]) -> dict:
    """A job as its tenant sees it: its current attempt's state, and every attempt (``attempts``, the first
    first: each replay adds one, linked to the ended attempt it replays, which stays as it ended)."""

    def when(stamp: float | None) -> str | None:
        return None if stamp is None else utc_iso(stamp)

    outputs = job.outputs or {}
    stage = stage_of(job, recorded_stage)
    failed = stage in ("retry_wait", "rejected", "dead")  # why it waits, or why it ended
    return {
        "job_id": job.job_id,
        "operation": job.operation,
        "state": job.state,
        "stage": stage,
        "reason": job.last_reason if failed else None,
        "message": job.last_message if failed else None,  # what the code meant
        "attempts": job.attempts,
        # retry_wait: when the job may be dispatched again (null otherwise)
        "next_attempt_at": when(job.next_attempt_at) if job.state == ACCEPTED else None,
        "inputs": job.request["inputs"],
        "options": job.request["options"],
        "accepted_at": when(job.accepted_at),
        "started_at": when(job.started_at),
        "finished_at": when(job.finished_at),
        "outputs": [
            {"artifact_id": a["key"], "sha256": a["sha256"], "bytes": a["bytes"]} for a in outputs.get("artifacts", [])
        ],
        "findings": outputs.get("summary"),
        **(
            {"period": job.request["period"], "run_id": outputs.get("run_id"), "bundle": outputs.get("bundle")}
            if job.operation == EVIDENCE
            else {}
        ),
        "job_attempts": [
            {
                "attempt_id": a.attempt_id,
                "replay_of": a.replay_of,
                "state": a.state,
                "reason": a.reason,
                "message": a.message,
                "tries": a.tries,
                "policy_version": a.policy_version,
                "opened_at": when(a.opened_at),
                "ended_at": when(a.ended_at),
            }
            for a in attempts
        ],
        "status_url": f"/v1/jobs/{job.job_id}",
    }
