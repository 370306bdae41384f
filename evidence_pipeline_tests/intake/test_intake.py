"""Intake over HTTP: the real server on 127.0.0.1 (uvicorn), on both backend sets, with an httpx client."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import socket
from concurrent.futures import ThreadPoolExecutor

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from evidence_pipeline.cli import main
from evidence_pipeline.intake.app import create_app
from evidence_pipeline_tests.support.intake_server import (
    CEILING,
    client,
    error_code,
    intake_environment,
    pdf_bytes,
    submit,
    tokens,
    upload,
)
from evidence_pipeline_tests.support.signers import Signers


def stored_documents(documents) -> list[str]:
    return documents.document_store.list("acme")


def document_rows(documents) -> list:
    with documents.ledger.engine.connect() as conn:
        return conn.execute(select(documents.ledger.documents)).all()


def event_count(ledger) -> int:
    with ledger.engine.connect() as conn:
        return len(conn.execute(select(ledger.audit_events.c.seq)).all())


# --- tokens ---------------------------------------------------------------------------------------------------


def test_token_issue_stores_only_a_hash_and_revoke_locks_the_token_out(backend, documents, intake, tmp_path):
    env = intake_environment(backend)
    signers = Signers(documents.ledger, tmp_path / "actors")
    refused = CliRunner().invoke(
        main, ["tenant", "token", "issue", "acme", "--key", signers.key_file("audrey")], env=env
    )
    assert refused.exit_code != 0 and "ACTION_FORBIDDEN" in refused.output  # an auditor changes nothing
    env["EVIDENCE_ACTOR_KEY"] = signers.key_file("olga")  # the operator
    unknown = CliRunner().invoke(main, ["tenant", "token", "issue", "acme"], env=env)
    assert unknown.exit_code != 0 and "TENANT_UNKNOWN" in unknown.output  # `tenant add` comes first
    assert CliRunner().invoke(main, ["tenant", "add", "acme"], env=env).exit_code == 0
    issued = CliRunner().invoke(main, ["tenant", "token", "issue", "acme"], env=env)
    assert issued.exit_code == 0, issued.output
    token_id = issued.output.split("token id:")[1].split()[0]
    token = issued.output.split("token:")[1].split()[0]
    assert len(token.removeprefix("evt_")) >= 43  # 32 random bytes, base64url: 256 bits
    with documents.ledger.engine.connect() as conn:
        rows = conn.execute(select(documents.ledger.api_tokens)).all()
    assert [row.token_id for row in rows] == [token_id]
    assert token not in repr(rows) and rows[0].token_sha256 == hashlib.sha256(token.encode()).hexdigest()
    [issued_event] = documents.ledger.events_of_type("token.issued")
    assert token not in json.dumps(issued_event) and issued_event["actor"] == "olga"
    assert issued_event["details"]["authorization"]["payload"]  # the signed request is stored with the event
    with client(intake, token) as http:
        assert upload(http, pdf_bytes()).status_code == 201
        revoked = CliRunner().invoke(main, ["tenant", "token", "revoke", token_id], env=env)
        assert revoked.exit_code == 0 and "revoked" in revoked.output
        refused = upload(http, pdf_bytes(2))
        assert refused.status_code == 401 and error_code(refused) == "TOKEN_INVALID"
    unknown = CliRunner().invoke(main, ["tenant", "token", "revoke", "tok_nope"], env=env)
    assert unknown.exit_code != 0 and "TOKEN_NOT_FOUND" in unknown.output
    assert CliRunner().invoke(main, ["tenant", "token", "issue", "Not|A|Slug"], env=env).exit_code == 2


# --- the server -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("standing", ["never registered", "offboarded"])
def test_a_live_token_of_a_tenant_the_registry_does_not_admit_is_refused_at_the_door(documents, intake, standing):
    """A token issued before issuing required a registered tenant (written here as such a deployment holds it), or
    one whose tenant's registry row says offboarded (a row written behind the ledger: offboarding revokes the
    tenant's tokens in its own transaction): every request is 403 with the registry's code, before anything
    is read, stored or recorded - not accepted here to fail later in the tenant's runs."""
    ledger, token = documents.ledger, "evt_" + "l" * 43
    if standing == "offboarded":
        Signers(ledger).register_tenants(["initech"])
    with ledger.engine.begin() as conn:
        conn.execute(
            ledger.api_tokens.insert().values(
                token_id="tok_legacy",
                tenant="initech",
                created_at=0.0,
                token_sha256=hashlib.sha256(token.encode()).hexdigest(),
            )
        )
        if standing == "offboarded":
            tenants = ledger.tenants.c
            conn.execute(
                ledger.tenants.update().where(tenants.tenant == "initech").values(offboarded_seq=tenants.registered_seq)
            )
    code = "TENANT_UNKNOWN" if standing == "never registered" else "TENANT_OFFBOARDED"
    events = event_count(ledger)
    with client(intake, token) as http:
        answers = [
            upload(http, pdf_bytes()),
            submit(http, "k1", {"operation": "inspect", "inputs": ["doc_x"]}),
            http.get("/v1/jobs/job_x"),
            http.put("/v1/sources/2026-10", content=b"a,b\n", headers={"Content-Type": "text/csv"}),
        ]
    assert [(answer.status_code, error_code(answer)) for answer in answers] == [(403, code)] * len(answers)
    assert document_rows(documents) == [] and documents.document_store.list("initech") == []
    assert event_count(ledger) == events  # nothing recorded


