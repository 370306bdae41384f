"""Nothing stuck silently: a tenant-month job whose run spent its in-run retries waits in retry_wait, and
tenant_month_retry_sensor (defs/retries.py) requests its run when it is due; a lost worker is an attempt
(WORKER_LOST); a job whose budget is spent is dead, listed and replayable.

The end-to-end test drives an archive outage (faults.py: EVIDENCE_IO_FAULT with EVIDENCE_IO_FAULT_WHILE) longer
than the in-run retries through a real daemon, webserver and code server: the job is retried and published once the
outage ends, and dead when it never ends.
"""

from __future__ import annotations

import time

import pytest
from dagster import (
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    RunsFilter,
    build_sensor_context,
    partition_loading_context,
)

from evidence_pipeline.config import Settings
from evidence_pipeline.definitions import defs
from evidence_pipeline.defs.retries import IDLE_LEASES, RETRY_TAG
from evidence_pipeline.ledger import jobs as states
from evidence_pipeline.ledger.jobs import JobKey
from evidence_pipeline.ledger.rows import Job
from evidence_pipeline.models import EventType
from evidence_pipeline.operations.dead_letters import dead_letters
from evidence_pipeline.runtime import runtime_for
from evidence_pipeline_tests.support.dagster_services import launch_backfill, one_tenant_site, wait_for
from evidence_pipeline_tests.support.signers import Signers

TENANT = "acme-books"


def _due_now(ledger, job_id: str) -> None:
    """The clock reaches the job's next_attempt_at, without waiting for it."""
    with ledger.writing() as conn:
        conn.execute(ledger.jobs.update().where(ledger.jobs.c.job_id == job_id).values(next_attempt_at=time.time()))


def _tick(instance):
    context = build_sensor_context(
        instance=instance, resources=defs.resources, repository_def=defs.get_repository_def()
    )
    with partition_loading_context(dynamic_partitions_store=instance):  # as the daemon evaluates it
        return defs.get_sensor_def("tenant_month_retry_sensor").evaluate_tick(context)


def test_the_sensor_records_lost_workers_requests_due_and_replayed_jobs_and_the_spent_budget_is_dead(
    tmp_path, monkeypatch
):
    for name, value in {
        "EVIDENCE_HOME": str(tmp_path / "home"),
        "EVIDENCE_MAX_ATTEMPTS": "3",
        "EVIDENCE_RETRY_BUDGET_SECONDS": "0.001",
        "EVIDENCE_RETRY_DELAY_SECONDS": "3600",
    }.items():
        monkeypatch.setenv(name, value)
    runtime = runtime_for(Settings.from_env())
    ledger = runtime.ledger
    job_id = ledger.accept_job(JobKey(TENANT, "2026-03", "a" * 64, "renderer", "policy"), "test").job_id
    stranger = ledger.accept_job(JobKey("zeta-foods", "2026-03", "b" * 64, "renderer", "policy"), "test").job_id
    with DagsterInstance.local_temp() as instance:
        instance.add_dynamic_partitions("tenant", [TENANT])
        ledger.acquire_lease(job_id, "run-that-died", -1)  # its run died: the lease has expired
        first = _tick(instance)
        assert first.run_requests == [] and first.skip_message == "no tenant-month job is due"
        waiting = ledger.job(job_id)
        assert (waiting.state, waiting.attempts, waiting.last_reason) == ("accepted", 1, "WORKER_LOST")
        assert waiting.next_attempt_at > time.time() + 3000  # in retry_wait: not requested before it is due
        assert _tick(instance).run_requests == []

        _due_now(ledger, job_id)
        _due_now(ledger, stranger)  # due too, but its tenant is no partition: never requested
        [request] = _tick(instance).run_requests
        assert (request.run_key, request.partition_key, request.tags[RETRY_TAG]) == (
            f"retry.{job_id}.1",
            f"2026-03-01|{TENANT}",
            job_id,
        )
        assert [r.run_key for r in _tick(instance).run_requests] == [request.run_key]  # a retried tick: same key

        # The retry run failed before it worked the job (its pin failed): its key is spent, so the try is counted.
        instance.add_run(
            DagsterRun(job_name="monthly_evidence", run_id="f" * 36, status=DagsterRunStatus.FAILURE, tags=request.tags)
        )
        assert _tick(instance).run_requests == []
        waiting = ledger.job(job_id)
        assert (waiting.state, waiting.attempts, waiting.last_reason) == ("accepted", 2, "RETRY_RUN_FAILED")
        _due_now(ledger, job_id)
        [request] = _tick(instance).run_requests
        assert request.run_key == f"retry.{job_id}.2"

        ledger.acquire_lease(job_id, request.run_key, -1)  # this retry's worker died too: the budget is spent
        assert _tick(instance).run_requests == []
        assert ledger.job(job_id).state == states.DEAD
        [letter] = [letter for letter in dead_letters(runtime) if letter["job_id"] == job_id]
        assert (letter["kind"], letter["reason"], letter["tries"]) == ("tenant-month", "WORKER_LOST", 3)
        assert "tenant_month_retry_sensor" in letter["next_step"]

        replayed = Signers(ledger, tmp_path / "actors").replay(job_id, "archive fixed")  # what `evidence replay` does
        [request] = _tick(instance).run_requests  # a replayed job is due at once
        assert request.run_key == f"retry.{replayed.attempt_id}.0"

        # A run that died between two in-run tries leaves its job accepted with a failed try and no wait: once it
        # has been idle for IDLE_LEASES lease lifetimes, it is due too.
        between = ledger.accept_job(JobKey(TENANT, "2026-04", "c" * 64, "renderer", "policy"), "test").job_id
        assert (
            ledger.record_failure(
                between, "STORE_FULL", retryable=True, actor="run-1", budget=runtime.retry_budget, attempt=None
            )
            == "accepted"
        )
        assert [r.run_key for r in _tick(instance).run_requests] == [request.run_key]  # its run may still retry it
        with ledger.writing() as conn:
            conn.execute(
                ledger.jobs.update()
                .where(ledger.jobs.c.job_id == between)
                .values(updated_at=time.time() - runtime.settings.lease_seconds * IDLE_LEASES - 1)
            )
        assert sorted(r.run_key for r in _tick(instance).run_requests) == sorted(
            [request.run_key, f"retry.{between}.1"]
        )
    lost = [e for e in ledger.events_of_type(EventType.JOB_ACCEPTED) if e["details"].get("reason") == "WORKER_LOST"]
    assert [e["details"]["job_id"] for e in lost] == [job_id] and "next_attempt_at" in lost[0]["details"]
    assert ledger.verify_chain() > 0


