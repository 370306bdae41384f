"""The front door's connection limits under the shapes of issue 28: one huge header, and many slow clients at a
lowered descriptor limit while another client keeps asking.

    uv run python bench/connection_limits.py [--slow 2200 --fd-limit 1024 --requests 200 --header-mb 300]

Starts `evidence intake serve --workers 1` on a fresh root with RLIMIT_NOFILE lowered in the server's process, then
1. sends one header value of up to ``--header-mb`` MB on a raw socket, and reports how much was sent before the
   server answered or closed, what it answered, and how much the server's resident memory grew;
2. opens ``--slow`` connections that each send part of their headers and then nothing, and meanwhile (one request
   after every slow connections / requests) another client's `GET /healthz` on a fresh connection each: served
   count and its latency percentiles.
Run it on an older checkout (PYTHONPATH=that/checkout) for the figures before.
"""

from __future__ import annotations

import argparse
import os
import resource
import select
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from intake import EVIDENCE, free_port, wait_healthy  # noqa: E402  (bench/intake.py: the front door's helpers)


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise SystemExit("no VmRSS")


def huge_header(port: int, pid: int, megabytes: int) -> None:
    before = rss_kb(pid)
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ")
    sent, chunk, peak = 0, b"a" * 65536, before
    while sent < megabytes * 2**20:
        if select.select([sock], [], [], 0)[0]:
            break
        try:
            sock.sendall(chunk)
        except OSError:
            break
        sent += len(chunk)
        if sent % (16 * 2**20) == 0:
            peak = max(peak, rss_kb(pid))
    peak = max(peak, rss_kb(pid))
    try:
        answer = sock.recv(200).split(b"\r\n")[0].decode() or "(closed)"
    except OSError as error:
        answer = f"({type(error).__name__})"
    sock.close()
    print(
        f"huge header: {sent / 2**20:.1f} MB sent before the server stopped reading; answer {answer!r}; "
        f"server RSS {before / 1024:.0f} MB -> peak {peak / 1024:.0f} MB"
    )


def slow_clients(port: int, slow: int, requests: int) -> None:
    every = max(1, slow // requests)
    held, latencies, refused, failed = [], [], 0, 0
    for i in range(slow):
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=2)
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            held.append(sock)
        except OSError:
            refused += 1
        if i % every == 0 and len(latencies) + failed < requests:
            started = time.perf_counter()
            try:
                ok = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10).status_code == 200
            except httpx.TransportError:
                ok = False
            if ok:
                latencies.append(time.perf_counter() - started)
            else:
                failed += 1
    latencies.sort()

    def pct(q: float) -> str:
        return f"{latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000:.0f} ms" if latencies else "-"

    print(
        f"slow clients: {slow} opened ({refused} connects refused or timed out); other client served "
        f"{len(latencies)} of {len(latencies) + failed}; latency p50 {pct(0.5)}, p99 {pct(0.99)}, max {pct(1.0)}"
    )
    for sock in held:
        sock.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--slow", type=int, default=2200)
    parser.add_argument("--fd-limit", type=int, default=1024)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--header-mb", type=int, default=300)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, args.slow + 512)), hard))  # the clients' own
    port = free_port()
    url = f"http://127.0.0.1:{port}"

    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (args.fd_limit, args.fd_limit))

    with tempfile.TemporaryDirectory(prefix="evidence-bench-limits-") as root:
        server = subprocess.Popen(
            [EVIDENCE, "intake", "serve", "--port", str(port), "--workers", "1"],
            env=os.environ | {"EVIDENCE_HOME": root},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=lower,
        )
        try:
            wait_healthy(url, server)
            huge_header(port, server.pid, args.header_mb)
            slow_clients(port, args.slow, args.requests)
            print(f"server still running: {server.poll() is None}")
        finally:
            server.kill()
            server.wait()


if __name__ == "__main__":
    main()