def test_healthz_answers_without_auth(intake):
    with client(intake) as http:
        response = http.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"ok": True, "checks": {"ledger": "ok", "documents": "ok", "archive": "ok"}}


def test_every_error_is_json_with_a_stable_code(documents, intake):
    acme, _ = tokens(documents)
    with client(intake) as anonymous, client(intake, "evt_not-a-token") as forged, client(intake, acme) as http:
        assert error_code(anonymous.post("/v1/documents", content=b"%PDF-")) == "AUTH_REQUIRED"
        assert error_code(anonymous.get("/v1/jobs/x", headers={"Authorization": "Basic YTpi"})) == "AUTH_REQUIRED"
        assert forged.get("/v1/jobs/x").status_code == 401 and error_code(forged.get("/v1/jobs/x")) == "TOKEN_INVALID"
        missing = http.get("/v1/nothing-here")
        assert missing.status_code == 404 and error_code(missing) == "ROUTE_NOT_FOUND"
        wrong = http.delete("/v1/jobs")
        assert wrong.status_code == 405 and error_code(wrong) == "METHOD_NOT_ALLOWED"
        not_json = http.post("/v1/jobs", content=b"{oops", headers={"Idempotency-Key": "k1"})
        assert not_json.status_code == 400 and error_code(not_json) == "REQUEST_INVALID"


# --- documents ------------------------------------------------------------------------------------------------


def test_upload_is_put_once_content_addressed_and_admitted_in_the_ledger(documents, intake):
    acme, globex = tokens(documents)
    data = pdf_bytes()
    sha256 = hashlib.sha256(data).hexdigest()
    with client(intake, acme) as http, client(intake, globex) as other:
        first = upload(http, data, **{"X-Content-SHA256": sha256})
        again = upload(http, data)
        theirs = upload(other, data)
    assert first.status_code == 201 and again.status_code == 200 and theirs.status_code == 201
    assert (
        first.json()
        == again.json()
        == {
            "document_id": first.json()["document_id"],
            "sha256": sha256,
            "bytes": len(data),
            "media_type": "application/pdf",
        }
    )
    assert theirs.json()["document_id"] != first.json()["document_id"]  # ids never reveal another tenant's upload
    assert stored_documents(documents) == [f"acme/{sha256}"]
    assert documents.document_store.get(f"acme/{sha256}", expected_sha256=sha256) == data
    events = documents.ledger.events_of_type("document.admitted", tenant="acme")
    assert [e["subject_sha256"] for e in events] == [sha256]
    details = events[0]["details"]
    assert details.pop("admission_ms") > 0
    assert details == {"document_id": first.json()["document_id"], "bytes": len(data), "media_type": "application/pdf"}
    assert documents.ledger.verify_chain() >= 3


def test_admission_gates_answer_their_codes_and_store_nothing(documents, intake):
    acme, _ = tokens(documents)
    data = pdf_bytes()

    def chunked():
        yield data

    with client(intake, acme) as http:
        cases = {
            "LENGTH_REQUIRED": http.post(
                "/v1/documents", content=chunked(), headers={"Content-Type": "application/pdf"}
            ),
            "DOCUMENT_TOO_LARGE": upload(http, b"%PDF-" + b"0" * CEILING),
            "MEDIA_TYPE_UNSUPPORTED": upload(http, data, **{"Content-Type": "text/plain"}),
            "CONTENT_DIGEST_MISMATCH": upload(http, data, **{"X-Content-SHA256": "0" * 64}),
            "REQUEST_INVALID": upload(http, data, **{"X-Content-SHA256": "not-hex"}),
        }
        sniffed = upload(http, b"GIF89a" + data)  # declared PDF, bytes say otherwise
        polyglot = upload(http, b"PK\x03\x04" + data)
    statuses = {
        "LENGTH_REQUIRED": 411,
        "DOCUMENT_TOO_LARGE": 413,
        "MEDIA_TYPE_UNSUPPORTED": 415,
        "CONTENT_DIGEST_MISMATCH": 400,
        "REQUEST_INVALID": 400,
    }
    for code, response in cases.items():
        assert (response.status_code, error_code(response)) == (statuses[code], code)
    for response in (sniffed, polyglot):
        assert (response.status_code, error_code(response)) == (415, "MEDIA_TYPE_UNSUPPORTED")
    assert stored_documents(documents) == [] and document_rows(documents) == []


