"""Intake: admission latency under a burst of concurrent uploads while a backfill loads the machine, and the time
from a job's 202 to its `inspect` finishing, broken down.

    uv run python bench/intake.py [--uploads 200 --size-mb 1 --backfill-months 3]

1. Starts `evidence intake serve` (its own process) on a fresh temporary root and issues a token.
2. Starts `evidence demo --months N` in another root as the concurrent backfill (every demo tenant-month through
   Dagster: render, gate, sign, publish), and waits until it has begun.
3. Sends `--uploads` distinct uploads of `--size-mb` MB at once (httpx, one connection each), and reports client
   latency p50/p95/p99 (nearest-rank) and the server's own `admission_ms` (from `evidence stats --json`).
4. On the then idle machine: one upload and one `inspect` job; the sensor tick (in-process evaluation), the run
   (`execute_in_process` of the run request) and the work inside it, each timed. A daemon adds its sensor interval
   (`minimum_interval_seconds`, 5 s) and a run worker's start (3-6 s measured in throughput.py) on top; both are
   printed as the configured interval and not measured here.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from pypdf import PdfWriter

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
EVIDENCE = str(Path(sys.executable).with_name("evidence"))

from evidence_pipeline.stats import percentile  # noqa: E402


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(url: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(f"{url}/healthz").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise SystemExit("intake serve did not become healthy")


def document(size: int) -> bytes:
    body = b"%PDF-1.7\n" + secrets.token_bytes(size - 20)
    return body + b"\n%%EOF\n"


async def burst(url: str, token: str, count: int, size: int) -> list[float]:
    payloads = [document(size) for _ in range(count)]
    limits = httpx.Limits(max_connections=count, max_keepalive_connections=count)
    async with httpx.AsyncClient(
        base_url=url, timeout=120, limits=limits, headers={"Authorization": f"Bearer {token}"}
    ) as client:

        async def one(data: bytes) -> float:
            start = time.perf_counter()
            response = await client.post("/v1/documents", content=data, headers={"Content-Type": "application/pdf"})
            assert response.status_code == 201, response.text
            return (time.perf_counter() - start) * 1000

        return await asyncio.gather(*(one(p) for p in payloads))


def figures(values: list[float]) -> str:
    return " ".join(f"p{p}={percentile(values, p):.0f}ms" for p in (50, 95, 99))


def single_job(env: dict[str, str], url: str, token: str) -> None:
    os.environ.update(env)
    from dagster import DagsterInstance, build_sensor_context

    from evidence_pipeline.definitions import defs

    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
        writer = PdfWriter()
        for _ in range(5):
            writer.add_blank_page(595, 842)
        out = io.BytesIO()
        writer.write(out)
        document_id = http.post(
            "/v1/documents", content=out.getvalue(), headers={"Content-Type": "application/pdf"}
        ).json()["document_id"]
        accepted_at = time.perf_counter()
        job = http.post(
            "/v1/jobs",
            json={"operation": "inspect", "inputs": [document_id]},
            headers={"Idempotency-Key": "bench-single"},
        ).json()
        with DagsterInstance.ephemeral() as instance:
            start = time.perf_counter()
            tick = defs.get_sensor_def("document_dispatch_sensor").evaluate_tick(
                build_sensor_context(instance=instance, resources=defs.resources)
            )
            tick_ms = (time.perf_counter() - start) * 1000
            [request] = tick.run_requests
            start = time.perf_counter()
            result = defs.get_job_def("document_page_job").execute_in_process(
                run_config=request.run_config, instance=instance, tags=request.tags
            )
            run_ms = (time.perf_counter() - start) * 1000
            step = next(e for e in result.all_events if e.event_type_value == "STEP_SUCCESS")
            work_ms = step.event_specific_data.duration_ms
        done_ms = (time.perf_counter() - accepted_at) * 1000
        status = http.get(job["status_url"]).json()
    print(
        f"single job: state={status['state']} 202->finished {done_ms:.0f} ms in-process "
        f"(sensor tick {tick_ms:.0f} ms, run {run_ms:.0f} ms of which the step {work_ms:.0f} ms); "
        f"a daemon adds up to the sensor interval (5 s) and a run worker's start (3-6 s, throughput.py)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--uploads", type=int, default=200)
    parser.add_argument("--size-mb", type=float, default=1.0)
    parser.add_argument("--backfill-months", type=int, default=3, help="0: no concurrent backfill")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="evidence-bench-intake-"))
    env = {
        "EVIDENCE_HOME": str(root / "intake"),
        "EVIDENCE_INTAKE_MAX_BYTES": str(int(args.size_mb * 2**20) + 1024),
        "EVIDENCE_TENANT_MAX_BYTES": str(10 * 2**30),
    }
    full_env = os.environ | env
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    token = (
        subprocess.run(
            [EVIDENCE, "tenant", "token", "issue", "bench"], env=full_env, check=True, capture_output=True, text=True
        )
        .stdout.split("token:")[1]
        .split()[0]
    )
    server = subprocess.Popen(
        [EVIDENCE, "intake", "serve", "--port", str(port)],
        env=full_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    backfill = None
    try:
        wait_healthy(url, server)
        if args.backfill_months:
            backfill = subprocess.Popen(
                [EVIDENCE, "demo", "--months", str(args.backfill_months)],
                env=os.environ | {"EVIDENCE_HOME": str(root / "backfill")},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(15)  # past its start-up: the backfill is rendering and signing
            assert backfill.poll() is None, "the backfill finished before the burst: raise --backfill-months"
        start = time.perf_counter()
        latencies = asyncio.run(burst(url, token, args.uploads, int(args.size_mb * 2**20)))
        wall = time.perf_counter() - start
        during = (
            "without a backfill"
            if backfill is None
            else "during a backfill"
            if backfill.poll() is None
            else "(the backfill ended during the burst)"
        )
        stats = json.loads(
            subprocess.run(
                [EVIDENCE, "stats", "--json"], env=full_env, check=True, capture_output=True, text=True
            ).stdout
        )["admission"]
        print(f"burst: {args.uploads} concurrent uploads of {args.size_mb} MB {during} in {wall:.1f} s")
        print(f"  client latency   {figures(latencies)}")
        print(
            f"  admission_ms     p50={stats['p50']:.0f}ms p95={stats['p95']:.0f}ms p99={stats['p99']:.0f}ms "
            f"(server: request start to ledger commit)"
        )
        if backfill is not None:
            backfill.wait()
        single_job(env, url, token)
    finally:
        server.terminate()
        server.wait()
        if backfill is not None and backfill.poll() is None:
            backfill.kill()


if __name__ == "__main__":
    main()
