"""A real intake server on 127.0.0.1 for tests: uvicorn in a thread, on a socket bound to a free port."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from prometheus_client.parser import text_string_to_metric_families
from pypdf import PdfWriter

from evidence_pipeline.config import Settings
from evidence_pipeline.http_guard import server_config
from evidence_pipeline.intake.app import create_app
from evidence_pipeline.runtime import Runtime, runtime_for
from evidence_pipeline_tests.support.signers import signers_of


def running_server(rt: Runtime) -> contextlib.AbstractContextManager[str]:
    """Serve intake on the runtime ``rt``; yields its base URL."""
    return running_app(create_app(rt), rt.settings)


@contextlib.contextmanager
def running_app(app, settings: Settings) -> Iterator[str]:
    """Serve ``app`` (intake's, or another behind the same guard) on 127.0.0.1; yields its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    config = server_config(app, settings, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels) -> value of every sample ``url`` exposes, parsed by prometheus_client."""
    response = httpx.get(url, timeout=30)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: dict, name: str, **labels) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def wait_until_receiving(url: str, uploads: int) -> None:
    """Wait until the server at ``url`` receives the bodies of ``uploads`` uploads: their token, quota and slot
    checks are behind them (its gauge), however loaded the machine."""
    deadline = time.monotonic() + 60
    while value(scrape(f"{url}/metrics"), "evidence_intake_uploads_receiving") != uploads:
        assert time.monotonic() < deadline, f"the server never received {uploads} uploads at once"
        time.sleep(0.02)


EVIDENCE = str(Path(sys.executable).with_name("evidence"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def serving(backend, workers: int, preexec_fn: Callable[[], None] | None = None, **overrides: str):
    """`evidence intake serve --workers N` in its own process group (``preexec_fn`` runs in it before it starts,
    ``overrides`` are settings); yields (port, server process)."""
    port = _free_port()
    server = subprocess.Popen(
        [EVIDENCE, "intake", "serve", "--port", str(port), "--workers", str(workers)],
        env=os.environ | intake_environment(backend) | overrides,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=preexec_fn,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and server.poll() is None, "intake serve did not start"
            time.sleep(0.2)
        yield port, server
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)  # the test's own group: the workers too, whatever happened
        server.wait()


CEILING = 64 * 1024


def pdf_bytes(pages: int = 1, producer: str | None = None) -> bytes:
    writer = PdfWriter()
    for _ in range(pages):
        writer.add_blank_page(200, 200)
    if producer:
        writer.add_metadata({"/Producer": producer})
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def intake_environment(backend: dict[str, str]) -> dict[str, str]:
    env = dict(backend, EVIDENCE_INTAKE_MAX_BYTES=str(CEILING))
    if "EVIDENCE_ARCHIVE_URI" in backend:  # the aws backend: documents go to the same bucket
        env["EVIDENCE_DOCUMENTS_URI"] = backend["EVIDENCE_ARCHIVE_URI"].removesuffix("/archive") + "/documents"
    return env


@pytest.fixture
def documents(backend, request):
    """The runtime on the backend with intake's settings; a test module may set INTAKE_OVERRIDES (settings as
    environment variables)."""
    overrides = getattr(request.module, "INTAKE_OVERRIDES", {})
    return runtime_for(Settings.from_env(intake_environment(backend) | overrides))


@pytest.fixture
def intake(documents):
    with running_server(documents) as url:
        yield url


def client(url: str, token: str | None = None) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"} if token else {}, timeout=30)


def tokens(documents) -> tuple[str, str]:
    """Tokens of two tenants."""
    signers = signers_of(documents.ledger)
    return signers.issue_token("acme"), signers.issue_token("globex")


def error_code(response: httpx.Response) -> str:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    return body["error"]["code"]


def upload(http: httpx.Client, data: bytes, **headers) -> httpx.Response:
    return http.post("/v1/documents", content=data, headers={"Content-Type": "application/pdf", **headers})


def submit(http: httpx.Client, key: str | None, body) -> httpx.Response:
    headers = {} if key is None else {"Idempotency-Key": key}
    return http.post("/v1/jobs", json=body, headers=headers)
