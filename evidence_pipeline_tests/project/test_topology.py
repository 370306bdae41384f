"""The production topology, as separate processes on one machine: nothing is shared but PostgreSQL, S3 and keys.

- the code location as its own gRPC server (`dagster code-server start`): the sensors are evaluated there, and
  Dagster's default run launcher starts every run there as a process of its own;
- a webserver and a daemon that load no code of the location: their workspace names the code server
  (`grpc_server`);
- the instance of dagster.production.yaml on embedded PostgreSQL, the stores on a moto S3 server, the ledger (and
  in it the tenant registry) on PostgreSQL;
- keys from a mounted keys directory (EVIDENCE_KEYS_DIR, provisioned before; EVIDENCE_GENERATE_DEV_KEYS=0, so a
  process that did not find them would fail rather than sign with a new identity).

Every process has an EVIDENCE_HOME, DAGSTER_HOME and work directory of its own, as a container or pod has: the
test then finds nothing of the ledger or the stores in any of them, and no attempt directory left behind.

Tenants are registered with `evidence tenant add` (the database); the registry sensor, in the code server, makes
them partitions; a backfill is launched as the UI launches it (`launchPartitionBackfill`) and its runs succeed;
one tenant is offboarded and the sensor removes its partition; `evidence verify` verifies the bundles in S3 with
the mounted keys' ids pinned; the ledger has the events.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus, RunsFilter

from evidence_pipeline.config import Settings
from evidence_pipeline.models import EventType, TenantMonth
from evidence_pipeline.runtime import runtime_for
from evidence_pipeline.signing.keys import load_keyring
from evidence_pipeline.synthetic.demo_data import demo_transactions
from evidence_pipeline.tempfiles import MARKER
from evidence_pipeline_tests.support.backends import aws_environment, new_database
from evidence_pipeline_tests.support.dagster_services import (
    REPO,
    _free_port,
    backfill_finished,
    code_server,
    code_server_command,
    dagster_services,
    grpc_workspace,
    key,
    launch_backfill,
)
from evidence_pipeline_tests.support.fixture_sources import publish_revision
from evidence_pipeline_tests.support.signers import Signers

pytestmark = pytest.mark.slow

TENANTS = ["acme-books", "baltic-crafts"]  # demo tenants: their demo data is the source
BACKFILL = [TenantMonth(tenant, period) for tenant in TENANTS for period in ("2026-03", "2026-04")]
ASSETS = ["source_revision", "monthly_report", "evidence_bundle"]
ROLES = ("code", "webserver", "daemon", "operator")  # the operator runs `evidence …` and this test's checks
TIMEOUT_S = 900  # every wait below is bounded by this


def _role_environment(root: Path, shared: dict[str, str], role: str) -> dict[str, str]:
    """What one process (a container) gets: the shared settings, and a home, instance folder and work dir of its
    own, holding the instance config that the image holds."""
    home = root / role
    dagster_home = home / "dagster"
    dagster_home.mkdir(parents=True)
    shutil.copyfile(REPO / "dagster.production.yaml", dagster_home / "dagster.yaml")
    return {
        **os.environ,
        **shared,
        "EVIDENCE_HOME": str(home / "evidence"),
        "DAGSTER_HOME": str(dagster_home),
        "EVIDENCE_WORK_DIR": str(home / "work"),
    }


def _evidence(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(Path(sys.executable).parent / "evidence"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def _wait_until(what: str, done, interval_s: float = 1.0) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {TIMEOUT_S} s")
        time.sleep(interval_s)


@pytest.fixture
def topology(request, tmp_path):
    """The shared settings and one environment per role; the sources of BACKFILL published; keys provisioned."""
    shared = aws_environment(request, tmp_path)
    bucket = shared["EVIDENCE_ARCHIVE_URI"].removeprefix("s3://").split("/")[0]
    shared.pop("EVIDENCE_HOME")  # each role has its own
    keys = tmp_path / "mounted-keys"  # provisioned once, then mounted in every process that signs
    keyring = load_keyring(keys, generate=True)
    shared |= {
        "DAGSTER_PG_URL": new_database(request.getfixturevalue("postgres_url")),
        "EVIDENCE_PREVIEW_URI": f"s3://{bucket}/previews",
        "EVIDENCE_DOCUMENTS_URI": f"s3://{bucket}/documents",
        "EVIDENCE_KEYS_DIR": str(keys),
        "EVIDENCE_GENERATE_DEV_KEYS": "0",
        "EVIDENCE_WORKERS": "1",
    }
    envs = {role: _role_environment(tmp_path, shared, role) for role in ROLES}
    runtime = runtime_for(Settings.from_env(envs["operator"]))
    for tenant_month in BACKFILL:
        publish_revision(runtime, tenant_month, demo_transactions(tenant_month))
    return envs, runtime, keyring


def test_a_backfill_runs_through_code_server_webserver_daemon_and_run_processes(topology, tmp_path, monkeypatch):
    envs, runtime, keyring = topology
    operator = envs["operator"]
    monkeypatch.setenv("DAGSTER_PG_URL", operator["DAGSTER_PG_URL"])  # this test's own instance reads it
    signers = Signers(runtime.ledger, tmp_path / "actors")
    added = _evidence(operator, "tenant", "add", *TENANTS, "--key", signers.key_file("olga"))
    assert added.returncode == 0, added.stderr

    port = _free_port()
    workspace = grpc_workspace(tmp_path / "workspace.yaml", port)

    with (
        code_server(code_server_command(port), port, envs["code"], tmp_path / "code-server.log", TIMEOUT_S) as server,
        dagster_services(envs["webserver"], tmp_path, TIMEOUT_S, workspace, envs["daemon"]) as url,
        DagsterInstance.from_config(operator["DAGSTER_HOME"]) as instance,
    ):
        # The registry sensor, evaluated in the code server at the daemon's request, makes the tenants partitions.
        _wait_until("the registry sensor's tick", lambda: instance.get_dynamic_partitions("tenant") == TENANTS)

        backfill_id = launch_backfill(url, *(key(tm) for tm in BACKFILL))

        _wait_until("the backfill", lambda: backfill_finished(instance, backfill_id), interval_s=2)
        runs = instance.get_runs(RunsFilter(tags={"dagster/backfill": backfill_id}))
        assert {run.status for run in runs} == {DagsterRunStatus.SUCCESS}, [run.status for run in runs]
        # The services (and the processes they keep) are alive; the run workers ended with their runs.
        services = {os.getpid(), server.pid, *(child.pid for child in psutil.Process().children(recursive=True))}
        for run in runs:
            # Launched through the code server over gRPC, and executed in processes of their own.
            origin = run.remote_job_origin.repository_origin.code_location_origin
            assert type(origin).__name__ == "GrpcServerCodeLocationOrigin" and origin.port == port
            steps = {
                entry.dagster_event.pid
                for entry in instance.all_logs(
                    run.run_id, of_type={DagsterEventType.STEP_START, DagsterEventType.ASSET_MATERIALIZATION}
                )
            }
            assert steps and not steps & services, (steps, services)
        materialized = {
            entry.dagster_event.partition
            for run in runs
            for entry in instance.all_logs(run.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION)
            if entry.dagster_event.asset_key.to_user_string() == "evidence_bundle"
        }
        assert materialized == {key(tm) for tm in BACKFILL}
        assert type(instance.run_launcher).__name__ == "DefaultRunLauncher"

        # Offboarding, from the operator's process, reaches the sensor through the database as well.
        asked = _evidence(
            operator, "tenant", "offboard", TENANTS[1], "--reason", "contract ended", "--key", signers.key_file("olga")
        )
        assert asked.returncode == 0, asked.stderr
        offboarded = _evidence(
            operator, "tenant", "offboard", TENANTS[1], "--approve", "--key", signers.key_file("bob")
        )
        assert offboarded.returncode == 0, offboarded.stderr
        _wait_until(
            "the offboarded tenant's partition to go", lambda: instance.get_dynamic_partitions("tenant") == TENANTS[:1]
        )

    # An auditor's `evidence verify` of the archive in S3, trusting only the mounted keys' statement key and root.
    verified = _evidence(
        operator,
        "verify",
        f"{operator['EVIDENCE_ARCHIVE_URI']}/bundles",
        "--json",
        "--key-id",
        keyring.statement_key_id,
        "--root-id",
        keyring.root_id,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    outcomes = [json.loads(line) for line in verified.stdout.splitlines()]
    assert len(outcomes) == len(BACKFILL) and all(outcome["ok"] for outcome in outcomes)

    # The ledger (PostgreSQL) holds the registrations, the offboarding, one publication per tenant-month (the
    # offboarded tenant's bundles stay: they are evidence), and verifies.
    ledger = runtime.ledger
    assert [event["tenant"] for event in ledger.events_of_type(EventType.TENANT_REGISTERED)] == TENANTS
    assert ledger.offboarded_tenants() == {TENANTS[1]}
    published = ledger.events_of_type(EventType.BUNDLE_PUBLISHED)
    assert sorted((e["tenant"], e["period"]) for e in published) == sorted((tm.tenant, tm.period) for tm in BACKFILL)
    assert {e["details"]["key_id"] for e in published} == {keyring.statement_key_id}
    ledger.verify_chain()

    # Nothing a run needed lived on a process's own disk: no ledger, store or generated key in any home, and
    # no attempt directory left in any work directory. The runs (children of the code server) used its own.
    assert Path(envs["code"]["EVIDENCE_WORK_DIR"]).is_dir()
    for role, env in envs.items():
        home, work = Path(env["EVIDENCE_HOME"]), Path(env["EVIDENCE_WORK_DIR"])
        left = sorted(p.name for p in home.iterdir()) if home.exists() else []
        assert not set(left) & {"ledger.sqlite", "archive", "sources", "staging", "previews", "documents", "keys"}, (
            role,
            left,
        )
        assert not list(work.glob(f"{MARKER}*")), role
