"""The front door bounds every connection, and foreseeable input is never a 500: a real server on 127.0.0.1,
raw sockets for the shapes no HTTP client library would send. The header cases every server shares are in
test_server_guard.py."""

from __future__ import annotations

import asyncio
import hashlib
import resource
import select
import socket
import subprocess
import time
from urllib.parse import urlsplit

import httpx
import pytest

from evidence_pipeline.config import Settings
from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.http_guard import BoundedRequests, Limits
from evidence_pipeline.runtime import runtime_for
from evidence_pipeline_tests.support.intake_server import (
    client,
    error_code,
    intake_environment,
    pdf_bytes,
    running_server,
    serving,
    tokens,
    upload,
    wait_until_receiving,
)
from evidence_pipeline_tests.support.raw_http import answer

LOCAL = pytest.mark.parametrize("backend", ["local"], indirect=True)  # connection handling is the same on both
INTAKE_OVERRIDES = {
    "EVIDENCE_INTAKE_HEADER_TIMEOUT_SECONDS": "1",
    "EVIDENCE_INTAKE_MIN_BODY_BYTES_PER_SECOND": "1000",
    # Generous here, so a loaded machine never turns another test's answer into a 408; the test of the total time
    # starts a server of its own with 3 s.
    "EVIDENCE_INTAKE_REQUEST_TIMEOUT_SECONDS": "60",
    "EVIDENCE_INTAKE_TENANT_MAX_UPLOADS": "2",
    "EVIDENCE_INTAKE_MAX_UPLOADS": "3",
}


def connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    return socket.create_connection((parts.hostname, parts.port), timeout=30)


@LOCAL
def test_64_headers_within_the_size_limit_are_served(intake):
    with client(intake) as http:
        assert http.get("/healthz", headers={f"X-{i}": "1" for i in range(55)}).status_code == 200


@LOCAL
def test_a_body_slower_than_the_minimum_rate_is_408_and_stores_nothing(documents, intake):
    acme, _ = tokens(documents)
    sock = connect(intake)
    sock.sendall(
        b"POST /v1/documents HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + acme.encode()
        + b"\r\nContent-Type: application/pdf\r\nContent-Length: 60000\r\n\r\n%PDF-"
    )
    status, _, body = answer(sock)  # 5 bytes, then nothing: behind 1,000 bytes/s after the 1 s grace
    assert (status, body["error"]["code"]) == (408, "REQUEST_TIMEOUT")
    assert documents.document_store.list("acme") == []


@LOCAL
def test_a_request_longer_than_the_total_time_is_408(backend):
    """A body that keeps the minimum rate still ends when the request's total time is up."""
    documents = runtime_for(
        Settings.from_env(
            intake_environment(backend) | INTAKE_OVERRIDES | {"EVIDENCE_INTAKE_REQUEST_TIMEOUT_SECONDS": "3"}
        )
    )
    acme, _ = tokens(documents)
    with running_server(documents) as url:
        sock = connect(url)
        sock.sendall(
            b"POST /v1/documents HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
            + acme.encode()
            + b"\r\nContent-Type: application/pdf\r\nContent-Length: 60000\r\n\r\n%PDF-"
        )
        for _ in range(200):  # 5,000 bytes/s: five times the minimum rate, for up to 12 s (the total is 3 s)
            if select.select([sock], [], [], 0)[0]:
                break
            sock.sendall(b"0" * 500)
            time.sleep(0.1)
        status, _, body = answer(sock)
    assert (status, body["error"]["code"]) == (408, "REQUEST_TIMEOUT")
    assert documents.document_store.list("acme") == []


def _paced_read(app_delay: float, body_arrives: bool) -> bytes:
    """The body as an app behind BoundedRequests reads it, ``app_delay`` s after it is called (a slow token lookup),
    the body already arrived or never arriving; the grace is 1 s."""
    limits = Limits(
        max_headers=64,
        max_header_bytes=8192,
        header_timeout=1,
        min_body_rate=1000,
        request_timeout=30,
        max_connections=10,
        max_uploads=1,
        tenant_max_uploads=1,
        retry_after=1,
    )
    read = []

    async def app(scope, receive, send):
        await asyncio.sleep(app_delay)
        read.append((await receive())["body"])

    async def receive():
        await asyncio.sleep(0 if body_arrives else 3600)
        return {"type": "http.request", "body": b"x" * 100, "more_body": False}

    scope = {"type": "http", "path": "/v1/jobs", "headers": []}
    asyncio.run(BoundedRequests(app, limits)(scope, receive, None))
    return read[0]