def _raw_request(url: str, head: bytes, body: bytes) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(head + body)
        answer = b""
        try:
            while chunk := conn.recv(65536):
                answer += chunk
        except (TimeoutError, ConnectionResetError):
            pass
    return answer


def test_ceiling_plus_one_bytes_with_a_lying_content_length_store_nothing(documents, intake):
    acme, _ = tokens(documents)
    body = b"%PDF-" + b"0" * (CEILING - 4)  # ceiling + 1 bytes
    head = (
        f"POST /v1/documents HTTP/1.1\r\nHost: intake\r\nAuthorization: Bearer {acme}\r\n"
        f"Content-Type: application/pdf\r\nContent-Length: {CEILING}\r\n\r\n"
    ).encode()
    answer = _raw_request(intake, head, body)
    assert not answer.startswith((b"HTTP/1.1 200", b"HTTP/1.1 201"))
    smuggled = head.replace(b"\r\n\r\n", b"\r\nTransfer-Encoding: chunked\r\n\r\n")
    answer = _raw_request(intake, smuggled, b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400")
    assert stored_documents(documents) == [] and document_rows(documents) == []
    work_dir = documents.settings.work_dir
    assert not work_dir.exists() or list(work_dir.iterdir()) == []  # no temp file left behind


@pytest.mark.parametrize("sent, code, status", [(CEILING + 1, "DOCUMENT_TOO_LARGE", 413), (10, "LENGTH_MISMATCH", 400)])
def test_the_app_itself_counts_the_bytes_it_reads(documents, sent, code, status):
    """Behind a server or proxy that does not hold the client to its Content-Length, the app stops reading at
    ceiling + 1 byte, and refuses a body shorter than declared."""
    acme, _ = tokens(documents)
    app = create_app(documents)
    body = b"%PDF-" + b"0" * (sent - 5)
    messages = [
        {"type": "http.request", "body": body[i : i + 4096], "more_body": i + 4096 < len(body)}
        for i in range(0, len(body), 4096)
    ]
    sent_back = []

    async def receive():
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message):
        sent_back.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/documents",
        "raw_path": b"/v1/documents",
        "query_string": b"",
        "root_path": "",
        "scheme": "http",
        "http_version": "1.1",
        "server": ("127.0.0.1", 80),
        "client": ("127.0.0.1", 1),
        "headers": [
            (b"authorization", f"Bearer {acme}".encode()),
            (b"content-type", b"application/pdf"),
            (b"content-length", b"100"),
        ],
    }  # a declared length the app accepts
    asyncio.run(app(scope, receive, send))
    assert sent_back[0]["status"] == status
    assert json.loads(sent_back[1]["body"])["error"]["code"] == code
    assert stored_documents(documents) == [] and document_rows(documents) == []


# --- jobs -----------------------------------------------------------------------------------------------------


def test_jobs_are_idempotent_per_key_and_conflicts_are_recorded(documents, intake):
    acme, _ = tokens(documents)
    with client(intake, acme) as http:
        document_id = upload(http, pdf_bytes()).json()["document_id"]
        other_id = upload(http, pdf_bytes(2)).json()["document_id"]
        request = {"operation": "inspect", "inputs": [document_id]}
        first = submit(http, "key-1", request)
        same = submit(http, "key-1", request | {"options": {"active_content": "refuse"}})  # defaults are explicit
        conflict = submit(http, "key-1", {"operation": "inspect", "inputs": [other_id]})
        second = submit(http, "key-2", request)
        status = http.get(first.json()["status_url"])
    assert first.status_code == 202 and first.json()["state"] == "accepted"
    assert first.json()["status_url"] == f"/v1/jobs/{first.json()['job_id']}"
    assert same.status_code == 200 and same.json() == first.json()
    assert conflict.status_code == 409 and error_code(conflict) == "IDEMPOTENCY_CONFLICT"
    assert second.status_code == 202 and second.json()["job_id"] != first.json()["job_id"]
    view = status.json()
    assert status.status_code == 200 and view["state"] == "accepted" and view["attempts"] == 0
    assert view["inputs"] == [document_id] and view["options"] == {"active_content": "refuse"}
    assert view["accepted_at"] and view["started_at"] is None and view["outputs"] == [] and view["reason"] is None
    conflicts = documents.ledger.events_of_type("job.idempotency_conflict")
    assert len(conflicts) == 1
    details = conflicts[0]["details"]
    assert set(details) == {"job_id", "request_sha256", "accepted_request_sha256"}
    assert details["request_sha256"] != details["accepted_request_sha256"]
    assert other_id not in json.dumps(conflicts) and document_id not in json.dumps(conflicts)  # digests only


