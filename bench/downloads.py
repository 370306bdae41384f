"""Downloads: a 10 MB job output through the tenant API against reading the archived file directly, in one run.

    uv run python bench/downloads.py [--size-mb 10 --rounds 15]

1. On a fresh temporary root (local archive), puts a `--size-mb` PDF in the archive and commits it as the output of
   a document job through the ledger's own commit (DocumentJobs.complete): the state a redaction or a split leaves.
2. Starts `evidence intake serve --workers 1` on it and issues the tenant a token.
3. Starts the floor (bench/download_floor.py): a plain blocking socket server doing the same durable work for the
   same file (read in the same chunks, sha256, the last chunk held back until the digest matches, the same
   headers), without the app.
4. Alternates, `--rounds` times: the direct read (open the archived file, read it in 1 MB chunks, sha256 it: what a
   reader with archive access does to trust the bytes), the download (`GET /v1/jobs/{id}/outputs/{name}` over
   loopback on one kept-alive connection, the body hashed as it arrives and checked against the ETag) and the same
   GET from the floor with the same client. The server reads, hashes and sends; the client receives and hashes:
   the same digest check on both sides.
5. Prints the median MB/s of each and the ratios API ÷ direct (target >= 0.8), floor ÷ direct (what the machine
   allows: two hashes and a loopback copy on its cores) and API ÷ floor (what the app costs), and the direct read
   without the hash for context.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pypdf import PdfWriter

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from intake import EVIDENCE, acting_operator, free_port, tenant_token, wait_healthy  # noqa: E402  (bench/intake.py: the front door's helpers)

from evidence_pipeline.config import Settings  # noqa: E402
from evidence_pipeline.ledger.admission import Clock  # noqa: E402
from evidence_pipeline.models import EventType  # noqa: E402
from evidence_pipeline.runtime import runtime_for  # noqa: E402
from evidence_pipeline.store import CHUNK  # noqa: E402

TENANT = "bench-downloads"
FLOOR = Path(__file__).resolve().parent / "download_floor.py"


def pdf_of(size: int) -> bytes:
    """A PDF of about ``size`` bytes: one page and an incompressible attachment."""
    writer = PdfWriter()
    writer.add_blank_page(200, 200)
    writer.add_attachment("payload.bin", os.urandom(size))
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def committed_output(env: dict[str, str], data: bytes) -> tuple[str, str, str, Path, str]:
    """(job id, output name, sha256, archived file, tenant token): a job whose commit recorded ``data`` as its
    output, and a token its tenant's client downloads with (issued by an operator, as a deployment does)."""
    rt = runtime_for(Settings.from_env(env))
    job, _ = rt.submissions.submit_job(
        TENANT,
        "bench-1",
        request_sha256="0" * 64,
        operation="inspect",
        request={"inputs": [], "options": {}},
        policy_version="policy-2026.1",
        actor="bench",
        limits=None,
        clock=Clock(time.perf_counter()),
    )
    job = rt.document_jobs.job(TENANT, job.job_id)
    lease = rt.document_jobs.start(job, "bench", 60, None)
    name = "derivative.pdf"
    stored = rt.archive.put_once(f"documents/{TENANT}/{job.period}/{job.job_id}/{name}", data)
    artifacts = [{"name": name, "key": stored.key, "sha256": stored.sha256, "bytes": stored.size}]
    rt.document_jobs.complete(
        job,
        lease,
        event_type=EventType.DOCUMENT_PUBLISHED,
        subject_sha256=stored.sha256,
        outputs={"operation": "inspect", "artifacts": artifacts, "summary": {}},
        actor="bench",
    )
    full_env = os.environ | env
    full_env["EVIDENCE_ACTOR_KEY"] = acting_operator(full_env, Path(env["EVIDENCE_HOME"]).parent / "actors")
    token = tenant_token(full_env, TENANT)
    return job.job_id, name, stored.sha256, Path(env["EVIDENCE_HOME"]) / "archive" / stored.key, token