def test_a_body_read_late_by_the_app_is_not_late_and_one_never_sent_is():
    """Before: the grace ran from the app's call, so a body that had arrived in full was refused 408 whenever the
    app spent the grace before reading it (a token lookup under load)."""
    assert _paced_read(app_delay=1.5, body_arrives=True) == b"x" * 100
    with pytest.raises(EvidenceError) as late:
        _paced_read(app_delay=0, body_arrives=False)
    assert late.value.code == "REQUEST_TIMEOUT"


def upload_head(token: str, length: int) -> bytes:
    return (
        b"POST /v1/documents HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + token.encode()
        + b"\r\nContent-Type: application/pdf\r\nContent-Length: %d\r\n\r\n" % length
    )


def holding_server(backend, **overrides: str):
    """Documents and a server whose stalled uploads keep their slots for a minute, however loaded the machine: with
    the module's 1 s grace, an upload held longer is refused 408 and frees its slots."""
    documents = runtime_for(
        Settings.from_env(
            intake_environment(backend)
            | INTAKE_OVERRIDES
            | overrides
            | {"EVIDENCE_INTAKE_HEADER_TIMEOUT_SECONDS": "60"}
        )
    )
    return documents, running_server(documents)


def start_upload(url: str, token: str, producer: str) -> tuple[socket.socket, bytes]:
    """An upload whose first 10 bytes are sent: it holds its slots until the rest is."""
    sock, data = connect(url), pdf_bytes(producer=producer)
    sock.sendall(upload_head(token, len(data)) + data[:10])
    return sock, data


def finish_uploads(held: list[tuple[socket.socket, bytes]]) -> None:
    for sock, data in held:
        sock.sendall(data[10:])
        assert answer_status(sock) == 201


@LOCAL
def test_uploads_in_flight_are_bounded_per_tenant_and_in_all(backend):
    documents, server = holding_server(backend)
    acme, globex = tokens(documents)
    body = pdf_bytes()
    with server as url:
        held = [start_upload(url, acme, f"held {n}") for n in range(2)]
        wait_until_receiving(url, 2)  # the two hold acme's two slots
        with client(url, acme) as http:
            refused = upload(http, body)
            assert (refused.status_code, error_code(refused)) == (503, "INTAKE_BUSY")
            assert refused.headers["retry-after"] == "30"
        held.append(start_upload(url, globex, "held 2"))
        wait_until_receiving(url, 3)
        with client(url, globex) as http:
            refused = upload(http, body)  # globex holds one of its two, but the process holds three of three
            assert (refused.status_code, error_code(refused)) == (503, "INTAKE_BUSY")
        finish_uploads(held)
        with client(url, acme) as http:
            assert upload(http, pdf_bytes(producer="after")).status_code == 201


@LOCAL
def test_an_upload_past_the_bound_is_answered_before_its_body_and_its_token_and_closed_in_order(backend):
    """With the process at its bound, an upload of 64 MiB is answered 503 + Retry-After though only its first MiB
    was sent, and a wrong token gets the same answer: nothing about the request is looked up. The connection then
    ends with a FIN after the answer. Before: the 503 (or 401) came after the token and quota lookups, and uvicorn
    closed the socket with the body's first MiB unread, so the kernel sent a reset behind the answer, which a
    client still sending never reads."""
    documents, server = holding_server(backend, EVIDENCE_INTAKE_MAX_BYTES=str(64 << 20))
    acme, globex = tokens(documents)
    with server as url:
        held = [start_upload(url, token, f"held {n}") for n, token in enumerate((acme, acme, globex))]
        wait_until_receiving(url, 3)  # three of three in flight
        for token in (globex, "not-a-token"):
            sock = connect(url)
            sock.sendall(upload_head(token, 64 << 20) + b"%PDF-" + b"0" * ((1 << 20) - 5))
            status, headers, body = answer(sock)  # to the end: a reset raises ConnectionResetError
            sock.close()
            assert (status, body["error"]["code"], headers["retry-after"]) == (503, "INTAKE_BUSY", "30")
        finish_uploads(held)
    assert len(documents.document_store.list("globex")) == 1  # the held one alone


def answer_status(sock: socket.socket) -> int:
    data = b""
    while b"\r\n" not in data:
        data += sock.recv(65536)
    return int(data.split()[1])


# --- ambiguity --------------------------------------------------------------------------------------------------


