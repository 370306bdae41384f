"""Every HTTP server the project runs shares one guarded protocol (http_guard.py): the tenant API, the operator API,
`evidence witness serve` and `evidence metrics serve`, each started by its own command in its own process, get the
same slow-client and huge-header cases as intake's own tests (issues 28 and 47). Before: the witness and metrics
servers were plain uvicorn, which took a 96 MiB header whole, held slow clients for over a minute, and answered
503 to a real request once 64 slow clients held the witness's connections."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import select
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519

from evidence_pipeline.config import Settings
from evidence_pipeline.runtime import runtime_for
from evidence_pipeline.signed_note import ED25519, verifier
from evidence_pipeline_tests.support.intake_server import EVIDENCE, _free_port
from evidence_pipeline_tests.support.raw_http import answer

LIMITS = {
    "EVIDENCE_INTAKE_HEADER_TIMEOUT_SECONDS": "1",
    "EVIDENCE_INTAKE_MIN_BODY_BYTES_PER_SECOND": "1000",
    "EVIDENCE_INTAKE_REQUEST_TIMEOUT_SECONDS": "60",
    "EVIDENCE_INTAKE_MAX_CONNECTIONS": "4",
}


@dataclasses.dataclass(frozen=True)
class Server:
    url: str
    probe: bytes  # a request the app answers with ``probe_status``
    probe_status: int
    slow_body: bytes  # the head of a request whose body the app reads (intake, metrics: answered without reading)
    slow_body_status: int

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", int(self.url.rsplit(":", 1)[1])), timeout=30)


def _head(method: str, path: str, length: int | None = None) -> bytes:
    sized = b"" if length is None else b"Content-Length: %d\r\n" % length
    return b"%s %s HTTP/1.1\r\nHost: x\r\n%s" % (method.encode(), path.encode(), sized)


def _witness_args(home: Path) -> list[str]:
    key = home / "witness.key"
    subprocess.run(
        [EVIDENCE, "witness", "keygen", "--name", "witness.test/w", "--key", str(key)], check=True, capture_output=True
    )
    log = verifier("log.test/ledger", ED25519, ed25519.Ed25519PrivateKey.generate()).vkey()
    return [
        "witness",
        "serve",
        "--name",
        "witness.test/w",
        "--key",
        str(key),
        "--state",
        str(home / "state"),
        "--log",
        log,
    ]


SERVERS = {  # command (with its port), the probe and its answer, the slow body and its answer
    "intake": (
        lambda home, port: ["intake", "serve", "--workers", "1", "--port", str(port)],
        _head("GET", "/healthz") + b"\r\n",
        200,
        _head("POST", "/v1/jobs", 60_000),
        401,
    ),  # no token: unread
    "operator-api": (
        lambda home, port: ["operator-api", "serve"],
        _head("GET", "/openapi.json") + b"\r\n",
        200,
        _head("POST", "/v1/jobs/replay", 60_000),
        408,
    ),
    "witness": (
        lambda home, port: [*_witness_args(home), "--port", str(port)],
        _head("POST", "/add-checkpoint", 7) + b"\r\nold 0\n\n",
        400,
        _head("POST", "/add-checkpoint", 60_000),
        408,
    ),
    "metrics": (
        lambda home, port: ["metrics", "serve", "--port", str(port)],
        _head("GET", "/metrics") + b"\r\n",
        200,
        _head("GET", "/metrics", 60_000),
        200,
    ),
}


@pytest.fixture(scope="module", params=sorted(SERVERS))
def server(request, tmp_path_factory) -> Iterator[Server]:
    command, probe, probe_status, slow_body, slow_body_status = SERVERS[request.param]
    home = tmp_path_factory.mktemp(request.param)
    port = _free_port()
    env = os.environ | LIMITS | {"EVIDENCE_HOME": str(home / "home"), "EVIDENCE_OPERATOR_API_PORT": str(port)}
    runtime_for(Settings.from_env(env))  # a home with a migrated ledger, which the metrics read
    process = subprocess.Popen(
        [EVIDENCE, *command(home, port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    served = Server(f"http://127.0.0.1:{port}", probe, probe_status, slow_body, slow_body_status)
    try:
        for _ in range(1200):  # readiness, not timing: poll until it answers or has exited
            assert process.poll() is None, process.stderr.read().decode()
            with contextlib.suppress(OSError):
                sock = served.connect()
                sock.sendall(probe)
                if _status(sock) == probe_status:
                    break
            time.sleep(0.05)
        yield served
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _status(sock: socket.socket) -> int:
    data = b""
    while b"\r\n" not in data and (chunk := sock.recv(65536)):
        data += chunk
    sock.close()
    return int(data.split()[1])


def test_a_huge_header_is_refused_without_being_buffered(server):
    """Before: uvicorn's httptools parser held the whole value in memory (301 MB for one intake connection,
    +142-168 MiB for a 96 MiB header on the witness and metrics servers)."""
    sock = server.connect()
    sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: ")
    sent, chunk = 0, b"a" * 65536
    while sent < 300 * 1024 * 1024:
        if select.select([sock], [], [], 0)[0]:  # the server answered: it stopped reading
            break
        try:
            sock.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            break
        sent += len(chunk)
    status, _, body = answer(sock)
    assert (status, body["error"]["code"]) == (431, "HEADERS_TOO_LARGE")
    assert sent < 16 * 1024 * 1024  # refused within what the socket buffers hold, not after 300 MB


@pytest.mark.parametrize("count", [65, 50_000])
def test_too_many_headers_are_431(server, count):
    sock = server.connect()
    try:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(count)) + b"\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass  # refused while we were still sending
    status, _, body = answer(sock)
    assert (status, body["error"]["code"]) == (431, "HEADERS_TOO_LARGE")


def test_headers_that_never_finish_and_a_silent_connection_are_408(server):
    slow = server.connect()
    slow.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
    status, headers, body = answer(slow)
    assert (status, body["error"]["code"], headers["connection"]) == (408, "REQUEST_TIMEOUT", "close")
    assert answer(server.connect())[0] == 408  # connected, nothing sent


def test_a_slow_body_never_holds_the_connection(server):
    """5 bytes of a 60,000-byte body, then nothing: behind 1,000 bytes/s after the 1 s grace, so a server that reads
    the body answers 408; one that does not read it answers at once. Either way the connection is then closed."""
    sock = server.connect()
    sock.sendall(server.slow_body + b"\r\n%PDF-")
    data = b""
    while chunk := sock.recv(65536):  # to the end: the server closes it
        data += chunk
    assert int(data.split()[1]) == server.slow_body_status
    if server.slow_body_status == 408:
        assert b'"REQUEST_TIMEOUT"' in data


def test_slow_clients_at_the_connection_limit_make_room_for_a_real_request(server):
    """Four connections (the limit) sending headers and then nothing; a fifth client's request is answered by the
    app, not refused: the one waiting longest for its headers is evicted for it."""
    slow = []
    for _ in range(4):
        sock = server.connect()
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        slow.append(sock)
    sock = server.connect()
    sock.sendall(server.probe)
    assert _status(sock) == server.probe_status
    assert answer(slow[0])[0] == 408  # the evicted one was told why
    for sock in slow:
        sock.close()
