"""Lease liveness, defined once (ledger/job_states.py): the Python check and the SQL clauses agree at the expiry
instant on both backends, and the fenced UPDATE refuses a commit at that instant."""

import pytest
from sqlalchemy import select

from evidence_pipeline.ledger import Ledger
from evidence_pipeline.ledger.job_states import lease_expired_clause, lease_live, lease_live_clause
from evidence_pipeline.ledger.jobs import JobKey
from evidence_pipeline_tests.support.fixture_sources import SMALL

KEY = JobKey(SMALL.tenant, SMALL.period, "a" * 64, "renderer/1", "policy/1")
EXPIRES = 1_900_000_000.25  # exactly representable, so the database compares the very instant


def test_a_lease_is_live_strictly_before_its_expiry_instant():
    assert lease_live(EXPIRES, EXPIRES - 0.25)
    assert not lease_live(EXPIRES, EXPIRES)
    assert not lease_live(EXPIRES, EXPIRES + 0.25)
    assert not lease_live(None, 0.0)


@pytest.fixture
def leased(backend, tmp_path):
    """A ledger with one running job whose lease expires at EXPIRES."""
    ledger = Ledger(backend.get("EVIDENCE_LEDGER_URL", f"sqlite:///{tmp_path / 'ledger.sqlite'}"))
    ledger.accept_job(KEY, "pin")
    lease = ledger.acquire_lease(KEY.job_id, "run-a", 60)
    with ledger.writing() as conn:
        conn.execute(ledger.jobs.update().where(ledger.jobs.c.job_id == KEY.job_id).values(lease_expires_at=EXPIRES))
    return ledger, lease


@pytest.mark.parametrize("now", [EXPIRES - 0.25, EXPIRES, EXPIRES + 0.25])
def test_the_sql_clauses_say_what_the_python_check_says(leased, now):
    ledger, _ = leased
    jobs = ledger.jobs.c
    with ledger.engine.connect() as conn:
        live = conn.execute(select(jobs.job_id).where(lease_live_clause(jobs.lease_expires_at, now))).all()
        expired = conn.execute(select(jobs.job_id).where(lease_expired_clause(jobs.lease_expires_at, now))).all()
    assert bool(live) == lease_live(EXPIRES, now) != bool(expired)


def test_the_fence_refuses_a_commit_at_the_expiry_instant(leased):
    """The UPDATE every fenced transition runs (jobs.py ``_update_held``), at the instant the lease expires: the
    attempt no longer holds it, as a takeover at that instant (acquire_lease) already sees it free."""
    ledger, lease = leased
    fence = {"held_job_id": lease.job_id, "held_token": lease.token, "updated_at": EXPIRES}
    with ledger.writing() as conn:
        assert conn.execute(ledger._held_update, fence | {"held_now": EXPIRES - 0.25}).rowcount == 1
        assert conn.execute(ledger._held_update, fence | {"held_now": EXPIRES}).rowcount == 0
