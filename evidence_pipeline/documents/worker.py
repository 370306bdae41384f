"""Document workers: one page of accepted jobs, each under its own fenced lease.

For every job: lease it, fetch its inputs from the document store (digests re-checked), run the worker-side gate on
each, run the operation's processor, publish its artifacts and a signed DSSE statement (subject: the input's
digest) put-once under ``documents/<tenant>/<YYYY-MM>/<job id>/`` in the archive, and commit the
`document.published` event with job -> succeeded in one fenced transaction. A gate refusal or any other failure is
recorded on the job with its reason code and publishes nothing further.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from evidence_pipeline.documents import Documents
from evidence_pipeline.documents.gate import GATE_CODES, gate
from evidence_pipeline.documents.registry import ProcessorInput, ProcessorResult, operation
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.faults import kill_point
from evidence_pipeline.ledger import jobs as states
from evidence_pipeline.ledger.documents import WORKER_VERSION
from evidence_pipeline.ledger.jobs import Lease
from evidence_pipeline.models import EventType
from evidence_pipeline.pipeline import record_failure
from evidence_pipeline.runtime import RunInfo
from evidence_pipeline.signing import dsse
from evidence_pipeline.store import sha256_hex
from evidence_pipeline.tempfiles import attempt_dir, scratch_file

STATEMENT = "statement.dsse.json"
PREDICATE_TYPE = "https://evidence-pipeline.dev/document-job/v1"
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
    """Work every open job of a page (accepted, or running under a lease that may have expired: acquiring the
    lease decides); one job's failure never stops the others."""
    return [
        run_job(documents, job, run)
        for job in documents.ledger.page_jobs(page_id)
        if job["state"] in (states.ACCEPTED, states.RUNNING)
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
            _process(documents, job, lease, scratch, run)
    except EvidenceError as error:
        error.lease_token = lease.token
        state = record_failure(rt, job["job_id"], error, run)
        if state in states.CLOSED:
            documents.ledger.mark_finished(job["job_id"])
        return _outcome(job, state or states.RUNNING, error.code)
    return _outcome(job, states.SUCCEEDED)


def _outcome(job: dict, state: str, reason: str | None = None) -> Outcome:
    return Outcome(job["job_id"], job["tenant"], job["period"], job["operation"], state, reason)


def _process(documents: Documents, job: dict, lease: Lease, scratch, run: RunInfo) -> None:
    rt = documents.runtime
    op = operation(job["operation"])
    options = job["request"]["options"]
    pinned = {name: value for name, value in job["request"].items() if name not in ("inputs", "options")}
    inputs, rows = [], []
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
        result = op.processor(inputs, options, pinned)
        if op.verify is not None:
            result = _verified(op, result, scratch)
            for row in rows:  # the originals are never written; prove they are still the bytes we were given
                documents.store.get_file(row["store_key"], files.enter_context(scratch_file(scratch)),
                                         expected_sha256=row["sha256"])
            kill_point("after_document_verified")
    prefix = job_prefix(job)
    artifacts = []
    for name, data in sorted(result.artifacts.items()):
        stored = rt.archive.put_once(f"{prefix}/{name}", data)
        artifacts.append({"name": name, "key": stored.key, "sha256": stored.sha256, "bytes": stored.size})
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
    )
