"""Exactly-once under faults, on PostgreSQL + S3: SIGKILL a worker at each named kill point, recover the way
production would (an operator re-materializes the partition), and check the invariants."""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from dagster import DagsterInstance, materialize

from evidence_pipeline.audit.checkpoints import publish_checkpoint, verify_ledger
from evidence_pipeline.audit.verify import verify_bundle
from evidence_pipeline.defs.assets import evidence_bundle, monthly_report, source_revision
from evidence_pipeline.defs.partitions import partition_key_for, tenant_partitions
from evidence_pipeline.defs.resources import EvidenceResource
from evidence_pipeline.faults import KILL_POINTS
from evidence_pipeline.operations.maintenance import sweep_attempts
from evidence_pipeline.tempfiles import MARKER
from evidence_pipeline_tests.support.fixture_sources import SMALL

REPO = Path(__file__).resolve().parents[2]
LEASE_SECONDS = 2
on_postgres_and_s3 = pytest.mark.parametrize("backend", ["aws"], indirect=True)


@pytest.fixture
def worker_env(runtime, backend, tmp_path, monkeypatch):
    """The environment a production worker would have: PostgreSQL for Dagster and the ledger, S3 for the archive."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copyfile(REPO / "dagster.production.yaml", home / "dagster.yaml")
    env = backend | {
        "DAGSTER_HOME": str(home),
        "DAGSTER_PG_URL": backend["EVIDENCE_LEDGER_URL"],
        "EVIDENCE_LEASE_SECONDS": str(LEASE_SECONDS),
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with DagsterInstance.get() as instance:
        instance.add_dynamic_partitions(tenant_partitions.name, [SMALL.tenant])
    return os.environ | env


def _worker(env: dict, *args: str, kill_point: str | None = None) -> subprocess.Popen:
    env = env | ({"EVIDENCE_KILL_POINT": kill_point} if kill_point else {})
    return subprocess.Popen(
        [sys.executable, "-m", "evidence_pipeline_tests.support.fault_child", *args],
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _operator_rematerializes():
    with DagsterInstance.get() as instance:
        return materialize(
            [source_revision, monthly_report, evidence_bundle],
            instance=instance,
            partition_key=partition_key_for(SMALL),
            resources={"evidence": EvidenceResource()},
        )


def _bundle_prefixes(runtime) -> set[str]:
    return {key.rsplit("/", 1)[0] for key in runtime.archive.list("bundles")}


def _assert_invariants(runtime):
    assert _publications(runtime) == 1
    prefixes = _bundle_prefixes(runtime)
    assert len(prefixes) == 1 and all(verify_bundle(runtime.archive, prefix).ok for prefix in prefixes)
    publish_checkpoint(runtime.ledger, runtime.archive, runtime.keyring)
    assert verify_ledger(runtime.ledger, runtime.archive)["unchecked_tail"] == 0
    sweep_attempts(EvidenceResource().runtime(), "test")  # the workers' settings: lease LEASE_SECONDS, long expired
    assert _attempt_dirs(runtime) == []


# What a worker killed at each point leaves behind: (archive objects of the bundle, committed publications,
# attempt directories). None of it is a visible bundle.
LEFTOVERS = {
    "after_pin": (0, 0, 0),
    "mid_render": (0, 0, 0),
    "after_staging": (0, 0, 0),
    "after_validate": (0, 0, 0),
    "after_sign": (0, 0, 1),
    "after_archive_put": (2, 0, 1),
    "during_renew": (2, 0, 1),
    "after_commit": (2, 1, 1),
}


def test_every_kill_point_is_exercised():
    # after_approval_put: test_contract_review.py; after_document_verified and after_document_put: test_redaction.py
    document_points = {"after_approval_put", "after_document_verified", "after_document_put"}
    assert set(LEFTOVERS) | {"during_sweep"} | document_points == set(KILL_POINTS)


def _publications(runtime) -> int:
    with runtime.ledger.engine.connect() as conn:
        return conn.execute(
            sa.text("SELECT count(*) FROM evidence_publications WHERE tenant = :t AND period = :p"),
            {"t": SMALL.tenant, "p": SMALL.period},
        ).scalar()


def _attempt_dirs(runtime) -> list[Path]:
    work = runtime.settings.work_dir
    return [p for p in work.iterdir() if p.name.startswith(MARKER)] if work.exists() else []


@on_postgres_and_s3
@pytest.mark.parametrize("kill_point", list(LEFTOVERS))
def test_sigkill_then_rematerialize_publishes_exactly_once(worker_env, runtime, kill_point):
    child = _worker(worker_env, "materialize", SMALL.tenant, SMALL.period, kill_point=kill_point)
    assert child.wait(timeout=180) == -signal.SIGKILL, child.stderr.read().decode()[-2000:]
    objects = runtime.archive.list("bundles")
    assert (len(objects), _publications(runtime), len(_attempt_dirs(runtime))) == LEFTOVERS[kill_point]
    assert not any(key.endswith("/manifest.json") for key in objects)
    for prefix in _bundle_prefixes(runtime):  # whatever the dead worker left is not a visible bundle
        assert verify_bundle(runtime.archive, prefix).codes == ["BUNDLE_INCOMPLETE"]
    time.sleep(LEASE_SECONDS + 0.5)  # the dead worker's lease expires
    result = _operator_rematerializes()
    assert result.success
    [bundle] = [
        e.materialization.metadata
        for e in result.get_asset_materialization_events()
        if e.asset_key.to_user_string() == "evidence_bundle"
    ]
    assert bundle["newly_published"].value == (kill_point != "after_commit")  # after the commit: converge on it
    _assert_invariants(runtime)


@on_postgres_and_s3
def test_sigkill_during_sweep_then_sweep_again(worker_env, runtime):
    orphan = runtime.settings.work_dir / f"{MARKER}orphan"
    orphan.mkdir(parents=True)
    past = time.time() - 3600
    os.utime(orphan, (past, past))
    child = _worker(worker_env, "sweep", kill_point="during_sweep")
    assert child.wait(timeout=180) == -signal.SIGKILL
    assert orphan.exists()
    assert _operator_rematerializes().success
    _assert_invariants(runtime)
    assert not orphan.exists()


@pytest.mark.slow
@on_postgres_and_s3
def test_two_runs_of_one_partition_started_together_publish_once(worker_env, runtime):
    children = [_worker(worker_env, "materialize", SMALL.tenant, SMALL.period) for _ in range(2)]
    codes = [child.wait(timeout=300) for child in children]
    assert 0 in codes and set(codes) <= {0, 1}  # the other converged, or met the live lease and gave up
    _assert_invariants(runtime)
    [job] = runtime.ledger.jobs_in("succeeded", "running", "accepted", "rejected", "dead")
    assert job.state == "succeeded"  # the loser's failure did not clobber the winner's job
