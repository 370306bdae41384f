"""Job state machine: compare-and-swap transitions, fenced leases, retry budgets, replay."""

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import select

from evidence_pipeline.actors.roles import Action
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.ledger.jobs import JobKey, RetryBudget
from evidence_pipeline.ledger.rows import Job
from evidence_pipeline.operations.replay import replay_job
from evidence_pipeline_tests.support import jobs
from evidence_pipeline_tests.support.fixture_sources import SMALL
from evidence_pipeline_tests.support.jobs import KEY, code
from evidence_pipeline_tests.support.signers import Signers

ledger = jobs.ledger  # the fixture: a ledger on the backend with KEY accepted
ROW = {
    "identity": "f" * 64,
    "tenant": SMALL.tenant,
    "period": SMALL.period,
    "bundle_key": "bundles/x",
    "source_sha256": "a" * 64,
    "unsigned_sha256": "2" * 64,
    "report_sha256": "3" * 64,
    "statement_sha256": "4" * 64,
    "renderer_version": "renderer/1",
    "key_id": "k",
}


def test_accept_is_idempotent_and_identity_is_deterministic(ledger):
    assert ledger.accept_job(KEY, "again").job_id == KEY.job_id == JobKey(**KEY.__dict__).job_id
    assert JobKey(**(KEY.__dict__ | {"fidelity": "preview"})).job_id != KEY.job_id
    assert ledger.job(KEY.job_id).state == "accepted" and ledger.verify_chain() == 1


def test_tokens_grow_and_a_live_lease_excludes_others(ledger):
    first = ledger.acquire_lease(KEY.job_id, "run-a", 60)
    assert code(lambda: ledger.acquire_lease(KEY.job_id, "run-b", 60)) == "LEASE_BUSY"
    renewed = ledger.renew_lease(first, 60)
    assert renewed.token == first.token == 1 and ledger.lease_is_live(KEY.job_id, 1)


def test_a_lease_that_expired_while_working_cannot_commit(ledger):
    stale = ledger.acquire_lease(KEY.job_id, "run-a", 0.2)
    time.sleep(0.3)
    assert code(lambda: ledger.publish(ROW, stale, "run-a")) == "LEASE_FENCED"  # expired, even if nobody took over
    fresh = ledger.acquire_lease(KEY.job_id, "run-b", 60)
    assert fresh.token == stale.token + 1
    assert code(lambda: ledger.renew_lease(stale, 60)) == "LEASE_FENCED"
    committed, created = ledger.publish(ROW, fresh, "run-b")
    assert created and ledger.job(KEY.job_id).state == "succeeded"
    assert ledger.publish(ROW, stale, "run-a") == (committed, False)  # the zombie converges, changes nothing
    assert ledger.acquire_lease(KEY.job_id, "run-c", 60) is None  # succeeded: nothing left to do


class Renewals:
    """Counts the heartbeat's renewals (failing the first ``outages`` of them with LEDGER_UNAVAILABLE), so that a
    test waits for beats rather than for the clock: a loaded machine delays beats, it does not remove them."""

    def __init__(self, ledger, monkeypatch, outages=0):
        self.renew, self.outages, self.failed, self.renewed = ledger.renew_lease, outages, [], threading.Semaphore(0)
        monkeypatch.setattr(ledger, "renew_lease", self)

    def __call__(self, lease, ttl_seconds):
        if len(self.failed) < self.outages:
            self.failed.append(lease.token)
            raise EvidenceError(ReasonCode.LEDGER_UNAVAILABLE, "ledger database unavailable (OperationalError)")
        renewed = self.renew(lease, ttl_seconds)
        self.renewed.release()
        return renewed

    def wait(self, count):
        return all(self.renewed.acquire(timeout=30) for _ in range(count))


def test_a_heartbeat_keeps_a_working_attempts_lease(ledger, monkeypatch):
    renewals = Renewals(ledger, monkeypatch)
    lease = ledger.acquire_lease(KEY.job_id, "run-a", 3)
    with ledger.keep_alive(lease, 3):
        assert renewals.wait(4)  # four beats of a third each: the work outlived the lease's first lifetime
        assert code(lambda: ledger.acquire_lease(KEY.job_id, "run-b", 60)) == "LEASE_BUSY"
    assert ledger.publish(ROW, lease, "run-a")[1]


def test_a_heartbeat_outlives_a_renewal_the_database_could_not_take(ledger, monkeypatch):
    renewals = Renewals(ledger, monkeypatch, outages=1)
    lease = ledger.acquire_lease(KEY.job_id, "run-a", 60)
    with ledger.keep_alive(lease, 0.3):  # a beat every 0.1 s; the lease itself cannot expire during the test
        assert renewals.wait(2), "the heartbeat stopped at the failed renewal"
    assert renewals.failed == [lease.token]  # and the renewals after it found the lease still the attempt's


