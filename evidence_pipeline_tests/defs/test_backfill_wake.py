"""The backfill daemon starts a newly requested backfill when it is requested, not at its 30 s tick
(defs/extensions/backfill_wake.py), records a backfill's progress within seconds of its runs finishing, and iterates
backfills in progress no more often than before while none of their runs finishes."""

from __future__ import annotations

import logging
import threading
import time

import dagster._daemon.daemon as dagster_daemon
import pytest
import yaml
from dagster import AssetKey, DagsterInstance, DagsterRunStatus, RunsFilter, instance_for_test
from dagster._core.execution.backfill import BulkActionStatus, PartitionBackfill
from dagster._core.storage.tags import BACKFILL_ID_TAG
from dagster._core.test_utils import create_run_for_test

from evidence_pipeline.definitions import defs
from evidence_pipeline.defs.extensions import backfill_wake
from evidence_pipeline_tests.support.backends import new_database
from evidence_pipeline_tests.support.dagster_services import ASSETS, REPO, launch_backfill, one_tenant_site, wait_for
from evidence_pipeline_tests.support.guarded_patch import assert_patched_only_on_the_checked_dagster

TENANT = "acme-books"


@pytest.fixture(params=["sqlite", "postgres"])
def instance(request, tmp_path, monkeypatch):
    config = "dagster.yaml"
    if request.param == "postgres":  # backfills are stamped and filtered by time in the run storage
        monkeypatch.setenv("DAGSTER_PG_URL", new_database(request.getfixturevalue("postgres_url")))
        config = "dagster.production.yaml"
    with instance_for_test(overrides=yaml.safe_load((REPO / config).read_text()), temp_dir=str(tmp_path)) as instance:
        instance.add_dynamic_partitions("tenant", [TENANT])
        yield instance


def _request_backfill(instance: DagsterInstance, backfill_id: str, month: str) -> None:
    """A backfill of the three evidence assets for one tenant-month, as the UI stores it (status REQUESTED)."""
    instance.add_backfill(
        PartitionBackfill.from_asset_partitions(
            backfill_id=backfill_id,
            asset_graph=defs.resolve_asset_graph(),
            partition_names=[f"{month}-01|{TENANT}"],
            asset_selection=[AssetKey(a) for a in ASSETS],
            backfill_timestamp=time.time(),
            tags={},
            dynamic_partitions_store=instance,
            all_partitions=False,
            title=None,
            description=None,
            run_config=None,
        )
    )


def test_only_a_newly_requested_backfill_ends_the_loops_sleep(instance, caplog):
    caplog.set_level(logging.INFO, logger="test.backfill")
    shutdown = threading.Event()
    _request_backfill(instance, "in-progress", "2026-01")
    wake = backfill_wake.WakeOnNewBackfill(instance, shutdown, logging.getLogger("test.backfill"))

    # A backfill already requested when the loop started its iteration does not wake it: the sleep runs out.
    assert wake.wait(2 * backfill_wake.POLL_SECONDS) is False
    assert caplog.messages == []

    _request_backfill(instance, "new", "2026-02")
    assert wake.wait(600) is False  # without the wake, this sleeps the full 600 s before the assertion below fails
    assert [m.split(" was requested")[0] for m in caplog.messages] == ["Backfill new"]

    # The iteration that followed saw it: it wakes the loop no more.
    instance.update_backfill(instance.get_backfill("in-progress").with_status(BulkActionStatus.COMPLETED_SUCCESS))
    assert wake.wait(2 * backfill_wake.POLL_SECONDS) is False
    assert len(caplog.messages) == 1

    shutdown.set()
    assert wake.wait(600) is True


def test_a_finished_backfill_run_ends_the_loops_sleep_after_the_progress_interval(instance, caplog):
    caplog.set_level(logging.INFO, logger="test.backfill")
    wake = backfill_wake.WakeOnNewBackfill(instance, threading.Event(), logging.getLogger("test.backfill"))
    # A run of no backfill that finishes does not wake the loop: the sleep runs out.
    instance.report_run_failed(create_run_for_test(instance, "elsewhere", status=DagsterRunStatus.STARTED))
    assert wake.wait(backfill_wake.PROGRESS_SECONDS + 2 * backfill_wake.POLL_SECONDS) is False
    assert caplog.messages == []

    # A backfill's run finishes: the loop iterates (recording the backfill's progress) before its tick.
    run = create_run_for_test(
        instance, "monthly_evidence", status=DagsterRunStatus.STARTED, tags={BACKFILL_ID_TAG: "in-progress"}
    )
    instance.report_run_failed(run)
    assert wake.wait(600) is False  # without the wake, this sleeps the full 600 s before the assertion below fails
    assert [m.split(": iterating now")[0] for m in caplog.messages] == ["A run of backfill in-progress finished"]

    # The iteration that followed saw it: it wakes the loop no more.
    assert wake.wait(backfill_wake.PROGRESS_SECONDS + 2 * backfill_wake.POLL_SECONDS) is False
    assert len(caplog.messages) == 1


def test_the_patch_applies_only_to_the_checked_dagster(monkeypatch):
    assert_patched_only_on_the_checked_dagster(
        monkeypatch,
        backfill_wake.install,
        dagster_daemon,
        "execute_backfill_iteration_loop",
        backfill_wake._dagster_loop,
    )


@pytest.mark.slow
def test_the_daemon_starts_a_backfill_when_it_is_requested(tmp_path):
    """A real daemon, webserver and code server; backfills launched with the UI's mutation. The second backfill is
    requested while the daemon's loop sleeps (its first backfill's run exists), so only a wake can start it before
    the tick, and the daemon's log says it was woken for it."""
    months = ["2026-01", "2026-02"]
    env = {"EVIDENCE_HOME": str(tmp_path / "home"), "EVIDENCE_WORKERS": "1"}
    with one_tenant_site(tmp_path, env, TENANT, months) as (_, instance, url):
        backfills = []
        for month in months:
            backfills.append(launch_backfill(url, f"{month}-01|{TENANT}"))
            wait_for(
                lambda: instance.get_runs(RunsFilter(tags={"dagster/backfill": backfills[-1]})),
                f"a run of backfill {backfills[-1]}",
            )
        wait_for(
            lambda: all(instance.get_backfill(b).status != BulkActionStatus.REQUESTED for b in backfills),
            "the end of both backfills",
        )
        runs = instance.get_runs(RunsFilter(tags={"dagster/backfill": backfills}))
    assert {run.status for run in runs} == {DagsterRunStatus.SUCCESS}
    daemon_log = (tmp_path / "daemon.log").read_text()
    assert f"Backfill {backfills[1]} was requested: iterating now" in daemon_log
    assert "finished: iterating now" in daemon_log  # its progress recorded when a run finished, not at the tick
