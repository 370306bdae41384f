"""`evidence intake serve` as operators run it, in its own process: killed mid-upload, it leaves nothing behind."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from sqlalchemy import select

from evidence_pipeline_tests.intake_server import intake_environment, tokens

EVIDENCE = str(Path(sys.executable).with_name("evidence"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_server_killed_mid_upload_leaves_no_document_and_no_temp_file(backend, documents):
    acme, _ = tokens(documents)
    env = os.environ | intake_environment(backend)
    port = _free_port()
    server = subprocess.Popen(
        [EVIDENCE, "intake", "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
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
        with socket.create_connection(("127.0.0.1", port)) as conn:
            conn.sendall(
                (
                    f"POST /v1/documents HTTP/1.1\r\nHost: intake\r\nAuthorization: Bearer {acme}\r\n"
                    "Content-Type: application/pdf\r\nContent-Length: 60000\r\n\r\n"
                ).encode()
                + b"%PDF-1.7\n"
                + b"0" * 30000
            )
            time.sleep(1.0)  # the server is reading the body into its temp file
            server.send_signal(signal.SIGKILL)
            server.wait(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    sweep = subprocess.run([EVIDENCE, "sweep"], env=env, capture_output=True, text=True, timeout=300)
    assert sweep.returncode == 0, sweep.stderr
    work_dir = documents.runtime.settings.work_dir
    assert not work_dir.exists() or [p for p in work_dir.rglob("*") if p.is_file()] == []
    assert documents.store.list("acme") == []
    with documents.runtime.ledger.engine.connect() as conn:
        assert conn.execute(select(documents.ledger.documents)).all() == []
    assert documents.runtime.ledger.events_of_type("document.admitted") == []
