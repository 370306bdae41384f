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
"""

from __future__ import annotations

import contextlib
import io
import time
from dataclasses import dataclass

from pyhanko.pdf_utils.reader import PdfFileReader

from evidence_pipeline.documents import Documents
from evidence_pipeline.documents.gate import GATE_CODES, gate
from evidence_pipeline.documents.registry import Operation, ProcessorInput, ProcessorResult, operation
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.faults import kill_point
from evidence_pipeline.ledger import jobs as states
from evidence_pipeline.ledger.documents import WORKER_VERSION, stage_of
from evidence_pipeline.ledger.jobs import Lease
from evidence_pipeline.models import EventType
from evidence_pipeline.pipeline import put_or_adopt, record_failure
from evidence_pipeline.runtime import RunInfo, Runtime
from evidence_pipeline.signing import dsse
from evidence_pipeline.signing.pades import TIMESTAMPED, sign_pdf, verify_pdf_signature
from evidence_pipeline.store import sha256_file, sha256_hex
from evidence_pipeline.tempfiles import attempt_dir, scratch_file

STATEMENT = "statement.dsse.json"
PREDICATE_TYPE = "https://evidence-pipeline.dev/document-job/v1"
APPROVAL_FIELD = "EvidenceApproval"  # the signature field of the service's approval
_MISSING_OR_REFUSED = GATE_CODES | {
    ReasonCode.DOCUMENT_NOT_FOUND, ReasonCode.STORE_NOT_FOUND, ReasonCode.STORE_DIGEST_MISMATCH
}


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
    """An operation that names its own code for an input that is gone or refused by the gate gets it (the gate's
    own code in the message); transient failures pass through to be retried."""
    try:
        yield
    except EvidenceError as error:
        if code is None or error.code not in _MISSING_OR_REFUSED:
            raise
        raise EvidenceError(code, f"an input is missing or not valid ({error.code})") from None


def _verified(op, result: ProcessorResult, scratch) -> ProcessorResult:
    """Write the outputs to private scratch files, then run the operation's second pass on what was written. The
    files are anonymous: closing them deletes them, on a failure before the error propagates (nothing of them is
    published) as after a pass."""
    written = {}
    with contextlib.ExitStack() as files:
        for name, data in result.artifacts.items():
            written[name] = files.enter_context(scratch_file(scratch))
            written[name].write(data)
            written[name].flush()
        verification = op.verify(written, result)
    return ProcessorResult(result.artifacts, result.summary | {"verification": verification})


def job_prefix(job: dict) -> str:
    return f"documents/{job['tenant']}/{job['period']}/{job['job_id']}"


def run_page(documents: Documents, page_id: str, run: RunInfo) -> list[Outcome]:
    """Work every open job of a page (accepted and due, or running under a lease that may have expired:
    acquiring the lease decides); one job's failure never stops the others. A job in retry_wait whose
    next_attempt_at has not come is left for a later dispatch."""
    now = time.time()
    return [
        run_job(documents, job, run)
        for job in documents.ledger.page_jobs(page_id)
        if job["state"] == states.RUNNING or (job["state"] == states.ACCEPTED and (job["next_attempt_at"] or 0) <= now)
    ]


def run_job(documents: Documents, job: dict, run: RunInfo) -> Outcome:
    rt = documents.runtime
    try:
        lease = rt.ledger.acquire_lease(job["job_id"], run.run_id, rt.settings.lease_seconds)
    except EvidenceError as error:  # LEASE_BUSY: another attempt works it; JOB_CLOSED: nothing to do
        return _outcome(job, documents.ledger.job(job["tenant"], job["job_id"])["state"], error.code)
    if lease is None:
        return _outcome(job, states.SUCCEEDED)
    documents.ledger.mark_started(job["job_id"])
    try:
        with (
            attempt_dir(rt.settings.work_dir, job["job_id"], lease.token) as scratch,
            rt.ledger.keep_alive(lease, rt.settings.lease_seconds),
        ):
            state, reason = _process(documents, job, lease, scratch, run)
    except EvidenceError as error:
        error.lease_token = lease.token
        state = record_failure(rt, job["job_id"], error, run, rt.document_retry_budget)
        if state in states.CLOSED:
            documents.ledger.mark_finished(job["job_id"])
        return _outcome(job, state or states.RUNNING, error.code)
    return _outcome(job, state, reason)


def _outcome(job: dict, state: str, reason: str | None = None) -> Outcome:
    return Outcome(job["job_id"], job["tenant"], job["period"], job["operation"], state, reason)


class _Stages:
    """A staged operation's stages, each recorded under the job's lease with what the issue's audit trail asks:
    prior and next stage, the pinned policy (the options), the input digests and a correlation id."""

    def __init__(self, documents: Documents, job: dict, lease: Lease, op: Operation, run: RunInfo):
        self.documents, self.job, self.lease, self.op, self.run = documents, job, lease, op, run
        # What the status showed before this attempt: accepted, retry_wait, or a dead attempt's last stage (the
        # job read before this lease was taken still names that attempt's lease).
        self.current = stage_of(job, documents.ledger.stage(job) if job["state"] == states.RUNNING else None)

    def enter(self, stage: str, **details) -> None:
        if not self.op.staged:
            return
        facts = {
            "operation": self.op.name,
            "policy": self.job["request"]["options"],
            "inputs": self.job["request"]["inputs"],
            "correlation_id": self.job["batch_id"] or self.job["request_sha256"],
        }
        self.documents.ledger.record_stage(
            self.job, self.lease, self.current, stage, facts | details, self.run.run_id
        )
        self.current = stage


def _process(documents: Documents, job: dict, lease: Lease, scratch, run: RunInfo) -> tuple[str, str | None]:
    """Work one leased job; returns its new state and reason (rejected: a decision against the input)."""
    rt = documents.runtime
    op = operation(job["operation"])
    options = job["request"]["options"]
    pinned = {name: value for name, value in job["request"].items() if name not in ("inputs", "options")}
    stages = _Stages(documents, job, lease, op, run)
    stages.enter("validating")
    inputs, rows = [], []
    prefix = job_prefix(job)
    artifacts = []
    with contextlib.ExitStack() as files:
        for document_id in job["request"]["inputs"]:
            file = files.enter_context(scratch_file(scratch))
            with _input_refused(op.input_refused):
                row = documents.ledger.document(job["tenant"], document_id)
                if row is None:
                    raise EvidenceError(ReasonCode.DOCUMENT_NOT_FOUND, "an input document of this job does not exist")
                documents.store.get_file(row["store_key"], file, expected_sha256=row["sha256"])
                gated = gate(file, options.get("active_content", "refuse"))
            inputs.append(ProcessorInput(document_id, row["sha256"], row["size"], gated, file))
            rows.append(row)
        stages.enter("reviewing", input_sha256=[i.sha256 for i in inputs])
        result = op.processor(inputs, options, pinned)
        if op.verify is not None:
            result = _verified(op, result, scratch)
            for row in rows:  # the originals are never written; prove they are still the bytes we were given
                documents.store.get_file(row["store_key"], files.enter_context(scratch_file(scratch)),
                                         expected_sha256=row["sha256"])
            kill_point("after_document_verified")
        for name, data in sorted(result.artifacts.items()):
            stored = rt.archive.put_once(f"{prefix}/{name}", data)
            artifacts.append({"name": name, "key": stored.key, "sha256": stored.sha256, "bytes": stored.size})
        stages.enter("signing", summary=result.summary)
        if result.signed:
            artifacts.append(_approve(rt, f"{prefix}/{result.signed}", inputs[0], scratch, op.name))
    keyring = rt.keyring
    predicate = {
        "job_id": job["job_id"],
        "tenant": job["tenant"],
        "period": job["period"],
        "operation": op.name,
        "options": options,
        "policy_version": job["policy_version"],
        "worker_version": WORKER_VERSION,
        "request_sha256": job["request_sha256"],
        "inputs": [{"document_id": i.document_id, "sha256": i.sha256} for i in inputs],
        "artifacts": [{k: a[k] for k in ("name", "sha256", "bytes")} for a in artifacts],
        "summary": result.summary,
        "key_id": keyring.statement_key_id,
    }
    subject = inputs[0]
    envelope = dsse.sign_envelope(
        dsse.canonical_json(
            dsse.statement(f"document/{subject.document_id}", subject.sha256, predicate, PREDICATE_TYPE)
        ),
        keyring.statement_key,
        keyring.statement_key_id,
    )
    statement = rt.archive.put_once(f"{prefix}/{STATEMENT}", envelope)
    artifacts.append({"name": STATEMENT, "key": statement.key, "sha256": sha256_hex(envelope), "bytes": statement.size})
    kill_point("after_document_put")
    stages.enter("committing", outputs=[{k: a[k] for k in ("name", "sha256")} for a in artifacts])
    lease = rt.ledger.renew_lease(lease, rt.settings.lease_seconds)  # still ours? then hold it through the commit
    documents.ledger.complete(
        job,
        lease,
        EventType.DOCUMENT_PUBLISHED,
        subject.sha256,
        {
            "operation": op.name,
            "prefix": prefix,
            "artifacts": artifacts,
            "summary": result.summary,
            "key_id": keyring.statement_key_id,
            "run_id": run.run_id,
        },
        run.run_id,
        rejected=result.rejected,
    )
    return (states.REJECTED, result.rejected) if result.rejected else (states.SUCCEEDED, None)


def _approve(rt: Runtime, key: str, document: ProcessorInput, scratch, operation_name: str) -> dict:
    """The input with the service's PAdES approval signature appended, put once under ``key``.

    Signatures are not deterministic, so a retry never signs again over an object an earlier attempt stored: it
    adopts it when it begins with the exact input bytes and carries our valid approval (pyHanko appends, so the
    contract's own signatures stay intact before it). A store or signing dependency that fails transiently
    leaves it unknown whether the object was stored: REVIEW_DEPENDENCY_TIMEOUT, and the retry adopts."""
    keyring, level = rt.keyring, rt.settings.pades_level
    document.file.seek(0)
    earlier = len(PdfFileReader(document.file, strict=True).embedded_signatures)

    def sign():
        document.file.seek(0)
        return sign_pdf(
            document.file, keyring, level, rt.settings.tsa_url, out=scratch_file(scratch),
            field_name=APPROVAL_FIELD, reason=f"Approved by {operation_name}",
        )

    def adopt(stored, sha256: str) -> tuple[str, int] | None:
        if sha256_file(stored, document.size) != (document.sha256, document.size):
            return None
        tsa_root = keyring.tsa_root_pem if level in TIMESTAMPED else None
        verify_pdf_signature(stored, keyring.root_pem, level, tsa_root, field_name=APPROVAL_FIELD, earlier=earlier)
        return sha256, stored.seek(0, io.SEEK_END)

    try:
        (sha256, size), _ = put_or_adopt(rt.archive, key, scratch, make=sign, accept=adopt)
    except EvidenceError as error:
        if not error.retryable:
            raise
        raise EvidenceError(
            ReasonCode.REVIEW_DEPENDENCY_TIMEOUT,
            f"the approval signature may or may not be stored ({error.code}); the retry adopts what was",
        ) from None
    kill_point("after_approval_put")
    return {"name": key.rsplit("/", 1)[-1], "key": key, "sha256": sha256, "bytes": size}