def test_racing_acquisitions_have_one_winner(ledger):
    def acquire(i):
        try:
            return ledger.acquire_lease(KEY.job_id, f"run-{i}", 60).token
        except EvidenceError as error:
            return error.code

    results = list(ThreadPoolExecutor(6).map(acquire, range(12)))
    assert results.count(1) == 1 and set(results) == {1, "LEASE_BUSY"}


def test_failures_follow_the_retry_budget_and_replay_reopens(ledger, tmp_path):
    signers = Signers(ledger, tmp_path / "actors")
    signers.register("alice", ["operator"])

    def replay(actor: str, reason: str) -> Job:
        return replay_job(
            signers.gate, signers.sign(actor, Action.JOB_REPLAY, {"job_id": KEY.job_id, "reason": reason})
        )

    budget = RetryBudget(max_attempts=2, max_elapsed_seconds=0.0)  # the time budget is spent: attempts decide
    lease = ledger.acquire_lease(KEY.job_id, "run-a", 60)
    assert _failed(ledger, "STORE_UNAVAILABLE", attempt=1, budget=budget, token=lease.token) == "accepted"
    lease = ledger.acquire_lease(KEY.job_id, "run-a", 60)
    assert _failed(ledger, "STORE_UNAVAILABLE", attempt=2, budget=budget, token=lease.token) == "dead"
    assert [j.job_id for j in ledger.jobs_in("dead")] == [KEY.job_id]
    assert code(lambda: ledger.acquire_lease(KEY.job_id, "run-b", 60)) == "JOB_CLOSED"
    reopened = replay("alice", "S3 outage over")
    assert reopened.state == "accepted" and reopened.attempts == 0  # a fresh budget; history keeps the rest
    lease = ledger.acquire_lease(KEY.job_id, "run-b", 60)
    assert (
        _failed(ledger, "STORE_UNAVAILABLE", attempt=1, budget=budget, token=lease.token, actor="run-b") == "accepted"
    )
    replayed = [e for e in _events(ledger) if e["event_type"] == "job.replayed"]
    assert replayed[0]["actor"] == "alice" and replayed[0]["details"]["reason"] == "S3 outage over"
    assert code(lambda: replay("olga", "again")) == "JOB_CLOSED"


def test_failures_of_other_attempts_do_not_move_a_leased_job(ledger):
    """A duplicate run that meets a live lease, or a zombie whose lease was taken over, cannot clobber the job."""
    stale = ledger.acquire_lease(KEY.job_id, "run-a", 0.1)
    time.sleep(0.2)
    live = ledger.acquire_lease(KEY.job_id, "run-b", 60)
    for reason, retryable, token in [
        ("LEASE_BUSY", True, None),
        ("LEASE_FENCED", False, stale.token),
        ("STORE_UNAVAILABLE", True, stale.token),
        ("SOURCE_INVALID", False, None),
    ]:
        assert _failed(ledger, reason, attempt=1, retryable=retryable, actor="other", token=token) is None
    job = ledger.job(KEY.job_id)
    assert (job.state, job.lease_token) == ("running", live.token) and ledger.lease_is_live(KEY.job_id, live.token)
    assert ledger.publish(ROW, live, "run-b")[1]


def test_terminal_failure_rejects_at_once(ledger):
    assert _failed(ledger, "SOURCE_INVALID", attempt=1, retryable=False) == "rejected"
    assert ledger.job(KEY.job_id).last_reason == "SOURCE_INVALID"


def test_a_burst_of_transient_failures_cannot_spend_the_budget(ledger):
    """One invocation that retries quickly (the op policy's burst, a demo on a full disk) must leave the job
    retryable: the budget is spent only over EVIDENCE_RETRY_BUDGET_SECONDS."""
    budget = RetryBudget(max_attempts=2, max_elapsed_seconds=3600)
    for attempt in range(1, 6):
        lease = ledger.acquire_lease(KEY.job_id, "run-a", 60)
        assert _failed(ledger, "STORE_FULL", attempt=attempt, budget=budget, token=lease.token) == "accepted"


def test_time_alone_does_not_make_a_job_dead(ledger):
    """A job accepted long ago that fails once has not been retried at all: it is not dead yet."""
    budget = RetryBudget(max_attempts=2, max_elapsed_seconds=0.0)
    assert _failed(ledger, "STORE_UNAVAILABLE", attempt=1, budget=budget) == "accepted"
    assert _failed(ledger, "STORE_UNAVAILABLE", attempt=2, budget=budget) == "dead"


def _failed(
    ledger, reason: str, *, attempt: int, budget=RetryBudget(), token=None, retryable=True, actor="run-a"
) -> str | None:
    """KEY's attempt ``attempt`` failed with ``reason`` (under lease ``token``): the job's new state."""
    return ledger.record_failure(
        KEY.job_id, reason, retryable=retryable, actor=actor, budget=budget, attempt=attempt, lease_token=token
    )


def _events(ledger):
    with ledger.engine.connect() as conn:
        return [
            json.loads(row.body)
            for row in conn.execute(select(ledger.audit_events).order_by(ledger.audit_events.c.seq))
        ]