def test_a_repeated_security_header_is_400(documents, intake):
    """Before: the first of two Authorization or X-Content-SHA256 headers won, silently."""
    acme, globex = tokens(documents)
    with client(intake) as http:
        twice = http.get(
            "/v1/jobs/job_x", headers=[("Authorization", f"Bearer {acme}"), ("Authorization", f"Bearer {globex}")]
        )
        assert (twice.status_code, error_code(twice)) == (400, "HEADER_REPEATED")
        data = pdf_bytes()
        digest = hashlib.sha256(data).hexdigest()
        twice = http.post(
            "/v1/documents",
            content=data,
            headers=[
                ("Authorization", f"Bearer {acme}"),
                ("Content-Type", "application/pdf"),
                ("X-Content-SHA256", digest),
                ("X-Content-SHA256", "0" * 64),
            ],
        )
        assert (twice.status_code, error_code(twice)) == (400, "HEADER_REPEATED")
    assert documents.document_store.list("acme") == []


def test_paths_are_normalized_in_place_never_redirected(documents, intake):
    """Before: a trailing slash answered a bare 307 whose Location was built from the client's Host header."""
    acme, _ = tokens(documents)
    with client(intake, acme) as http:
        slashed = http.get("/healthz/", headers={"Host": "evil.example"})
        assert slashed.status_code == 200 and "location" not in slashed.headers
        doubled = http.post("/v1//jobs/", json={}, headers={"Host": "evil.example"})
        assert (doubled.status_code, error_code(doubled)) == (400, "IDEMPOTENCY_KEY_INVALID")


@LOCAL
def test_at_the_connection_limit_an_idle_connection_makes_room_and_busy_ones_are_kept(backend):
    documents = runtime_for(
        Settings.from_env(intake_environment(backend) | INTAKE_OVERRIDES | {"EVIDENCE_INTAKE_MAX_CONNECTIONS": "4"})
    )
    acme, _ = tokens(documents)
    with running_server(documents) as url:
        idle = connect(url)  # one request answered, then kept alive
        idle.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert answer_status(idle) == 200

        def busy(n: int) -> socket.socket:  # a job whose body is still coming: the app is reading it
            sock = connect(url)
            sock.sendall(
                b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                + acme.encode()
                + b"\r\nIdempotency-Key: k%d\r\nContent-Length: 100\r\n\r\n{" % n
            )
            return sock

        held = [busy(n) for n in range(4)]  # the fourth makes four of four: the idle one is closed for it
        assert idle.recv(65536) == b""  # closed without an answer, as the keep-alive timeout would
        time.sleep(0.2)  # all four reach the app
        fifth = connect(url)  # four busy: nothing to close
        status, headers, body = answer(fifth)
        kept = [answer(sock)[2]["error"]["message"] for sock in held]  # each ends on its own clock, not evicted
    assert (status, body["error"]["code"], headers["retry-after"]) == (503, "INTAKE_BUSY", "30")
    assert all(message.startswith("the body arrived slower") for message in kept)


def _descriptor_limit(limit: int):
    def lower() -> None:  # in the server's process, before it starts
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    return lower


@LOCAL
def test_2200_slow_clients_at_a_1024_descriptor_limit_leave_other_clients_served(backend):
    """Before: the slow connections took every descriptor, accept() failed with EMFILE and 0% of other clients
    were served. Now a new connection evicts the one waiting longest for its headers."""
    with serving(backend, workers=1, preexec_fn=_descriptor_limit(1024)) as (port, _):
        slow, served, refused = [], 0, 0
        for i in range(2200):
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=2)
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")  # and never more
                slow.append(sock)
            except OSError:
                refused += 1
            if i % 44 == 0:  # 50 requests of another client, spread over the attack
                try:
                    served += httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10).status_code == 200
                except httpx.TransportError:
                    pass
        assert (served, refused) == (50, 0)
        closed = sum(1 for sock in slow if _answered(sock))
        assert closed >= 2200 - 1024  # the evicted ones were answered and closed, not left hanging
        for sock in slow:
            sock.close()


def _answered(sock: socket.socket) -> bool:
    """Did the server answer or close ``sock`` (select() cannot watch descriptors above 1023)?"""
    sock.setblocking(False)
    try:
        sock.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return False
    except ConnectionResetError:
        pass
    return True


# --- foreseeable input and faults are never a 500 ---------------------------------------------------------------


def _raw_json(http, path: str, text: str, key: str | None = "k1"):
    headers = {"Content-Type": "application/json"} | ({"Idempotency-Key": key} if key else {})
    return http.post(path, content=text.encode(), headers=headers)


