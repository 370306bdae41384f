"""Poison input always ends: every failure of a document job counts against its budget, classified or not, and a
processor runs in a worker process of its own under memory and wall-time limits (issue 28)."""

from __future__ import annotations

import os
import time

import pytest
from click.testing import CliRunner

from evidence_pipeline.cli import main
from evidence_pipeline_tests.support import poison_operation
from evidence_pipeline_tests.support.document_jobs import dispatch, make_due
from evidence_pipeline_tests.support.intake_server import client, intake_environment, pdf_bytes, submit, tokens, upload

# Two failed attempts spend the budget (its time part is spent at once); the limits are small enough to reach.
INTAKE_OVERRIDES = {
    "EVIDENCE_MAX_ATTEMPTS": "2",
    "EVIDENCE_RETRY_BUDGET_SECONDS": "0.001",
    "EVIDENCE_PROCESSOR_MEMORY_MB": "256",
    "EVIDENCE_PROCESSOR_SECONDS": "5",
}


def poison_job(documents, intake, trigger: str) -> str:
    acme, _ = tokens(documents)
    with client(intake, acme) as http:
        document_id = upload(http, pdf_bytes()).json()["document_id"]
        body = {"operation": "test-poison", "inputs": [document_id], "options": {"trigger": trigger}}
        return submit(http, trigger, body).json()["job_id"]


def failure_events(documents, job_id: str) -> list[dict]:
    ledger = documents.ledger
    return [
        event["details"]
        for kind in ("job.accepted", "job.dead")
        for event in ledger.events_of_type(kind)
        if event["details"]["job_id"] == job_id and "reason" in event["details"]
    ]


def dead_letters(backend) -> str:
    result = CliRunner().invoke(main, ["dead-letter", "list"], env=intake_environment(backend) | INTAKE_OVERRIDES)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize(
    "trigger, code",
    [
        ("oserror", "PROCESSOR_FAILED"),  # an I/O error: another attempt may succeed
        ("memory", "PROCESSOR_RESOURCE_EXHAUSTED"),  # the worker process reaches its memory limit
        ("abort", "PROCESSOR_FAILED"),  # a C-level abort kills the worker process, not the run
    ],
)
def test_a_processor_failure_counts_against_the_budget_until_the_job_is_dead(documents, intake, backend, trigger, code):
    job_id = poison_job(documents, intake, trigger)
    [first] = dispatch(documents)
    assert (first.job_id, first.state, first.reason) == (job_id, "accepted", code)  # retry_wait, budget left
    assert documents.document_jobs.job("acme", job_id).state == "accepted"
    make_due(documents, job_id)
    [second] = dispatch(documents, "run-2")
    assert (second.state, second.reason) == ("dead", code)
    assert dispatch(documents, "run-3") == []  # no page is dispatched again for a job whose budget is spent
    job = documents.document_jobs.job("acme", job_id)
    assert (job.state, job.attempts, job.last_reason) == ("dead", 2, code) and job.finished_at
    assert [(e["reason"], e["attempt"]) for e in failure_events(documents, job_id)] == [(code, 1), (code, 2)]
    listed = dead_letters(backend)
    assert job_id in listed and f"reason={code}" in listed
    message = documents.document_jobs.job("acme", job_id).last_message
    assert message and f"message={message}" in listed and failure_events(documents, job_id)[-1]["message"] == message
    assert poison_operation.PLANTED not in listed + message  # the exception's text never leaves the worker
    assert documents.ledger.events_of_type("document.published") == []


def test_an_unclassified_exception_on_the_documents_bytes_ends_the_job_at_once(documents, intake, backend):
    job_id = poison_job(documents, intake, "raise")
    [outcome] = dispatch(documents)
    assert (outcome.job_id, outcome.state, outcome.reason) == (job_id, "rejected", "PROCESSOR_INPUT_FAILED")
    job = documents.document_jobs.job("acme", job_id)
    assert (job.state, job.attempts, job.next_attempt_at) == ("rejected", 1, None)  # no budget spent
    assert dispatch(documents, "run-2") == []
    listed = dead_letters(backend)  # the service's failure, not a decision about the input: an operator's to see
    assert job_id in listed and "reason=PROCESSOR_INPUT_FAILED" in listed and "KeyError" in job.last_message
    assert poison_operation.PLANTED not in listed + job.last_message


def test_a_processor_past_its_wall_time_is_killed_and_the_job_retried(documents, intake):
    job_id = poison_job(documents, intake, "hang")
    [outcome] = dispatch(documents)
    assert (outcome.job_id, outcome.state, outcome.reason) == (job_id, "accepted", "PROCESSOR_TIMED_OUT")


def test_the_processor_runs_in_a_process_of_its_own_holding_no_ledger_lock(documents, intake, monkeypatch):
    monkeypatch.setattr(poison_operation, "LEDGER_URL", documents.settings.ledger_url)
    job_id = poison_job(documents, intake, "probe")
    [outcome] = dispatch(documents)
    assert (outcome.job_id, outcome.state) == (job_id, "succeeded")
    findings = documents.document_jobs.job("acme", job_id).outputs["summary"]
    assert findings["pid"] != os.getpid()  # the heartbeat thread in this process cannot be starved by it
    assert findings["ledger_lockable"] is True  # no transaction of ours is open while it works


def test_a_worker_that_died_holding_the_lease_is_recognised_and_the_job_ends_dead(documents, intake, backend):
    job_id = poison_job(documents, intake, "probe")
    ledger = documents.ledger
    documents.pages.assign_pages(10)
    for attempt in (1, 2):
        # What a run SIGKILLed (or OOM-killed) mid-job leaves: a lease taken, its attempt counted, nothing recorded.
        ledger.acquire_lease(job_id, f"doomed-{attempt}", 0.05)
        time.sleep(0.1)
        [outcome] = dispatch(documents, f"run-{attempt}")
        assert (outcome.job_id, outcome.reason) == (job_id, "WORKER_LOST")
        assert outcome.state == ("accepted" if attempt == 1 else "dead")
        make_due(documents, job_id)
    assert dispatch(documents, "run-3") == [] and documents.pages.open_pages() == []
    job = documents.document_jobs.job("acme", job_id)
    assert (job.state, job.attempts, job.last_reason) == ("dead", 2, "WORKER_LOST")
    assert [(e["reason"], e["attempt"]) for e in failure_events(documents, job_id)] == [
        ("WORKER_LOST", 1),
        ("WORKER_LOST", 2),
    ]
    assert f"{job_id}  dead" in dead_letters(backend)


def test_the_dispatcher_records_a_dead_attempt_before_paging(documents, intake):
    """The sweep the dispatch sensor runs first: a page whose job's run died is not dispatched again while the job
    waits in retry_wait, and never once its budget is spent."""
    job_id = poison_job(documents, intake, "probe")
    ledger = documents.ledger
    documents.pages.assign_pages(10)
    ledger.acquire_lease(job_id, "doomed", 0.05)
    time.sleep(0.1)
    assert documents.pages.record_lost_attempts(documents.retry_wait_budget, "sensor") == [(job_id, "accepted")]
    assert documents.pages.open_pages() == []  # retry_wait: not due yet
    make_due(documents, job_id)
    assert len(documents.pages.open_pages()) == 1
    ledger.acquire_lease(job_id, "doomed-again", 0.05)
    time.sleep(0.1)
    assert documents.pages.record_lost_attempts(documents.retry_wait_budget, "sensor") == [(job_id, "dead")]
    assert documents.pages.open_pages() == []
    assert documents.document_jobs.job("acme", job_id).finished_at is not None