def test_job_requests_are_validated(documents, intake):
    acme, globex = tokens(documents)
    with client(intake, acme) as http, client(intake, globex) as other:
        document_id = upload(http, pdf_bytes()).json()["document_id"]
        theirs = upload(other, pdf_bytes(3)).json()["document_id"]
        ok = {"operation": "inspect", "inputs": [document_id]}
        cases = [
            (submit(http, None, ok), 400, "IDEMPOTENCY_KEY_INVALID"),
            (submit(http, "x" * 256, ok), 400, "IDEMPOTENCY_KEY_INVALID"),
            (submit(http, "has space", ok), 400, "IDEMPOTENCY_KEY_INVALID"),
            (submit(http, "k", {"operation": "shred", "inputs": [document_id]}), 422, "OPERATION_UNKNOWN"),
            (submit(http, "k", ok | {"options": {"active_content": "allow"}}), 422, "OPTIONS_INVALID"),
            (submit(http, "k", ok | {"options": {"colour": "red"}}), 422, "OPTIONS_INVALID"),
            (submit(http, "k", ok | {"inputs": [document_id, document_id]}), 422, "INPUTS_INVALID"),
            (submit(http, "k", ok | {"inputs": []}), 422, "INPUTS_INVALID"),
            (submit(http, "k", ok | {"inputs": [theirs]}), 404, "DOCUMENT_NOT_FOUND"),
            (submit(http, "k", ok | {"inputs": ["doc_nonexistent"]}), 404, "DOCUMENT_NOT_FOUND"),
            (submit(http, "k", ok | {"tenant": "globex"}), 400, "REQUEST_INVALID"),
            (submit(http, "k", [ok]), 400, "REQUEST_INVALID"),
        ]
    for response, status, code in cases:
        assert (response.status_code, error_code(response)) == (status, code), response.text
    assert documents.ledger.events_of_type("job.accepted") == []


def test_24_concurrent_identical_job_requests_get_one_job(documents, intake, tmp_path):
    acme, _ = tokens(documents)
    with client(intake, acme) as http:
        document_id = upload(http, pdf_bytes()).json()["document_id"]
        request = {"operation": "inspect", "inputs": [document_id]}
        with ThreadPoolExecutor(24) as pool:
            responses = list(pool.map(lambda _: submit(http, "burst", request), range(24)))
    assert sorted({r.status_code for r in responses}) in ([200, 202], [202])
    assert [r.status_code for r in responses].count(202) == 1
    assert len({r.json()["job_id"] for r in responses}) == 1
    for response in responses:
        assert "\\" not in response.text and str(tmp_path) not in response.text and "/tmp" not in response.text
    assert len(documents.ledger.events_of_type("job.accepted")) == 1


def test_other_tenants_resources_do_not_exist(documents, intake):
    acme, globex = tokens(documents)
    with client(intake, acme) as http, client(intake, globex) as other:
        document_id = upload(http, pdf_bytes()).json()["document_id"]
        job_id = submit(http, "mine", {"operation": "inspect", "inputs": [document_id]}).json()["job_id"]
        foreign = other.get(f"/v1/jobs/{job_id}")
        nonexistent = other.get("/v1/jobs/" + "0" * 64)
        same_key = submit(other, "mine", {"operation": "inspect", "inputs": [document_id]})
    assert foreign.status_code == nonexistent.status_code == 404
    assert foreign.json() == nonexistent.json() and error_code(foreign) == "JOB_NOT_FOUND"
    assert same_key.status_code == 404 and error_code(same_key) == "DOCUMENT_NOT_FOUND"


def test_admission_latency_and_queue_age_are_in_evidence_stats(backend, documents, intake):
    acme, _ = tokens(documents)
    with client(intake, acme) as http:
        document_id = upload(http, pdf_bytes()).json()["document_id"]
        submit(http, "k", {"operation": "inspect", "inputs": [document_id]})
        submit(http, "k", {"operation": "inspect", "inputs": [document_id]})  # known key: no new admission
    env = intake_environment(backend)
    report = json.loads(CliRunner().invoke(main, ["stats", "--json"], env=env).output)
    assert report["admission"]["count"] == 2 and report["admission"]["p50"] > 0
    assert report["oldest_unstarted_document_job_age_seconds"] >= 0
    table = CliRunner().invoke(main, ["stats"], env=env).output
    assert re.search(r"^intake +admission +2 +[0-9.]+", table, re.M) and "oldest unstarted document job: " in table
