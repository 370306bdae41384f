"""A ledger with a signer's key accepted, and jobs on it."""

from __future__ import annotations

import pytest

from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.ledger import Ledger
from evidence_pipeline.ledger.jobs import JobKey, RetryBudget
from evidence_pipeline_tests.support.fixture_sources import SMALL

KEY = JobKey(SMALL.tenant, SMALL.period, "a" * 64, "renderer/1", "policy/1")


@pytest.fixture
def ledger(backend, tmp_path):
    ledger = Ledger(backend.get("EVIDENCE_LEDGER_URL", f"sqlite:///{tmp_path / 'ledger.sqlite'}"))
    ledger.accept_job(KEY, "pin")
    return ledger


def code(call) -> str:
    with pytest.raises(EvidenceError) as error:
        call()
    return error.value.code


ONE_TRY = RetryBudget(max_attempts=1, max_elapsed_seconds=0.0)  # the first transient failure makes a job dead


def fail(ledger: Ledger, key: JobKey, reason: str = "STORE_UNAVAILABLE", retryable: bool = True) -> str:
    lease = ledger.acquire_lease(key.job_id, "run-a", 60)
    return ledger.record_failure(
        key.job_id,
        reason,
        retryable=retryable,
        actor="run-a",
        budget=ONE_TRY,
        attempt=1,
        lease_token=lease.token,
        message=f"{reason} seen",
    )
