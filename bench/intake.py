"""Intake: admission latency under a burst of concurrent uploads while a backfill loads the machine, and the time
from a job's 202 to its `inspect` finishing, broken down.

    uv run python bench/intake.py [--uploads 200 --size-mb 1 --backfill-months 12 --workers N --daemon-jobs 3]

1. Starts `evidence intake serve` (its own processes, `--workers` as given) on a fresh temporary root and issues a
   token; starts the floor server too: one that receives, hashes, writes and fsyncs each body, then answers 201
   (no ledger, no checks).
2. Starts `evidence demo --months N` in another root as the concurrent backfill (every demo tenant-month through
   Dagster: render, gate, sign, publish), and waits until it has begun.
3. Sends `--uploads` distinct uploads of `--size-mb` MB at once (one connection each, a hand-written HTTP/1.1
   client), first to the floor server then to intake, and reports uploads/s, client latency p50/p95/p99
   (nearest-rank) and the server's own `admission_ms` (from `evidence stats --json`). Then, once any backfill
   has ended, `--rate` uploads/s for `--duration` s (open loop), to the floor then to intake: admitted uploads/s,
   their ratio, statuses (a 503 past `EVIDENCE_INTAKE_MAX_UPLOADS`) and client latency p50/p95/p99.
4. On the then idle machine: one upload and one `inspect` job; the sensor tick (in-process evaluation), the run
   (`execute_in_process` of the run request) and the work inside it, each timed. Then, through a real
   `dagster-daemon` and code server, `--daemon-jobs` jobs from 202 to `succeeded` as a client sees them, broken
   down by their Dagster run's timestamps.
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

from evidence_pipeline.operations.stats import percentile  # noqa: E402

# The durable floor: what any server that keeps an upload costs at least on this machine with this client. It
# receives the body, hashes it, writes it to a file of its own and fsyncs it before answering 201 (no ledger, no
# checks): intake serve's admitted uploads/s are measured against it.
FLOOR_SERVER = """
import hashlib, os, sys, uuid, uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse
from starlette.routing import Route

def keep(path, chunks):
    with open(path, "wb") as out:
        out.write(b"".join(chunks))
        out.flush()
        os.fsync(out.fileno())

async def upload(request):
    digest, chunks = hashlib.sha256(), []
    async for chunk in request.stream():
        digest.update(chunk)
        chunks.append(chunk)
    await run_in_threadpool(keep, os.path.join(sys.argv[2], uuid.uuid4().hex), chunks)
    return JSONResponse({"sha256": digest.hexdigest()}, status_code=201)

async def healthz(request):
    return JSONResponse({})

