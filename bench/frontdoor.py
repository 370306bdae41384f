"""What the document benchmarks share: a fresh root with `evidence intake serve` in front of it, jobs admitted over
HTTP, then Dagster's dispatch (the document sensor's tick and its page runs, `execute_in_process`) timed, and the
plain loop they are compared with, at the same parallelism (bench/redaction.py, bench/contract_review.py).
"""

from __future__ import annotations

import contextlib
import json
import math
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from intake import EVIDENCE, acting_operator, free_port, tenant_token, wait_healthy  # noqa: E402  (bench/intake.py: the front door's helpers)


@dataclass
class FrontDoor:
    """`evidence intake serve --workers 1` on a fresh root, and one tenant's authenticated client."""

    root: Path
    env: dict[str, str]
    http: httpx.Client

    def evidence(self, *args: str) -> subprocess.CompletedProcess:
        return evidence(self.env, *args)

    def approved_template(self, organization: bytes, program: bytes) -> str:
        """The tenant's template version, submitted by the operator and approved by an approver of its own key
        (registered here by the admin); returns its version id."""
        keys = self.root / "actors"
        public = json.loads(self.evidence("actor", "keygen", str(keys / "approver.pem"), "--json").stdout)["public_key"]
        self.evidence(
            "actor",
            "register",
            "approver",
            "--role",
            "approver",
            "--public-key",
            public,
            "--key",
            str(keys / "bench-admin.pem"),
        )
        (self.root / "org.json").write_bytes(organization)
        (self.root / "program.json").write_bytes(program)
        submitted = self.evidence(
            "template",
            "submit",
            "bench",
            "--organization",
            str(self.root / "org.json"),
            "--program",
            str(self.root / "program.json"),
            "--json",
        )
        version = json.loads(submitted.stdout)["version_id"]
        self.evidence("template", "approve", "bench", version, "--key", str(keys / "approver.pem"))
        return version

    def upload(self, data: bytes) -> str:
        answer = self.http.post("/v1/documents", content=data, headers={"Content-Type": "application/pdf"})
        answer.raise_for_status()
        return answer.json()["document_id"]

    def submit(self, key: str, body: dict) -> dict:
        answer = self.http.post("/v1/jobs", headers={"Idempotency-Key": key}, json=body)
        answer.raise_for_status()
        return answer.json()

    def states(self, jobs: list[dict]) -> list[dict]:
        return [self.http.get(job["status_url"]).json() for job in jobs]

    def dispatch(self, parallelism: int) -> tuple[float, float]:
        """(wall, CPU) seconds from the document sensor's tick to the end of its page runs: ``parallelism`` pages
        (the page size is set so), each run in a process of its own, forked here, on one ephemeral instance each.
        The code location is loaded before, as a daemon has it."""
        os.environ.update(self.env)  # this process now works on the bench's root
        from dagster import DagsterInstance, build_sensor_context

        from evidence_pipeline.definitions import defs

        with DagsterInstance.ephemeral() as instance:
            started, cpu = time.perf_counter(), cpu_seconds()
            tick = defs.resolve_sensor_def("document_dispatch_sensor").evaluate_tick(
                build_sensor_context(instance=instance, resources=defs.resources)
            )
            in_parallel(_page_run, [(request.run_config, request.tags) for request in tick.run_requests], parallelism)
            return time.perf_counter() - started, cpu_seconds() - cpu


def _page_run(request: tuple[dict, dict]) -> None:
    from dagster import DagsterInstance

    from evidence_pipeline.definitions import defs

    run_config, tags = request
    with DagsterInstance.ephemeral() as instance:
        result = defs.get_job_def("document_page_job").execute_in_process(
            run_config=run_config, instance=instance, tags=tags, raise_on_error=False
        )
    if not result.success:
        raise SystemExit("a page run failed")


def cpu_seconds() -> float:
    """User and system CPU of this process and of the children it waited for (forked workers, page runs)."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def in_parallel(work: Callable, items: Sequence, parallelism: int) -> list:
    """``work(item)`` for every item, in order: in this process, or in ``parallelism`` forked ones."""
    if parallelism <= 1:
        return [work(item) for item in items]
    with ProcessPoolExecutor(parallelism, mp_context=multiprocessing.get_context("fork")) as pool:
        return list(pool.map(work, items))


def evidence(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([EVIDENCE, *args], env=env, check=True, capture_output=True, text=True)


@contextlib.contextmanager
def front_door(prefix: str, jobs: int, parallelism: int, **settings: str) -> Iterator[FrontDoor]:
    """A fresh root (``settings`` on top) whose pages hold ``jobs / parallelism`` jobs, a token of tenant `bench`
    and `evidence intake serve` answering for it."""
    with tempfile.TemporaryDirectory(prefix=prefix) as home:
        root = Path(home)
        env = (
            os.environ
            | {
                "EVIDENCE_HOME": str(root / "home"),
                "EVIDENCE_INTAKE_MAX_BYTES": str(64 << 20),
                "EVIDENCE_DOCUMENT_PAGE_SIZE": str(max(math.ceil(jobs / parallelism), 1)),
            }
            | settings
        )
        env["EVIDENCE_ACTOR_KEY"] = acting_operator(env, root / "actors")  # token issue and template submit sign
        token = tenant_token(env, "bench")
        port = free_port()
        server = subprocess.Popen(
            [EVIDENCE, "intake", "serve", "--port", str(port), "--workers", "1"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            wait_healthy(url, server)
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120) as http:
                yield FrontDoor(root, env, http)
        finally:
            server.terminate()
            server.wait(timeout=30)
