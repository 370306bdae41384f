"""`evidence intake serve` as operators run it, in its own processes: uploads spread over its workers land in one
ledger chain; killed mid-upload, it leaves nothing behind and no worker keeps serving."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sqlalchemy import select

from evidence_pipeline_tests.support.intake_server import (
    EVIDENCE,
    client,
    intake_environment,
    pdf_bytes,
    serving,
    tokens,
    upload,
)


def _workers_serving(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def test_uploads_spread_over_workers_are_all_admitted_in_one_chain(backend, documents):
    acme, _ = tokens(documents)
    bodies = [pdf_bytes(producer=f"upload {i}") for i in range(24)]
    # 12 at once from one tenant: above its in-flight cap if the kernel gives one worker most of them
    with (
        serving(backend, workers=2, EVIDENCE_INTAKE_TENANT_MAX_UPLOADS="12") as (port, _),
        client(f"http://127.0.0.1:{port}", acme) as http,
    ):
        statuses = list(ThreadPoolExecutor(12).map(lambda body: upload(http, body).status_code, bodies))
    assert statuses == [201] * len(bodies)
    assert len(documents.document_store.list("acme")) == len(bodies)
    assert len(documents.ledger.events_of_type("document.admitted")) == len(bodies)
    documents.ledger.verify_chain()


def test_a_server_killed_mid_upload_leaves_no_document_and_no_temp_file(backend, documents):
    acme, _ = tokens(documents)
    env = os.environ | intake_environment(backend)
    with serving(backend, workers=2) as (port, server):
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
            server.send_signal(signal.SIGKILL)  # the parent only: its workers must follow it
            server.wait(timeout=30)
        deadline = time.monotonic() + 30
        while _workers_serving(port):
            assert time.monotonic() < deadline, "a worker kept serving after its parent was killed"
            time.sleep(0.2)
    sweep = subprocess.run([EVIDENCE, "sweep"], env=env, capture_output=True, text=True, timeout=300)
    assert sweep.returncode == 0, sweep.stderr
    work_dir = documents.settings.work_dir
    assert not work_dir.exists() or [p for p in work_dir.rglob("*") if p.is_file()] == []
    assert documents.document_store.list("acme") == []
    settings = documents.settings
    if not settings.uses_s3:  # the upload's spool in the store's root was nameless: nothing is left there either
        assert [p for p in Path(settings.documents_uri).rglob("*") if p.is_file()] == []
    with documents.ledger.engine.connect() as conn:
        assert conn.execute(select(documents.ledger.documents)).all() == []
    assert documents.ledger.events_of_type("document.admitted") == []
