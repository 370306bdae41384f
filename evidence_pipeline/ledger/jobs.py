"""Job records: the application-owned state of one tenant-month identity.

    accepted --lease--> running --commit--> succeeded
       ^                   |  \\--terminal failure--> rejected
       |                   \\--transient failure, budget left--> accepted (retried)
       |                        transient failure, budget spent (attempts AND time)--> dead
       +----- replay (who, why) ------ rejected | dead

Every transition is one compare-and-swap UPDATE. Leases carry a token that only grows; the commit that makes a
bundle visible succeeds only while the committing attempt still holds the newest, unexpired lease.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

ACCEPTED, RUNNING, SUCCEEDED, REJECTED, DEAD = "accepted", "running", "succeeded", "rejected", "dead"
CLOSED = (REJECTED, DEAD)


@dataclass(frozen=True)
class JobKey:
    tenant: str
    period: str
    source_sha256: str
    renderer_version: str
    policy_version: str
    fidelity: str = "archive"

    @property
    def job_id(self) -> str:
        fields = json.dumps(self.__dict__, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(fields).hexdigest()


@dataclass(frozen=True)
class Lease:
    job_id: str
    token: int
    owner: str
    expires_at: float


@dataclass(frozen=True)
class RetryBudget:
    """Transient failures are retried until both are spent: ``max_attempts`` failed attempts, and
    ``max_elapsed_seconds`` since acceptance (or the last replay). Then the job is dead.

    Both, so the budget is spent over time: a quick burst of retries (one run's op retries, one demo on a full
    disk) cannot kill a job before the outage had time to end, and a job accepted long ago that fails once has
    still been tried only once.
    """

    max_attempts: int = 4
    max_elapsed_seconds: float = 900.0

    def exhausted(self, attempts: int, elapsed_seconds: float) -> bool:
        return attempts >= self.max_attempts and elapsed_seconds >= self.max_elapsed_seconds
