"""Webhook delivery across a real restart (issue 31): the deliverer runs in processes of its own (`evidence webhook
deliver`, the work webhook_delivery_sensor does on each tick), one is killed while a receiver on 127.0.0.1 (which
verifies with the Standard Webhooks library and fails each message twice first) holds its answer, and the next
ones finish: the receiver gets every event exactly once, the killed attempt's message again with the same
`webhook-id` (at least once, deduplicated by the receiver), and the ledger records three attempts at each."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
from sqlalchemy import select

from evidence_pipeline.config import Settings
from evidence_pipeline.ledger import Ledger
from evidence_pipeline.ledger.outbox import outbox
from evidence_pipeline_tests.support.pieces import pieces_of
from evidence_pipeline_tests.support.webhook_receiver import Receiver
from evidence_pipeline_tests.support.webhooks import EXPECTED, TENANT, end_jobs_of_every_kind, subscribe

EVIDENCE = [sys.executable, "-c", "from evidence_pipeline.cli import main; main()"]
TIMEOUT_SECONDS = 3  # of an attempt: a claim lasts four times it, the wait for the killed attempt's message


@pytest.fixture
def hook():
    receiver = Receiver(fail_first=2)
    yield receiver
    receiver.close()


def test_a_deliverer_process_killed_mid_delivery_and_restarted_sends_each_event_exactly_once(backend, hook):
    env = backend | {
        "EVIDENCE_WEBHOOK_RETRY_SECONDS": "0.2",
        "EVIDENCE_WEBHOOK_RETRY_MAX_SECONDS": "0.4",
        "EVIDENCE_WEBHOOK_TIMEOUT_SECONDS": str(TIMEOUT_SECONDS),
    }
    settings = Settings.from_env(env)
    ledger = Ledger(settings.ledger_url)
    hook.secrets.append(subscribe(ledger, settings, hook.url)["secret"])
    end_jobs_of_every_kind(ledger)
    expected = {row.delivery_id for row in pieces_of(ledger).outbox.deliveries(TENANT)}
    processes: list[subprocess.Popen] = []
    killed: list[str] = []

    def kill_the_deliverer(message_id: str) -> None:
        """The first message accepted: its deliverer sent it and waits for the answer; it dies before hearing it."""
        if killed:
            return
        pid = processes[-1].pid
        os.kill(pid, signal.SIGKILL)
        try:
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # dead (not reaped: the test's wait reaps it)
        except ChildProcessError:
            pass  # reaped already
        killed.append(message_id)

    hook.before_accepting = kill_the_deliverer
    child_env = {k: v for k, v in os.environ.items() if not k.startswith(("EVIDENCE_", "DAGSTER_"))} | env
    deadline = time.monotonic() + 600
    while pieces_of(ledger).outbox.deliveries(TENANT, ("pending",)):
        assert time.monotonic() < deadline, f"still pending after {len(processes)} deliverers"
        _wait_until_one_is_due(ledger)
        processes.append(
            subprocess.Popen(
                [*EVIDENCE, "webhook", "deliver", "--json"],
                env=child_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
        _, stderr = processes[-1].communicate(timeout=300)
        assert processes[-1].returncode in (0, -signal.SIGKILL), stderr

    assert [process.returncode for process in processes].count(-signal.SIGKILL) == 1 and len(processes) >= 2
    assert sorted(message_id for message_id, _ in hook.accepted) == sorted(expected)  # each event exactly once
    assert Counter(body["type"] for _, body in hook.accepted) == EXPECTED and hook.refused == 0
    assert hook.duplicates == Counter({killed[0]: 1})  # sent again after the restart, with the same webhook-id
    assert hook.attempts[killed[0]] == 4 and {hook.attempts[i] for i in expected - set(killed)} == {3}
    rows = pieces_of(ledger).outbox.deliveries(TENANT)
    # the killed attempt was never recorded: two failures and the restarted deliverer's success, for every event
    assert {(row.state, row.attempts, row.last_status) for row in rows} == {("delivered", 3, 204)}


def _wait_until_one_is_due(ledger: Ledger) -> None:
    """Until a pending delivery's retry is due and no deliverer's claim holds it (the killed one's expires)."""
    o = outbox.c
    with ledger.engine.connect() as conn:
        rows = conn.execute(select(o.next_attempt_at, o.claimed_until).where(o.state == "pending")).all()
    if rows:
        due = min(max(next_at, claimed or 0.0) for next_at, claimed in rows)
        time.sleep(max(0.0, min(due - time.time(), 4 * TIMEOUT_SECONDS)) + 0.05)
