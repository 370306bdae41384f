"""Load control at intake: per-tenant quotas, exact under concurrency, and backpressure (503) on a tenant's own
queue age and on every tenant's outstanding jobs together. What waiting can heal (outstanding jobs finish) is answered
with Retry-After; what it cannot (stored bytes: documents are kept, so a tenant's total never goes down) is 413
REQUEST_EXCEEDS_QUOTA without it."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import sqlalchemy

from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.ledger.admission import Clock
from evidence_pipeline.ledger.ledger import Ledger
from evidence_pipeline_tests.support.intake_server import client, error_code, pdf_bytes, submit, tokens, upload
from evidence_pipeline_tests.support.pieces import pieces_of
from evidence_pipeline_tests.support.signers import signers_of

INTAKE_OVERRIDES = {
    "EVIDENCE_TENANT_MAX_JOBS": "2",
    "EVIDENCE_TENANT_MAX_BYTES": "1500",
    "EVIDENCE_INTAKE_MAX_QUEUE_AGE_SECONDS": "1.5",
    "EVIDENCE_INTAKE_MAX_QUEUED_JOBS": "3",
    "EVIDENCE_INTAKE_TENANT_MAX_UPLOADS": "50",  # the races below, not the in-flight cap
}


def test_quotas_refuse_new_work_with_retry_after_but_answer_known_keys(documents, intake):
    acme, globex = tokens(documents)
    with client(intake, acme) as http, client(intake, globex) as other:
        ids = [upload(http, pdf_bytes(n)).json()["document_id"] for n in (1, 2)]  # 431 and 551 bytes
        too_many_bytes = upload(http, pdf_bytes(6))  # fits the quota alone, not beside what is stored: ever
        assert (too_many_bytes.status_code, error_code(too_many_bytes)) == (413, "REQUEST_EXCEEDS_QUOTA")
        assert "Retry-After" not in too_many_bytes.headers and "1500" in too_many_bytes.json()["error"]["message"]
        first = [submit(http, f"k{n}", {"operation": "inspect", "inputs": [i]}) for n, i in enumerate(ids)]
        third = submit(http, "k2", {"operation": "inspect", "inputs": [ids[0]]})
        replay = submit(http, "k0", {"operation": "inspect", "inputs": [ids[0]]})
        theirs = submit(
            other, "k0", {"operation": "inspect", "inputs": [upload(other, pdf_bytes()).json()["document_id"]]}
        )
    assert [r.status_code for r in first] == [202, 202]
    assert (third.status_code, error_code(third), third.headers["Retry-After"]) == (429, "TENANT_QUOTA_EXCEEDED", "30")
    assert replay.status_code == 200 and theirs.status_code == 202  # known keys and other tenants are unaffected
    assert documents.document_store.list("acme") and len(documents.document_store.list("acme")) == 2


def test_backpressure_is_per_tenant_while_status_reads_keep_working(documents, intake):
    """Before: one tenant's old unstarted job refused every tenant's first job."""
    acme, globex = tokens(documents)
    with client(intake, acme) as http, client(intake, globex) as other:
        document_id = upload(http, pdf_bytes()).json()["document_id"]
        waiting = submit(http, "old", {"operation": "inspect", "inputs": [document_id]})
        time.sleep(1.6)  # acme's oldest unstarted job is now older than the objective
        refused = submit(http, "new", {"operation": "inspect", "inputs": [document_id]})
        theirs = submit(
            other, "new", {"operation": "inspect", "inputs": [upload(other, pdf_bytes()).json()["document_id"]]}
        )
        status = http.get(waiting.json()["status_url"])
        same_key = submit(http, "old", {"operation": "inspect", "inputs": [document_id]})
    assert (refused.status_code, error_code(refused), refused.headers["Retry-After"]) == (
        503,
        "INTAKE_BACKPRESSURE",
        "30",
    )
    assert theirs.status_code == 202  # another tenant's first job
    assert status.status_code == 200 and status.json()["state"] == "accepted"
    assert same_key.status_code == 200


def test_every_tenants_outstanding_jobs_together_are_the_global_limit(documents, intake):
    acme, globex = tokens(documents)
    initech = signers_of(documents.ledger).issue_token("initech")
    accepted = []
    for token, keys in ((acme, ["a", "b"]), (globex, ["c"])):
        with client(intake, token) as http:
            document_id = upload(http, pdf_bytes()).json()["document_id"]
            accepted += [submit(http, key, {"operation": "inspect", "inputs": [document_id]}) for key in keys]
    with client(intake, initech) as http:
        document_id = upload(http, pdf_bytes()).json()["document_id"]
        refused = submit(http, "d", {"operation": "inspect", "inputs": [document_id]})
    assert [r.status_code for r in accepted] == [202, 202, 202]
    assert (refused.status_code, error_code(refused)) == (503, "INTAKE_BACKPRESSURE")  # 3 of 3 outstanding


def test_50_parallel_uploads_never_pass_the_byte_quota(documents, intake):
    """Before: the quota was read before each upload and never again, so all 40 of a burst passed it."""
    acme, _ = tokens(documents)
    bodies = [pdf_bytes(producer=f"upload {i:02d}") for i in range(50)]
    with client(intake, acme) as http, ThreadPoolExecutor(50) as pool:
        responses = list(pool.map(lambda body: upload(http, body), bodies))
    admitted = [len(body) for body, r in zip(bodies, responses, strict=True) if r.status_code == 201]
    refused = [len(body) for body, r in zip(bodies, responses, strict=True) if r.status_code != 201]
    assert {(r.status_code, error_code(r)) for r in responses if r.status_code != 201} == {
        (413, "REQUEST_EXCEEDS_QUOTA")
    }
    assert sum(admitted) <= 1500 < sum(admitted) + min(refused)  # exact: no room for one more
    assert len(documents.document_store.list("acme")) == len(admitted)  # refused bytes do not stay in the store


def _batch(key: str, document_id: str) -> dict:
    return {"jobs": [{"idempotency_key": key, "operation": "inspect", "inputs": [document_id]}]}


def test_50_parallel_batches_never_pass_the_job_quota(documents, intake):
    """Before: a batch's undispatched jobs were not counted, so back-to-back batches passed the quota."""
    acme, _ = tokens(documents)
    with client(intake, acme) as http:
        document_id = upload(http, pdf_bytes()).json()["document_id"]
        with ThreadPoolExecutor(50) as pool:
            responses = list(pool.map(lambda n: http.post("/v1/batches", json=_batch(f"k{n}", document_id)), range(50)))
        single = submit(http, "single", {"operation": "inspect", "inputs": [document_id]})
    assert sorted(r.status_code for r in responses) == [202, 202] + [429] * 48
    assert (single.status_code, error_code(single)) == (429, "TENANT_QUOTA_EXCEEDED")