def _job_of(ledger, period: str) -> Job | None:
    found = [
        job
        for job in ledger.jobs_in(*states.CLOSED, states.ACCEPTED, states.RUNNING, states.SUCCEEDED)
        if (job.tenant, job.period, job.fidelity) == (TENANT, period, "archive")
    ]
    return found[0] if found else None


def _in_retry_wait(ledger, period: str) -> Job | None:
    job = _job_of(ledger, period)
    return job if job and job.state == states.ACCEPTED and job.next_attempt_at else None


@pytest.mark.slow
def test_an_archive_outage_longer_than_the_in_run_retries_is_retried_by_the_daemon_until_published_or_dead(tmp_path):
    outage = tmp_path / "archive-outage"
    env = {
        "EVIDENCE_HOME": str(tmp_path / "home"),
        "EVIDENCE_WORKERS": "1",
        "EVIDENCE_IO_FAULT": "archive_write:ENOSPC",
        "EVIDENCE_IO_FAULT_WHILE": str(outage),
        # A run's 4 tries leave the job in retry_wait (0.5 s doubled per failed try: 4 s); the budget's time is
        # spent at once, so its 5th failed try makes it dead.
        "EVIDENCE_MAX_ATTEMPTS": "5",
        "EVIDENCE_RETRY_BUDGET_SECONDS": "0.001",
        "EVIDENCE_RETRY_DELAY_SECONDS": "0.5",
    }
    ends, never_ends = "2026-01", "2026-02"
    with one_tenant_site(tmp_path, env, TENANT, [ends, never_ends]) as (runtime, instance, url):
        ledger = runtime.ledger
        runtime.keys.keyrings()  # the public keys are in the archive before it fails
        outage.touch()
        launch_backfill(url, f"{ends}-01|{TENANT}")
        waiting = wait_for(lambda: _in_retry_wait(ledger, ends), "retry_wait after the in-run retries")
        outage.unlink()  # the outage ends while the job waits
        published = wait_for(
            lambda: (j := _job_of(ledger, ends)).state == states.SUCCEEDED and j, "the retry's publication"
        )

        outage.touch()  # an outage that never ends
        launch_backfill(url, f"{never_ends}-01|{TENANT}")
        doomed = wait_for(lambda: _in_retry_wait(ledger, never_ends), "retry_wait of the second month")
        dead = wait_for(lambda: (j := _job_of(ledger, never_ends)).state == states.DEAD and j, "the spent budget")
        retry_runs = {
            job_id: wait_for(
                lambda job_id=job_id: [
                    r for r in instance.get_runs(RunsFilter(tags={RETRY_TAG: job_id})) if r.is_finished
                ],
                f"the end of the retry run of {job_id[:12]}",
            )
            for job_id in (published.job_id, dead.job_id)
        }

    assert (waiting.attempts, waiting.last_reason) == (4, "STORE_FULL")  # Dagster's in-run tries were spent
    assert (doomed.attempts, doomed.last_reason) == (4, "STORE_FULL")
    assert (published.attempts, dead.attempts, dead.last_reason) == (5, 5, "STORE_FULL")
    assert [r.status for r in retry_runs[published.job_id]] == [DagsterRunStatus.SUCCESS]
    assert [r.status for r in retry_runs[dead.job_id]] == [DagsterRunStatus.FAILURE]
    assert [e["period"] for e in ledger.events_of_type(EventType.BUNDLE_PUBLISHED)] == [ends]
    waits = [e for e in ledger.events_of_type(EventType.JOB_ACCEPTED) if "next_attempt_at" in e["details"]]
    assert [(e["period"], e["details"]["attempt"]) for e in waits] == [(ends, 4), (never_ends, 4)]
    [letter] = dead_letters(runtime)
    assert (letter["job_id"], letter["kind"], letter["state"], letter["reason"]) == (
        dead.job_id,
        "tenant-month",
        "dead",
        "STORE_FULL",
    )