def read_direct(path: Path, hashing: bool) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(CHUNK):
            if hashing:
                digest.update(chunk)
    return digest.hexdigest()


class Client:
    """A keep-alive HTTP/1.1 client on one socket that reads a body straight into a buffer: httpx (h11, in pure
    Python) reads a body at a fraction of what the server sends (measured: about 60 MB/s of 10 MB bodies), which
    would measure the client, not the API."""

    def __init__(self, port: int, token: str):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.token = token
        self.buffer = bytearray(CHUNK)

    def download(self, path: str) -> str:
        self.sock.sendall(
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {self.token}\r\n\r\n".encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.sock.recv(4096)
        head, body = head.split(b"\r\n\r\n", 1)
        lines = head.decode().split("\r\n")
        assert lines[0].split()[1] == "200", lines[0]
        headers = dict(line.lower().split(": ", 1) for line in lines[1:])
        digest, left = hashlib.sha256(body), int(headers["content-length"]) - len(body)
        view = memoryview(self.buffer)
        while left:
            received = self.sock.recv_into(view, min(left, CHUNK))
            assert received, "the server closed the connection mid-body"
            digest.update(view[:received])
            left -= received
        assert headers["etag"] == f'"{digest.hexdigest()}"'
        return digest.hexdigest()

    def close(self) -> None:
        self.sock.close()


def timed(work) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mb", type=float, default=10)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-downloads-") as root:
        env = {"EVIDENCE_HOME": str(Path(root) / "home")}
        data = pdf_of(int(args.size_mb * 1024 * 1024))
        job_id, name, sha256, path, token = committed_output(env, data)
        port = free_port()
        server = subprocess.Popen(
            [EVIDENCE, "intake", "serve", "--port", str(port), "--workers", "1"],
            env=os.environ | env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        listener = socket.create_server(("127.0.0.1", 0))
        floor = subprocess.Popen(
            [sys.executable, str(FLOOR), str(listener.fileno()), str(path), sha256, str(len(data))],
            pass_fds=[listener.fileno()],
        )
        try:
            url = f"http://127.0.0.1:{port}"
            wait_healthy(url, server)
            client, floor_client = Client(port, token), Client(listener.getsockname()[1], token)
            path_of = f"/v1/jobs/{job_id}/outputs/{name}"
            # and warm every path
            assert client.download(path_of) == floor_client.download(path_of) == sha256 == read_direct(path, True)
            direct, api, bare, plain = [], [], [], []
            for _ in range(args.rounds):
                direct.append(timed(lambda: read_direct(path, True)))
                api.append(timed(lambda: client.download(path_of)))
                bare.append(timed(lambda: floor_client.download(path_of)))
                plain.append(timed(lambda: read_direct(path, False)))
            client.close()
            floor_client.close()
        finally:
            for process in (server, floor):
                process.terminate()
                process.wait()
            listener.close()
    mb = len(data) / 1e6

    def rate(times: list[float]) -> float:
        return mb / statistics.median(times)

    print(f"{mb:.1f} MB output, {args.rounds} rounds, median throughput:")
    print(f"  direct read + sha256      {rate(direct):8.0f} MB/s")
    print(f"  GET through the API       {rate(api):8.0f} MB/s  (server reads + hashes + sends, client hashes)")
    print(f"  GET from the floor        {rate(bare):8.0f} MB/s  (the same work, no app: download_floor.py)")
    print(f"  direct read, no hash      {rate(plain):8.0f} MB/s  (context)")
    print(
        f"ratios: API / direct {rate(api) / rate(direct):.2f} (target >= 0.8), floor / direct "
        f"{rate(bare) / rate(direct):.2f} (the machine's), API / floor {rate(api) / rate(bare):.2f} (the app's)"
    )
    print(
        "load average (1/5/15 min): "
        + " → ".join(" ".join(f"{load:.2f}" for load in loads) for loads in (load_before, os.getloadavg()))
    )


if __name__ == "__main__":
    main()
