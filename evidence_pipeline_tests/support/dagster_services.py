"""A real `dagster-webserver` (the UI's GraphQL API) and `dagster-daemon` on one instance, for tests and bench/.

Both run as subprocesses; the caller gives their environment (DAGSTER_HOME with a dagster.yaml, EVIDENCE_*
settings). By default the code location is served as `evidence ui` (`dagster dev`) and a deployment serve it: one
`dagster code-server start` process, which both reach over gRPC (deploy/workspace.yaml, pointed at it) and which
launches the runs. With the repository's workspace.yaml instead (`python_module`), each of them would spawn a code
server of its own, and the daemon would replace its own every 60 s (Dagster's RELOAD_WORKSPACE_INTERVAL): a new
process that imports and loads the whole location, once a minute, for as long as a backfill runs.
"""

from __future__ import annotations

import contextlib
import io
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import requests
import yaml
from dagster import DagsterInstance, RunsFilter

from evidence_pipeline.config import Settings
from evidence_pipeline.models import TenantMonth
from evidence_pipeline.runtime import runtime_for
from evidence_pipeline.synthetic.demo_data import demo_transactions
from evidence_pipeline_tests.support.fixture_sources import publish_revision

REPO = Path(__file__).resolve().parents[2]
LOCATION = {"repositoryLocationName": "evidence_pipeline", "repositoryName": "__repository__"}


class GraphQLError(RuntimeError):
    pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def grpc_workspace(path: Path, port: int, host: str = "127.0.0.1") -> Path:
    """deploy/workspace.yaml, pointed at a code server on ``host``:``port``, written to ``path``."""
    config = yaml.safe_load((REPO / "deploy" / "workspace.yaml").read_text())
    config["load_from"][0]["grpc_server"].update(host=host, port=port)
    path.write_text(yaml.safe_dump(config))
    return path


def code_server_command(port: int, host: str = "127.0.0.1") -> list[str]:
    """`dagster code-server start` of the location on ``host``:``port``, as the image's command runs it."""
    return [
        str(Path(sys.executable).parent / "dagster"),
        "code-server",
        "start",
        "--host",
        host,
        "--port",
        str(port),
        "--module-name",
        "evidence_pipeline.definitions",
        "--location-name",
        "evidence_pipeline",
    ]


@contextlib.contextmanager
def dagster_services(
    env: dict[str, str],
    logs: Path,
    start_timeout_s: float = 180,
    workspace: Path | None = None,
    daemon_env: dict[str, str] | None = None,
):
    """Starts the webserver and the daemon (with ``daemon_env`` when given); yields the GraphQL URL; stops both.
    Without ``workspace``, also a code server (with ``env``) that both use, stopped after them."""
    if workspace is None:
        port = _free_port()
        with code_server(code_server_command(port), port, env, logs / "code-server.log", start_timeout_s):
            with dagster_services(
                env, logs, start_timeout_s, grpc_workspace(logs / "workspace.yaml", port), daemon_env
            ) as url:
                yield url
        return
    port = _free_port()
    venv_bin = Path(sys.executable).parent
    common = ["-w", str(workspace)]
    with open(logs / "webserver.log", "w") as web_log, open(logs / "daemon.log", "w") as daemon_log:
        processes = [
            subprocess.Popen(
                [venv_bin / "dagster-webserver", *common, "-h", "127.0.0.1", "-p", str(port)],
                env=env,
                stdout=web_log,
                stderr=subprocess.STDOUT,
            ),
            subprocess.Popen(
                [venv_bin / "dagster-daemon", "run", *common],
                env=daemon_env or env,
                stdout=daemon_log,
                stderr=subprocess.STDOUT,
            ),
        ]
        try:
            deadline = time.monotonic() + start_timeout_s
            while True:
                with contextlib.suppress(requests.ConnectionError):
                    if requests.get(f"http://127.0.0.1:{port}/server_info", timeout=5).ok:
                        break
                if time.monotonic() > deadline or processes[0].poll() is not None:
                    raise RuntimeError(f"the webserver did not start; see {logs / 'webserver.log'}")
                time.sleep(0.5)
            yield f"http://127.0.0.1:{port}/graphql"
        finally:
            for process in processes:
                process.terminate()  # both at once: they stop in parallel
            for process in processes:
                stop(process)