def test_a_batch_over_quota_is_refused_before_its_specs_are_checked(documents, intake):
    """Before: every spec was checked (6.7 s for 5,000) before the quota answered 429. Two jobs with one outstanding
    (quota 2) may fit later: 429; three never fit: 413, not retried (issue 47)."""
    acme, _ = tokens(documents)
    with client(intake, acme) as http:
        document_id = upload(http, pdf_bytes()).json()["document_id"]
        assert submit(http, "k0", {"operation": "inspect", "inputs": [document_id]}).status_code == 202
        later = http.post("/v1/batches", json={"jobs": [{"not": "a spec"}] * 2})
        never = http.post("/v1/batches", json={"jobs": [{"not": "a spec"}] * 3})
    assert (later.status_code, error_code(later)) == (429, "TENANT_QUOTA_EXCEEDED")
    assert (never.status_code, error_code(never)) == (413, "REQUEST_EXCEEDS_QUOTA")


def test_two_server_processes_admitting_at_once_never_pass_the_byte_quota(documents):
    """One Ledger (engine, pool, locks) per process. A's admission pauses right after its quota check until B's
    is done, or 3 s: on PostgreSQL, before, B committed in that pause and both were admitted past the quota (on
    SQLite B waits for A's writer lock)."""
    other = pieces_of(Ledger(documents.settings.ledger_url)).document_records
    checked, b_done = threading.Event(), threading.Event()

    def pause_after_the_check(conn, cursor, statement, *args):
        if "FROM evidence_tenant_storage" in statement and not checked.is_set():
            checked.set()
            b_done.wait(timeout=3)

    def admit(records, name: str):
        try:
            return records.admit_document(
                "acme",
                name * 64,
                size=1000,
                media_type="application/pdf",
                store_key=f"acme/{name * 64}",
                actor="test",
                clock=Clock(None),
                max_bytes=1500,
            )[1]
        except EvidenceError as error:
            return error.code

    engine = documents.ledger.engine
    sqlalchemy.event.listen(engine, "after_cursor_execute", pause_after_the_check)
    try:
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(admit, documents.document_records, "a")
            assert checked.wait(timeout=30)
            try:
                second = admit(other, "b")
            finally:
                b_done.set()
            outcomes = {first.result(), second}
    finally:
        sqlalchemy.event.remove(engine, "after_cursor_execute", pause_after_the_check)
    assert outcomes == {True, "REQUEST_EXCEEDS_QUOTA"}  # one admitted (created), one refused