@pytest.mark.parametrize(
    "path, text",
    [
        ("/v1/jobs", '{"operation": "inspect", "inputs": ["doc_\\ud800"]}'),
        ("/v1/jobs", '{"operation": "\\udfff", "inputs": []}'),
        ("/v1/jobs", '{"operation": "inspect", "inputs": ["doc_x"], "options": {"\\ud800": 1}}'),
        ("/v1/jobs", '{"operation": "inspect", "inputs": ["doc_\\u0000"]}'),
        ("/v1/evidence-jobs", '{"period": "2025-0\\ud800"}'),
        ("/v1/batches", '{"jobs": [{"idempotency_key": "a", "operation": "inspect", "inputs": ["doc_\\ud800"]}]}'),
        (
            "/v1/batches",
            '{"jobs": [{"idempotency_key": "a", "operation": "inspect", "inputs": ["d"], '
            '"options": {"x": "\\udc00"}}]}',
        ),
    ],
)
def test_lone_surrogates_and_nul_in_json_are_400(documents, intake, path, text):
    """Before: these reached the ledger's canonical encoding (or PostgreSQL) and answered 500."""
    acme, _ = tokens(documents)
    with client(intake, acme) as http:
        response = _raw_json(http, path, text)
    assert (response.status_code, error_code(response)) == (400, "REQUEST_TEXT_INVALID")


@pytest.mark.parametrize("path", ["/v1/jobs/job_%00x", "/v1/batches/bat_%00x", "/v1/batches/bat_%00x/cancel"])
def test_a_nul_in_a_path_id_is_400(documents, intake, path):
    """Before: PostgreSQL refused the query string and the request answered 500."""
    acme, _ = tokens(documents)
    with client(intake, acme) as http:
        response = http.request("POST" if path.endswith("cancel") else "GET", path)
    assert (response.status_code, error_code(response)) == (400, "REQUEST_TEXT_INVALID")


@LOCAL
@pytest.mark.parametrize(
    "text",
    [
        "[" * 30_000 + "]" * 30_000,
        '{"operation": "inspect", "inputs": [], "options": ' + '{"a": ' * 40 + "1" + "}" * 40 + "}",
    ],
)
def test_json_nested_past_the_documented_depth_is_400(documents, intake, text):
    acme, _ = tokens(documents)
    with client(intake, acme) as http:
        response = _raw_json(http, "/v1/jobs", text)
    assert (response.status_code, error_code(response)) == (400, "REQUEST_TOO_DEEP")


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs (root only): a document store that fills up, or is remounted read-only."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", str(mount)], capture_output=True
        ).returncode
        != 0
    ):
        pytest.skip("needs to mount a tmpfs")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=True)


def _documents_on(backend, disk):
    return runtime_for(Settings.from_env(intake_environment(backend) | {"EVIDENCE_DOCUMENTS_URI": str(disk)}))


@LOCAL
def test_a_full_document_store_is_507_and_retried(backend, small_disk):
    """Before: the spool's ENOSPC escaped as an OSError and answered 500."""
    documents = _documents_on(backend, small_disk)
    (small_disk / "filler").write_bytes(b"0" * (256 * 1024 - 8192))
    acme, _ = tokens(documents)
    with running_server(documents) as url, client(url, acme) as http:
        response = upload(http, pdf_bytes() + b"%" + b"0" * 40_000)
    assert (response.status_code, error_code(response)) == (507, "STORE_FULL")
    assert response.headers["retry-after"] == "30"


@LOCAL
def test_a_read_only_document_store_is_503_and_fails_healthz(backend, small_disk):
    """Before: the upload answered 500, and /healthz answered ok (its probes only read)."""
    documents = _documents_on(backend, small_disk)
    acme, _ = tokens(documents)
    with running_server(documents) as url, client(url, acme) as http:
        assert http.get("/healthz").status_code == 200
        subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
        response = upload(http, pdf_bytes())
        assert (response.status_code, error_code(response)) == (503, "STORE_READ_ONLY")
        health = http.get("/healthz")
    assert health.status_code == 503
    assert health.json()["checks"] == {"ledger": "ok", "documents": "STORE_READ_ONLY", "archive": "ok"}


@pytest.mark.parametrize("backend", ["aws"], indirect=True)
def test_healthz_fails_when_the_ledger_takes_no_writes(documents, intake):
    """Before: /healthz read from the ledger and answered ok while every write failed."""
    ledger = documents.ledger
    database = ledger.engine.url.database
    with ledger.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql(f'ALTER DATABASE "{database}" SET default_transaction_read_only = on')
    ledger.engine.dispose()  # new connections are read-only; reads still answer
    with client(intake) as http:
        assert documents.document_jobs.job("acme", "job_x") is None
        health = http.get("/healthz")
    assert health.status_code == 503 and health.json()["checks"]["ledger"] == "LEDGER_UNAVAILABLE"