@contextlib.contextmanager
def code_server(command: list[str], port: int, env: dict[str, str], log: Path, start_timeout_s: float = 180):
    """Starts ``command`` (a `dagster code-server start` on 127.0.0.1:``port``), waits until its gRPC health check
    says SERVING, yields the process; stops it."""
    from dagster._grpc.client import DagsterGrpcClient

    with open(log, "w") as output:
        server = subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT)
    try:
        client = DagsterGrpcClient(port=port, host="127.0.0.1")
        deadline = time.monotonic() + start_timeout_s
        while True:
            # Not listening yet: Dagster's client prints the gRPC error; it says nothing here.
            with contextlib.suppress(Exception), contextlib.redirect_stdout(io.StringIO()):
                if client.health_check_query() == "SERVING":
                    break
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the code server did not start: {log.read_text()[-2000:]}")
            time.sleep(0.2)
        yield server
    finally:
        # It serves from a child (`dagster api grpc`) that has outlived it once its runs were done: stop both.
        children = []
        with contextlib.suppress(psutil.Error):
            children = psutil.Process(server.pid).children(recursive=True)
        stop(server)
        for child in children:
            with contextlib.suppress(psutil.Error):
                child.terminate()
        for child in psutil.wait_procs(children, timeout=10)[1]:
            with contextlib.suppress(psutil.Error):
                child.kill()


def run_fork_servers() -> list[psutil.Process]:
    """The fork servers (defs/extensions/run_fork.py) of the code servers this process started: a code server
    starts its own with the first run it launches."""
    servers = []
    for process in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):  # it ended meanwhile
            if "multiprocessing.forkserver" in " ".join(process.cmdline()) and "api grpc" in " ".join(
                process.parent().cmdline()
            ):
                servers.append(process)
    return servers


def stop(process: subprocess.Popen, timeout_s: float = 15) -> None:
    """SIGTERM, then SIGKILL if it has not ended within ``timeout_s``: a test's services hold nothing a clean
    shutdown must save, and the daemon's graceful stop can take a minute on a loaded machine."""
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def graphql(url: str, query: str, variables: dict | None = None) -> dict:
    response = requests.post(url, json={"query": query, "variables": variables or {}}, timeout=120)
    response.raise_for_status()
    body = response.json()
    if body.get("errors"):
        raise GraphQLError(body["errors"][0]["message"])
    return body["data"]


ASSETS = ["source_revision", "monthly_report", "evidence_bundle"]
LAUNCH_BACKFILL = """mutation($params: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $params) {
  __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message } } }"""


@contextlib.contextmanager
def one_tenant_site(root: Path, env: dict[str, str], tenant: str, months: list[str]):
    """A fresh instance (the repository's dagster.yaml) under ``root`` with ``tenant`` as its one partition, demo
    sources published for ``months``, and a webserver, daemon and code server on it with ``env`` (which names
    EVIDENCE_HOME); yields (the Runtime, the DagsterInstance, the GraphQL URL). ``env`` is the test's environment
    meanwhile."""
    env = env | {"DAGSTER_HOME": str(root / "dagster")}
    (root / "dagster").mkdir()
    (root / "dagster" / "dagster.yaml").write_bytes((REPO / "dagster.yaml").read_bytes())
    runtime = runtime_for(Settings.from_env(env))
    for month in months:
        publish_revision(runtime, TenantMonth(tenant, month), demo_transactions(TenantMonth(tenant, month)))
    with contextlib.ExitStack() as stack:
        patch = stack.enter_context(pytest.MonkeyPatch.context())
        for name, value in env.items():
            patch.setenv(name, value)
        instance = stack.enter_context(DagsterInstance.from_config(env["DAGSTER_HOME"]))
        instance.add_dynamic_partitions("tenant", [tenant])
        yield runtime, instance, stack.enter_context(dagster_services(dict(os.environ), root))


def launch_backfill(url: str, *partitions: str) -> str:
    """A backfill of the three evidence assets for ``partitions``, as the UI's catalog launches it; its id."""
    result = graphql(
        url,
        LAUNCH_BACKFILL,
        {"params": {"assetSelection": [{"path": [a]} for a in ASSETS], "partitionNames": list(partitions)}},
    )
    assert result["launchPartitionBackfill"]["__typename"] == "LaunchBackfillSuccess", result
    return result["launchPartitionBackfill"]["backfillId"]


def backfill_finished(instance: DagsterInstance, backfill_id: str) -> bool:
    """The backfill has made its runs and every one of them has finished."""
    from dagster._core.execution.backfill import BulkActionStatus  # no public export

    runs = instance.get_runs(RunsFilter(tags={"dagster/backfill": backfill_id}))
    return (
        instance.get_backfill(backfill_id).status != BulkActionStatus.REQUESTED
        and bool(runs)
        and all(run.is_finished for run in runs)
    )


def wait_for(condition, what: str, timeout_s: float = 900):
    """``condition()``'s first true value, polled every half second; fails the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if result := condition():
            return result
        time.sleep(0.5)
    pytest.fail(f"{what} did not happen in {timeout_s} s")


# Launch one run of a job, as the webserver's launchpad does.
LAUNCH_RUN = """mutation($params: ExecutionParams!) { launchRun(executionParams: $params) {
  __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }"""


def key(tm: TenantMonth) -> str:
    """The partition key of a tenant-month (its month's first day and its tenant) as the GraphQL API names it."""
    return f"{tm.period}-01|{tm.tenant}"