routes = [Route("/v1/documents", upload, methods=["POST"]), Route("/healthz", healthz)]
uvicorn.run(Starlette(routes=routes), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


def acting_operator(env: dict[str, str], folder: Path) -> str:
    """On a fresh home, what a deployment does once at install: an admin `bench-admin` bootstrapped, who registers
    the operator `bench-operator`. Returns the operator's key file, which `evidence tenant token issue` signs with;
    the admin's is `bench-admin.pem` beside it."""

    def evidence(*args: str) -> str:
        return subprocess.run([EVIDENCE, *args], env=env, check=True, capture_output=True, text=True).stdout

    admin, operator = folder / "bench-admin.pem", folder / "bench-operator.pem"
    evidence("actor", "keygen", str(admin))
    public = json.loads(evidence("actor", "keygen", str(operator), "--json"))["public_key"]
    evidence("actor", "bootstrap", "bench-admin", "--key", str(admin))
    evidence("actor", "register", "bench-operator", "--role", "operator", "--public-key", public, "--key", str(admin))
    return str(operator)


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


async def post(port: int, path: str, headers: dict[str, str], body: bytes) -> int:
    """One HTTP/1.1 request on its own connection, written by hand: httpx spends ~5 ms of CPU per request, which
    on two shared cores made even a server that only reads the body answer a burst of 200 at p95 ~1 s."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        fields = {**headers, "Host": f"127.0.0.1:{port}", "Content-Length": str(len(body)), "Connection": "close"}
        head = f"POST {path} HTTP/1.1\r\n" + "".join(f"{name}: {value}\r\n" for name, value in fields.items())
        writer.write(head.encode() + b"\r\n" + body)
        response = await reader.read()  # the server closes the connection after its answer
    finally:
        writer.close()
    return int(response.split(b" ", 2)[1])


async def burst(port: int, token: str, payloads: list[bytes]) -> list[float]:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/pdf"}

    async def one(data: bytes) -> float:
        start = time.perf_counter()
        status = await post(port, "/v1/documents", headers, data)
        assert status == 201, status
        return (time.perf_counter() - start) * 1000

    return await asyncio.gather(*(one(p) for p in payloads))


def timed_burst(port: int, token: str, payloads: list[bytes]) -> tuple[list[float], float]:
    start = time.perf_counter()
    latencies = asyncio.run(burst(port, token, payloads))
    return latencies, time.perf_counter() - start


async def sustained(port: int, token: str, count: int, size: int, per_second: float) -> tuple[list[float], dict]:
    """An open-loop client: upload i starts at i / per_second whatever the answers so far (a slow server is not
    given fewer requests); each body is distinct and made when it is sent (a minute at 100/s of 1 MB is 6 GB).
    Returns the latencies of the admitted (201) uploads and the count per status."""
    base = document(size)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/pdf"}
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    start = time.perf_counter()

    async def one(index: int) -> None:
        await asyncio.sleep(max(0.0, start + index / per_second - time.perf_counter()))
        sent = time.perf_counter()
        try:
            status = await post(port, "/v1/documents", headers, base[:-32] + secrets.token_bytes(25) + b"\n%%EOF\n")
        except (OSError, IndexError, ValueError):  # reset, or closed without an answer
            status = 0
        statuses[status] = statuses.get(status, 0) + 1
        if status == 201:
            latencies.append((time.perf_counter() - sent) * 1000)

    await asyncio.gather(*(one(i) for i in range(count)))
    return latencies, statuses


def sustained_line(name: str, port: int, token: str, count: int, size: int, per_second: float) -> float:
    """Prints one server's line at a sustained rate; returns its admitted uploads/s."""
    started = time.perf_counter()
    latencies, statuses = asyncio.run(sustained(port, token, count, size, per_second))
    wall = time.perf_counter() - started
    admitted = statuses.get(201, 0) / wall
    print(f"  {name}: {admitted:.1f} admitted uploads/s over {wall:.1f} s, statuses {statuses}; "
          f"client latency {figures(latencies) if latencies else 'none admitted'}")
    return admitted


def rate(count: int, wall: float) -> str:
    return f"{wall:.2f} s, {count / wall:.0f} uploads/s"


def figures(values: list[float]) -> str:
    return " ".join(f"p{p}={percentile(values, p):.0f}ms" for p in (50, 95, 99))


def single_job(env: dict[str, str], url: str, token: str) -> None:
    os.environ.update(env)
    from dagster import DagsterInstance, build_sensor_context

    from evidence_pipeline.definitions import defs

    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
        document_id = http.post(
            "/v1/documents", content=blank_pdf(), headers={"Content-Type": "application/pdf"}
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


def daemon_jobs(env: dict[str, str], url: str, token: str, count: int) -> None:
    """``count`` inspect jobs one after another through a real `dagster-daemon` and code server (after one that
    warms them up), each from its 202 to `succeeded` as the client polls it, broken down by the Dagster run."""
    import shutil

    from dagster import DagsterInstance, RunsFilter

    from evidence_pipeline_tests.dagster_services import dagster_services

    home = Path(env["EVIDENCE_HOME"]) / "dagster"
    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    full_env = os.environ | env | {"DAGSTER_HOME": str(home)}
    os.environ.update(full_env)
    body = blank_pdf()
    with (
        dagster_services(full_env, home),
        DagsterInstance.get() as instance,
        httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
    ):
        document_id = http.post(
            "/v1/documents", content=body, headers={"Content-Type": "application/pdf"}
        ).json()["document_id"]
        for n in range(count + 1):
            accepted = time.time()
            job = http.post(
                "/v1/jobs", json={"operation": "inspect", "inputs": [document_id]},
                headers={"Idempotency-Key": f"bench-daemon-{n}"},
            ).json()
            while http.get(job["status_url"]).json()["state"] not in ("succeeded", "rejected", "dead"):
                time.sleep(0.05)
            done = time.time()
            [run] = instance.get_run_records(RunsFilter(tags={"evidence/tenant": "bench"}), limit=1)
            if n == 0:
                continue  # the warm-up: the daemon's first tick and the code server's first load
            created = run.create_timestamp.timestamp()
            print(
                f"daemon job {n}: 202->succeeded {done - accepted:.1f} s = sensor wait and tick "
                f"{created - accepted:.1f} s + run worker start {run.start_time - created:.1f} s + run until the "
                f"job succeeded, as the client saw it {done - run.start_time:.1f} s"
            )


def blank_pdf() -> bytes:
    writer = PdfWriter()
    for _ in range(5):
        writer.add_blank_page(595, 842)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--uploads", type=int, default=200)
    parser.add_argument("--size-mb", type=float, default=1.0)
    parser.add_argument("--daemon-jobs", type=int, default=3, help="jobs timed through a real daemon (0: none)")
    parser.add_argument("--workers", type=int, help="intake serve --workers (default: its own default)")
    parser.add_argument(
        "--backfill-months", type=int, default=12, help="0: none; the demo has 12"
    )
    parser.add_argument("--rate", type=float, default=100, help="uploads/s of the sustained phase (0: none)")
    parser.add_argument("--duration", type=float, default=60, help="seconds of the sustained phase")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="evidence-bench-intake-"))
    env = {
        "EVIDENCE_HOME": str(root / "intake"),
        "EVIDENCE_INTAKE_MAX_BYTES": str(int(args.size_mb * 2**20) + 1024),
        "EVIDENCE_TENANT_MAX_BYTES": str(10 * 2**30),
        # one tenant's whole burst in flight at once: the bench measures admission, not the in-flight caps
        "EVIDENCE_INTAKE_MAX_UPLOADS": str(args.uploads),
        "EVIDENCE_INTAKE_TENANT_MAX_UPLOADS": str(args.uploads),
    }
    full_env = os.environ | env
    full_env["EVIDENCE_ACTOR_KEY"] = acting_operator(full_env, Path(env["EVIDENCE_HOME"]).parent / "actors")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    token = (
        subprocess.run(
            [EVIDENCE, "tenant", "token", "issue", "bench"], env=full_env, check=True, capture_output=True, text=True
        )
        .stdout.split("token:")[1]
        .split()[0]
    )
    serve = [EVIDENCE, "intake", "serve", "--port", str(port)]
    serve += ["--workers", str(args.workers)] if args.workers else []
    server = subprocess.Popen(serve, env=full_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    floor_port = free_port()
    (root / "floor").mkdir()
    floor = subprocess.Popen([sys.executable, "-c", FLOOR_SERVER, str(floor_port), str(root / "floor")],
                             stderr=subprocess.DEVNULL)
    backfill = None
    try:
        wait_healthy(url, server)
        wait_healthy(f"http://127.0.0.1:{floor_port}", floor)
        if args.backfill_months:
            # load only: this checkout's code even when PYTHONPATH gives the server another (a before/after run)
            backfill_env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
            backfill = subprocess.Popen(
                [EVIDENCE, "demo", "--months", str(args.backfill_months)],
                env=backfill_env | {"EVIDENCE_HOME": str(root / "backfill")},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            while not (root / "backfill" / "archive" / "bundles").exists():  # its first bundle: it is signing
                assert backfill.poll() is None, "the backfill ended before its first bundle"
                time.sleep(0.1)
            assert backfill.poll() is None, "the backfill finished before the burst: raise --backfill-months"
        payloads = [document(int(args.size_mb * 2**20)) for _ in range(args.uploads)]
        floor_latencies, floor_wall = timed_burst(floor_port, token, payloads)
        latencies, wall = timed_burst(port, token, payloads)
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
        print(f"burst: {args.uploads} concurrent uploads of {args.size_mb} MB {during}")
        print(f"  floor, a server that hashes, writes and fsyncs each body: {rate(args.uploads, floor_wall)}")
        print(f"    client latency {figures(floor_latencies)}")
        print(f"  intake serve: {rate(args.uploads, wall)}")
        print(f"    client latency {figures(latencies)}")
        print(
            f"    admission_ms   p50={stats['p50']:.0f}ms p95={stats['p95']:.0f}ms p99={stats['p99']:.0f}ms "
            f"(server: request start to ledger commit)"
        )
        if backfill is not None:
            backfill.wait()
        if args.rate:
            count, size = round(args.rate * args.duration), int(args.size_mb * 2**20)
            print(f"sustained: {count} uploads of {args.size_mb} MB at {args.rate:g}/s (open loop), "
                  f"load average {os.getloadavg()[0]:.1f}")
            floor_rate = sustained_line("floor", floor_port, token, count, size, args.rate)
            intake_rate = sustained_line("intake serve", port, token, count, size, args.rate)
            print(f"  ratio intake serve / floor, admitted uploads/s: {intake_rate / floor_rate:.2f}")
        single_job(env, url, token)
        if args.daemon_jobs:
            daemon_jobs(env, url, token, args.daemon_jobs)
    finally:
        for process in (server, floor):
            process.terminate()
            process.wait()
        if backfill is not None and backfill.poll() is None:
            backfill.kill()


if __name__ == "__main__":
    main()
