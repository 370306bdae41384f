"""Document workers: one page of accepted jobs, each under its own fenced lease.

For every job: lease it, fetch its inputs from the document store (digests re-checked), run the worker-side gate on
each, run the operation's processor, publish its artifacts (and, when the processor approves its input, the input
with the service's PAdES approval signature appended) and a signed DSSE statement (subject: the input's digest)
put-once under ``documents/<tenant>/<YYYY-MM>/<job id>/`` in the archive, and commit the `document.published` event
with job -> succeeded in one fenced transaction (or, for a decision against the input, with `job.rejected`). A
gate refusal or any other failure is recorded on the job with its reason code and publishes nothing further.

A staged operation records each stage it enters (validating, reviewing, signing, committing) as a
`document.stage` event under the job's lease: the job stays `running` in the state machine, and its status shows
the stage.

Over 400 lines because it is one job's life under its lease, step by step; split, the fencing of each step would
hide in another file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import time
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from evidence_pipeline import jsonread
from evidence_pipeline.document_formats import (
    DERIVATIVE_MANIFEST_SCHEMA,
    DERIVATIVE_PREDICATE_TYPE,
    DERIVED_BY,
    DERIVED_BY_FIELD,
    PREDICATE_TYPE,
    SIGNATURE_CHECK_PREDICATE_TYPE,
    SIGNATURE_CHECKS,
    STATEMENT,
)
from evidence_pipeline.documents import signature_check
from evidence_pipeline.documents.decisions import pin_holds
from evidence_pipeline.documents.gate import ACTIVE_CONTENT, gate
from evidence_pipeline.documents.isolation import Limits, isolated, reopened, unclassified
from evidence_pipeline.documents.registry import Derivative, Operation, ProcessorInput, ProcessorResult, operation
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.faults import kill_point
from evidence_pipeline.ledger import jobs as states
from evidence_pipeline.ledger.document_jobs import WORKER_VERSION, StageChange, stage_of
from evidence_pipeline.ledger.jobs import Lease
from evidence_pipeline.ledger.rows import DocumentJob
from evidence_pipeline.models import EventType
from evidence_pipeline.monthly.pipeline import our_statement_keys, put_or_adopt, record_failure
from evidence_pipeline.runtime import RunInfo, Runtime
from evidence_pipeline.signing import dsse
from evidence_pipeline.signing.pades import TIMESTAMPED, sign_pdf, verify_pdf_signature
from evidence_pipeline.signing.pdf_reader import open_pdf
from evidence_pipeline.store import StoredObject, sha256_file, sha256_hex
from evidence_pipeline.tempfiles import attempt_dir, scratch_file

if TYPE_CHECKING:
    from evidence_pipeline.signing.etsi_report import ValidationReport

APPROVAL_FIELD = "EvidenceApproval"  # the signature field of the service's approval
_MISSING = frozenset({ReasonCode.DOCUMENT_NOT_FOUND, ReasonCode.STORE_NOT_FOUND, ReasonCode.STORE_DIGEST_MISMATCH})


@dataclass(frozen=True)
class Outcome:
    job_id: str
    tenant: str
    period: str  # the month the job was accepted in
    operation: str
    state: str  # succeeded, rejected, dead, accepted (a transient failure with budget left), running (leased)
    reason: str | None = None


@contextlib.contextmanager
def _input_refused(code: str | None):
    """An operation that names its own code for an input that is gone gets it (the store's code in the message); a
    gate refusal keeps the gate's code, which says what is wrong with the input, and transient failures pass
    through to be retried."""
    try:
        yield
    except EvidenceError as error:
        if code is None or error.code not in _MISSING:
            raise
        raise EvidenceError(code, f"an input is missing or not the bytes admitted ({error.code})") from None


def _verified(op, result: ProcessorResult, scratch, limits: Limits) -> ProcessorResult:
    """Write the outputs to private scratch files, then run the operation's second pass on what was written. The
    files are anonymous: closing them deletes them, on a failure before the error propagates (nothing of them is
    published) as after a pass."""
    written = {}
    with contextlib.ExitStack() as files:
        for name, data in result.artifacts.items():
            written[name] = files.enter_context(scratch_file(scratch))
            written[name].write(data)
            written[name].flush()
        verification = isolated(limits, _verification, op.verify, written, result)
    return ProcessorResult(result.artifacts, result.summary | {"verification": verification})


@contextlib.contextmanager
def _active_content_remedy(op: Operation):
    """An active-content refusal names the option that accepts it, when the operation takes it (the gate does not
    know which operation asks)."""
    try:
        yield
    except EvidenceError as error:
        if error.code not in ACTIVE_CONTENT or "active_content" not in op.options:
            raise
        raise EvidenceError(
            error.code,
            f'{error.message}; the option {{"active_content": "flag"}} of {op.name} '
            "accepts it and lists what was found",
        ) from None


# What runs in a job's worker process (documents/isolation.py), each on files of its own over the parent's.


def _gated(file, active_content: str):
    return gate(reopened(file), active_content)


def _processed(processor, inputs: list[ProcessorInput], options: dict, pinned: dict) -> ProcessorResult:
    return processor([dataclasses.replace(i, file=reopened(i.file)) for i in inputs], options, pinned)


def _verification(verify, written: dict, result: ProcessorResult) -> dict:
    return verify({name: reopened(file) for name, file in written.items()}, result)


def _signatures_checked(file, sha256: str, policy, check: str) -> bytes:
    # its canonical JSON: the record's strings may be pyHanko's, which refer to the parsed file
    return dsse.canonical_json(signature_check.check_signatures(reopened(file), sha256, policy, check))


def _etsi_reported(file, roots: tuple[bytes, ...], at: datetime) -> list[ValidationReport]:
    from evidence_pipeline.signing.etsi_report import validation_reports  # imported by _etsi_reports, before the fork

    return validation_reports(reopened(file).read(), roots, "B-B", at)


def job_prefix(job: DocumentJob) -> str:
    return f"documents/{job.tenant}/{job.period}/{job.job_id}"


def run_page(rt: Runtime, page_id: str, run: RunInfo) -> list[Outcome]:
    """Work every open job of a page (accepted and due, or running under a lease that may have expired:
    acquiring the lease decides); one job's failure never stops the others. A job in retry_wait whose
    next_attempt_at has not come is left for a later dispatch."""
    now = time.time()
    return [
        run_job(rt, job, run)
        for job in rt.pages.page_jobs(page_id)
        if job.state == states.RUNNING or (job.state == states.ACCEPTED and (job.next_attempt_at or 0) <= now)
    ]


def run_job(rt: Runtime, job: DocumentJob, run: RunInfo) -> Outcome:
    if job.state == states.RUNNING:  # an expired lease is an attempt that died: it counts against the budget
        lost = rt.ledger.record_lost_attempt(job.job_id, job.lease_token, run.run_id, rt.retry_wait_budget)
        if lost is not None:
            return _failed(rt, job, lost, ReasonCode.WORKER_LOST)
    stages = _Stages(rt, job, operation(job.operation), run)
    try:
        lease = rt.document_jobs.start(job, run.run_id, rt.settings.lease_seconds, stages.change("validating"))
    except EvidenceError as error:  # LEASE_BUSY: another attempt works it; JOB_CLOSED: nothing to do
        return _outcome(job, rt.document_jobs.job(job.tenant, job.job_id).state, error.code)
    if lease is None:
        return _outcome(job, states.SUCCEEDED)
    try:
        with (
            attempt_dir(rt.settings.work_dir, job.job_id, lease.token) as scratch,
            rt.ledger.keep_alive(lease, rt.settings.lease_seconds),
        ):
            state, reason = _process(rt, job, lease=lease, stages=stages, scratch=scratch, run=run)
    except Exception as raised:  # every failure of an attempt is recorded: none leaves the job leased and open
        error = raised if isinstance(raised, EvidenceError) else unclassified(raised)
        error.lease_token = lease.token
        state = record_failure(rt, job.job_id, error, run, rt.retry_wait_budget)
        return _failed(rt, job, state or states.RUNNING, error.code)
    return _outcome(job, state, reason)


def _failed(rt: Runtime, job: DocumentJob, state: str, reason: str) -> Outcome:
    """The outcome of a failed attempt that moved the job to ``state``: a closed job has finished too."""
    if state in states.CLOSED:
        rt.document_jobs.mark_finished(job.job_id)
    return _outcome(job, state, reason)


def _outcome(job: DocumentJob, state: str, reason: str | None = None) -> Outcome:
    return Outcome(job.job_id, job.tenant, job.period, job.operation, state, reason)


class _Stages:
    """A staged operation's stages, each recorded under the job's lease with what the issue's audit trail asks:
    prior and next stage, the pinned policy (the options), the input digests and a correlation id. The first
    (validating) is committed with the lease and the last (committing) with the outputs: no work lies between
    them, so they need no transaction of their own."""

    def __init__(self, rt: Runtime, job: DocumentJob, op: Operation, run: RunInfo):
        self.rt, self.job, self.op, self.run = rt, job, op, run
        # What the status showed before this attempt: accepted, retry_wait, or a dead attempt's last stage (the
        # job read before this lease was taken still names that attempt's lease).
        self.current = stage_of(job, rt.document_jobs.stage(job) if job.state == states.RUNNING else None)

    def change(self, stage: str, **details) -> StageChange | None:
        """The move to ``stage``, for the caller to commit (None for an operation without stages)."""
        if not self.op.staged:
            return None
        facts = {
            "operation": self.op.name,
            "policy": self.job.request["options"],
            "inputs": self.job.request["inputs"],
            "correlation_id": self.job.batch_id or self.job.request_sha256,
        }
        change = StageChange(self.current, stage, facts | details)
        self.current = stage
        return change

    def enter(self, lease: Lease, stage: str, **details) -> None:
        """Commit the move to ``stage`` on its own, before the work it names."""
        change = self.change(stage, **details)
        if change is not None:
            self.rt.document_jobs.record_stage(self.job, lease, change, self.run.run_id)


def _process(
    rt: Runtime, job: DocumentJob, *, lease: Lease, stages: _Stages, scratch, run: RunInfo
) -> tuple[str, str | None]:
    """Work one leased job, its validating stage recorded with the lease; returns its new state and reason
    (rejected: a decision against the input)."""
    op = stages.op
    limits = Limits(rt.settings.processor_memory_mb * 1024 * 1024, rt.settings.processor_seconds)
    options = job.request["options"]
    pinned = {name: value for name, value in job.request.items() if name not in ("inputs", "options")}
    inputs, rows = [], []
    prefix = job_prefix(job)
    artifacts = []
    with contextlib.ExitStack() as files:
        for input_id in job.request["inputs"]:
            file = files.enter_context(scratch_file(scratch))
            with _input_refused(op.input_refused):
                source = _source(rt, job.tenant, input_id)
                source.store.get_file(source.key, file, expected_sha256=source.sha256)
                file.flush()  # the worker processes read it through descriptors of their own
                with _active_content_remedy(op):
                    gated = isolated(limits, _gated, file, options.get("active_content", "refuse"))
            if gated.permissions_only and op.writes:  # the author's restrictions, kept by what writes
                raise EvidenceError(
                    ReasonCode.DOCUMENT_PERMISSIONS_ONLY,
                    f"{op.name} writes from its input, which is encrypted (permissions only); "
                    "inspect reads it, or send an unencrypted copy",
                )
            inputs.append(ProcessorInput(input_id, source.sha256, file.seek(0, io.SEEK_END), gated, file))
            rows.append(source)
        check = None
        if op.signature_check:
            stages.enter(lease, "signature_check", input_sha256=[i.sha256 for i in inputs])
            check = _check_signatures(rt, job, lease=lease, document=inputs[0], scratch=scratch, run=run, limits=limits)
            artifacts += [
                {
                    "name": "signature_check.json",
                    "key": check["record"],
                    "sha256": check["record_sha256"],
                    "bytes": check["record_bytes"],
                }
            ] + [{k: r[k] for k in ("name", "key", "sha256", "bytes")} for r in check["etsi_reports"]]
        if op.admit_inputs is not None:  # what admission pinned must still hold
            digests = {i.document_id: i.sha256 for i in inputs}
            for pin in pinned["reviews"]:
                pin_holds(rt, job.tenant, pin, digests[pin["artifact_id"]])
        stages.enter(lease, op.processing_stage, input_sha256=[i.sha256 for i in inputs])
        result = isolated(limits, _processed, op.processor, inputs, options, pinned)
        if check is not None:  # the job's status shows the check beside the processor's findings
            result = dataclasses.replace(
                result,
                summary=result.summary
                | {
                    "signature_check": {
                        k: check[k] for k in ("signature_check_id", "policy_version", "outcome", "signatures")
                    }
                },
            )
        if op.verify is not None:
            result = _verified(op, result, scratch, limits)
            for source in rows:  # the originals are never written; prove they are still the bytes we were given
                source.store.get_file(
                    source.key, files.enter_context(scratch_file(scratch)), expected_sha256=source.sha256
                )
            kill_point("after_document_verified")
        for name, data in sorted(result.artifacts.items()):
            stored = rt.archive.put_once(f"{prefix}/{name}", data)
            artifacts.append({"name": name, "key": stored.key, "sha256": stored.sha256, "bytes": stored.size})
        stages.enter(lease, "signing", summary=result.summary)
        derived = tuple(
            _publish_derivative(
                rt,
                job,
                op=op,
                inputs=inputs,
                sources=rows,
                check=check,
                pinned=pinned,
                derivative=d,
                artifacts=artifacts,
                scratch=scratch,
            )
            for d in result.derived
        )
        if result.signed:
            artifacts.append(_approve(rt, f"{prefix}/{result.signed}", inputs[0], scratch, op.name))
    keyring = rt.keyring
    predicate = {
        "job_id": job.job_id,
        "tenant": job.tenant,
        "period": job.period,
        "operation": op.name,
        "options": options,
        "policy_version": job.policy_version,
        "worker_version": WORKER_VERSION,
        "request_sha256": job.request_sha256,
        "inputs": [{"document_id": i.document_id, "sha256": i.sha256} for i in inputs],
        "artifacts": [{k: a[k] for k in ("name", "sha256", "bytes")} for a in artifacts],
        "summary": result.summary,
        "key_id": keyring.statement_key_id,
    }
    subject = inputs[0]
    statement, envelope = _put_statement(
        rt,
        f"{prefix}/{STATEMENT}",
        name=f"document/{subject.document_id}",
        sha256=subject.sha256,
        predicate=predicate,
        predicate_type=PREDICATE_TYPE,
    )
    artifacts.append({"name": STATEMENT, "key": statement.key, "sha256": sha256_hex(envelope), "bytes": statement.size})
    kill_point("after_document_put")
    committing = stages.change("committing", outputs=[{k: a[k] for k in ("name", "sha256")} for a in artifacts])
    rt.document_jobs.complete(  # fenced: commits only while the lease is still ours and unexpired
        job,
        lease,
        event_type=EventType.DOCUMENT_PUBLISHED,
        subject_sha256=subject.sha256,
        outputs={
            "operation": op.name,
            "prefix": prefix,
            "artifacts": artifacts,
            "summary": result.summary,
            "key_id": keyring.statement_key_id,
            "run_id": run.run_id,
        },
        actor=run.run_id,
        rejected=result.rejected,
        message=result.message,
        derived=derived,
        stage=committing,
    )
    return (states.REJECTED, result.rejected) if result.rejected else (states.SUCCEEDED, None)


@dataclass(frozen=True)
class _Source:
    """Where an input's bytes are and what they must hash to: an upload in the document store, or a derivative in
    the archive (with its lineage)."""

    store: object
    key: str
    sha256: str
    lineage: dict | None  # a derivative's; None for an upload


def _source(rt: Runtime, tenant: str, input_id: str) -> _Source:
    if input_id.startswith("doc_"):
        row = rt.document_records.document(tenant, input_id)
        if row is not None:
            return _Source(rt.document_store, row.store_key, row.sha256, None)
    else:
        event = rt.document_records.find_event(tenant, EventType.DOCUMENT_DERIVED, "artifact_id", input_id)
        if event is not None:
            lineage = event.parsed["details"]["lineage"]
            return _Source(rt.archive, input_id, lineage["output_digest"], lineage)
    raise EvidenceError(ReasonCode.DOCUMENT_NOT_FOUND, "an input document of this job does not exist")


def _put_statement(
    rt: Runtime, key: str, *, name: str, sha256: str, predicate: dict, predicate_type: str, added: tuple[str, ...] = ()
) -> tuple[StoredObject, bytes]:
    """Put our DSSE statement about ``name`` once under ``key``; returns the stored object and its bytes.

    Where one is already there (an earlier attempt's, or another job's of the same content), it is adopted when a
    key of ours, of any generation, signed it and it states the same, apart from which key signed: a rotation in
    between must not turn a retry into a conflict. ``added`` names the predicate's entries a later version of this
    code added: a statement written before them, the same without them, is adopted as it is (stored data is never
    rewritten; what it does not state, it does not sign)."""
    keyring = rt.keyring
    payload = dsse.canonical_json(dsse.statement(name, sha256, predicate, predicate_type))
    envelope = dsse.sign_envelope(payload, keyring.statement_key, keyring.statement_key_id)
    try:
        return rt.archive.put_once(key, envelope), envelope
    except EvidenceError as error:
        if error.code != ReasonCode.STORE_CONFLICT:
            raise
    stored = rt.archive.get(key, max_bytes=jsonread.MAX_BYTES)
    opened = dsse.verify_envelope(stored, our_statement_keys(rt), dsse.PAYLOAD_TYPE, code=ReasonCode.STORE_CONFLICT)
    theirs = _unsigned(jsonread.loads(opened.payload, ReasonCode.STORE_CONFLICT, key))
    ours = _unsigned(json.loads(payload))
    earlier = ours | {"predicate": {k: v for k, v in ours["predicate"].items() if k not in added}}
    if theirs not in (ours, earlier):
        raise EvidenceError(ReasonCode.STORE_CONFLICT, f"{key} holds a statement that is not this one")
    adopted = StoredObject(key, sha256_hex(stored), len(stored), created=False, version_id=rt.archive.version_id(key))
    return adopted, stored


def _unsigned(statement) -> object:
    """A statement without the id of the key that signed it (a predicate may name it)."""
    if isinstance(statement, dict) and isinstance(statement.get("predicate"), dict):
        return statement | {"predicate": {k: v for k, v in statement["predicate"].items() if k != "key_id"}}
    return statement


def signature_check_prefix(tenant: str, check: str) -> str:
    return f"documents/{tenant}/{SIGNATURE_CHECKS}/{check}"


def _check_signatures(
    rt: Runtime, job: DocumentJob, *, lease: Lease, document: ProcessorInput, scratch, run: RunInfo, limits: Limits
) -> dict:
    """The signature check stage: the input's signature check record under the configured trust policy, put once
    (a retry, or another job of the same bytes, adopts the record already stored), its DSSE statement (subject:
    the input's digest), and its `signature.checked` event, committed once. Returns the event's details."""
    policy = signature_check.trust_policy(rt.keyring.root_pem, _extra_roots(rt.settings.signature_trust_roots))
    check = signature_check.check_id(job.tenant, document.sha256, policy)
    base = signature_check_prefix(job.tenant, check)

    def make():
        out = scratch_file(scratch)
        out.write(isolated(limits, _signatures_checked, document.file, document.sha256, policy, check) + b"\n")
        out.seek(0)
        return out

    def adopt(stored, sha256: str) -> tuple[dict, str, int] | None:
        data = stored.read()
        record = jsonread.loads(data, ReasonCode.STORE_CONFLICT, "a signature check record")
        ours = (record.get("signature_check_id"), record.get("document_sha256")) == (check, document.sha256)
        return (record, sha256, len(data)) if ours else None

    (record, record_sha256, record_bytes), _ = put_or_adopt(
        rt.archive, f"{base}.json", scratch=scratch, make=make, accept=adopt
    )
    reports = _etsi_reports(rt, base, document=document, policy=policy, record=record, limits=limits)
    summary = {
        "outcome": record["outcome"],
        "signatures": [
            {k: s[k] for k in ("field", "page", "signed_revision", "findings")} for s in record["signatures"]
        ],
    }
    predicate = {
        "signature_check_id": check,
        "policy_version": policy.version,
        "record_sha256": record_sha256,
        "etsi_reports": [{k: r[k] for k in ("key", "sha256", "indication")} for r in reports.values()],
        "key_id": rt.keyring.statement_key_id,
    } | summary
    _, envelope = _put_statement(
        rt,
        f"{base}.dsse.json",
        name=f"document/{document.document_id}",
        sha256=document.sha256,
        predicate=predicate,
        predicate_type=SIGNATURE_CHECK_PREDICATE_TYPE,
        added=("etsi_reports",),
    )
    details = {
        "signature_check_id": check,
        "policy_version": policy.version,
        "document_id": document.document_id,
        "record": f"{base}.json",
        "record_sha256": record_sha256,
        "record_bytes": record_bytes,
        "statement": f"{base}.dsse.json",
        "statement_sha256": sha256_hex(envelope),
        "etsi_reports": list(reports.values()),
        "job_id": job.job_id,
        "outcome": summary["outcome"],
        "signatures": [
            s | ({"etsi_indication": reports[n]["indication"]} if n in reports else {})
            for n, s in enumerate(summary["signatures"], start=1)
        ],
    }
    rt.document_jobs.record_once(
        job,
        lease,
        event_type=EventType.SIGNATURE_CHECKED,
        subject_sha256=document.sha256,
        name="signature_check_id",
        details=details,
        actor=run.run_id,
    )
    return details


def _etsi_reports(
    rt: Runtime,
    base: str,
    *,
    document: ProcessorInput,
    policy: signature_check.TrustPolicy,
    record: dict,
    limits: Limits,
) -> dict[int, dict]:
    """The ETSI TS 119 102-2 report of each signature of the record (by its 1-based position there), from the
    basic validation process under the check's roots at the record's moment: deterministic bytes, so a retry or
    a later job of the same check puts the same objects. Each is an artifact of the job: name, key, digest, size,
    and the indication the report states."""
    # Imported here, in the worker, once per process: pyHanko's ETSI report model (xsdata, lxml, the generated
    # ETSI classes) costs ~0.3 s of CPU, which every process that loads the code location paid at import, and
    # only a signature check's reports use it; the forked child below inherits it.
    import evidence_pipeline.signing.etsi_report  # noqa: F401

    at = datetime.fromisoformat(record["validated_at"])
    made = {r.field_name: r for r in isolated(limits, _etsi_reported, document.file, policy.roots, at)}
    reports = {}
    for n, entry in enumerate(record["signatures"], start=1):
        report = made.get(entry["field"]) if entry["kind"] == "signature" else None
        if report is not None:
            stored = rt.archive.put_once(f"{base}.etsi-{n}.xml", report.xml)  # the field's name is the signer's
            reports[n] = {
                "name": f"signature_check.{n}.etsi.xml",
                "key": stored.key,
                "sha256": stored.sha256,
                "bytes": stored.size,
                "indication": report.indication,
            }
    return reports


def _extra_roots(path) -> bytes | None:
    if path is None:
        return None
    try:
        return path.read_bytes()
    except OSError:
        raise EvidenceError(ReasonCode.CONFIG_INVALID, "EVIDENCE_SIGNATURE_TRUST_ROOTS cannot be read") from None


def _publish_derivative(
    rt: Runtime,
    job: DocumentJob,
    *,
    op: Operation,
    inputs: list[ProcessorInput],
    sources: list,
    check: dict | None,
    pinned: dict,
    derivative: Derivative,
    artifacts: list,
    scratch,
) -> tuple[str, dict]:
    """Put a derivative, its DSSE statement and its manifest once under a key named by its content's identity:
    the same tenant, operation, input digests, options, policy version and signature check give the same keys
    and bytes, whichever job (idempotency key) asks. Beside it, a copy signed by the service as "derived by"
    (PAdES, appended: it begins with the derivative's exact bytes; adopted, never signed twice). Returns what its
    `document.derived` event records."""
    by_id = {i.document_id: (i, source) for i, source in zip(inputs, sources)}
    parents = [by_id[parent] for parent in derivative.parents]
    originals = {source.lineage["original_digest"] if source.lineage else i.sha256 for i, source in parents}
    checks = {source.lineage["signature_check_id"] for _, source in parents if source.lineage}
    if len(originals) != 1 or len(checks) > 1:
        raise EvidenceError(ReasonCode.INPUTS_INVALID, "a derivative's parents must derive from one original")
    check_id = check["signature_check_id"] if check else next(iter(checks), None)
    identity = sha256_hex(
        dsse.canonical_json(
            {
                "tenant": job.tenant,
                "operation": op.name,
                "inputs": [i.sha256 for i in inputs],
                "options": job.request["options"],
                "policy_version": job.policy_version,
                "signature_check_id": check_id,
                "reviews": pinned.get("reviews"),
            }
        )
    )
    base = f"{derived_prefix(job.tenant, identity)}/{derivative.name}"
    output_digest = sha256_hex(derivative.data)
    lineage = {
        "original_digest": originals.pop(),
        "parent_artifact_ids": list(derivative.parents),
        "operation": op.name,
        "policy_version": job.policy_version,
        "output_digest": output_digest,
        "signature_check_id": check_id,
        "derivation_id": identity,
    } | (
        {"reviews": [r for r in pinned["reviews"] if r["artifact_id"] in derivative.parents]}
        if "reviews" in pinned
        else {}
    )
    stored = rt.archive.put_once(f"{base}.pdf", derivative.data)
    predicate = {"artifact_id": stored.key, "lineage": lineage, "facts": derivative.facts}
    statement, _ = _put_statement(
        rt,
        f"{base}.{STATEMENT}",
        name=stored.key,
        sha256=output_digest,
        predicate=predicate,
        predicate_type=DERIVATIVE_PREDICATE_TYPE,
    )
    manifest = (
        dsse.canonical_json(
            {
                "schema": DERIVATIVE_MANIFEST_SCHEMA,
                "artifact_id": stored.key,
                "name": derivative.name,
                "bytes": stored.size,
                "facts": derivative.facts,
                "lineage": lineage,
                "statement": {"key": statement.key, "sha256": statement.sha256},
            }
        )
        + b"\n"
    )
    manifest_stored = rt.archive.put_once(f"{base}.manifest.json", manifest)
    for name, obj in (
        (f"{derivative.name}.pdf", stored),
        (f"{derivative.name}.{STATEMENT}", statement),
        (f"{derivative.name}.manifest.json", manifest_stored),
    ):
        artifacts.append({"name": name, "key": obj.key, "sha256": obj.sha256, "bytes": obj.size})
    with scratch_file(scratch) as file:
        file.write(derivative.data)
        derived_by = _signed_copy(
            rt,
            f"{base}.{DERIVED_BY}",
            file=file,
            sha256=output_digest,
            size=stored.size,
            scratch=scratch,
            field=DERIVED_BY_FIELD,
            reason=f"Derived by {op.name}",
        )
    artifacts.append(derived_by)
    return output_digest, {
        "derived_by": derived_by["key"],
        "derived_by_sha256": derived_by["sha256"],
        "artifact_id": stored.key,
        "name": derivative.name,
        "manifest": manifest_stored.key,
        "manifest_sha256": manifest_stored.sha256,
        "statement": statement.key,
        "statement_sha256": statement.sha256,
        "lineage": lineage,
    }


def derived_prefix(tenant: str, identity: str) -> str:
    return f"documents/{tenant}/derived/{identity}"


def _approve(rt: Runtime, key: str, document: ProcessorInput, scratch, operation_name: str) -> dict:
    """The input with the service's PAdES approval signature appended, put once under ``key`` (see
    _signed_copy). A store or signing dependency that fails transiently leaves it unknown whether the object was
    stored: REVIEW_DEPENDENCY_TIMEOUT, and the retry adopts."""
    try:
        stored = _signed_copy(
            rt,
            key,
            file=document.file,
            sha256=document.sha256,
            size=document.size,
            scratch=scratch,
            field=APPROVAL_FIELD,
            reason=f"Approved by {operation_name}",
        )
    except EvidenceError as error:
        if not error.retryable:
            raise
        raise EvidenceError(
            ReasonCode.REVIEW_DEPENDENCY_TIMEOUT,
            f"the approval signature may or may not be stored ({error.code}); the retry adopts what was",
        ) from None
    kill_point("after_approval_put")
    return stored


def _signed_copy(rt: Runtime, key: str, *, file, sha256: str, size: int, scratch, field: str, reason: str) -> dict:
    """``file`` (of ``sha256`` and ``size``) with the service's PAdES signature appended in ``field``, put once
    under ``key``; its artifact entry.

    Signatures are not deterministic, so a retry never signs again over an object an earlier attempt stored: it
    adopts it when it begins with the exact bytes and carries our valid signature in ``field`` (pyHanko appends,
    so the document's own signatures stay intact before it). What this attempt signed and stored is not read back
    and validated again: the signer's key, certificate and root were checked when they were loaded
    (pades._signer), and that validation cost more than a third of a short contract's review."""
    keyring, level = rt.keyring, rt.settings.pades_level

    def sign():
        file.seek(0)
        return sign_pdf(
            file,
            keyring,
            level=level,
            tsa_url=rt.settings.tsa_url,
            out=scratch_file(scratch),
            field_name=field,
            reason=reason,
        )

    def adopt(stored, stored_sha256: str) -> tuple[str, int] | None:
        if sha256_file(stored, size) != (sha256, size):
            return None
        earlier = len(open_pdf(file).embedded_signatures)  # the document's own, before ours
        tsa_root = keyring.tsa_root_pem if level in TIMESTAMPED else None
        verify_pdf_signature(
            stored, keyring.root_pem, level=level, tsa_root_pem=tsa_root, field_name=field, earlier=earlier
        )
        return stored_sha256, stored.seek(0, io.SEEK_END)

    (signed_sha256, signed_size), _ = put_or_adopt(
        rt.archive, key, scratch=scratch, make=sign, accept=adopt, made=lambda stored: (stored.sha256, stored.size)
    )
    return {"name": key.rsplit("/", 1)[-1], "key": key, "sha256": signed_sha256, "bytes": signed_size}
