"""The rows the ledger hands out: frozen dataclasses, each built from a SQLAlchemy row in one place (``of``), read
by attribute, and turned into JSON by ``to_json`` where a caller serialises one (the same keys the row's columns
have, so the shapes the API and the CLI print are the columns as before).

A row is what the ledger read in one transaction: it is never written back (every write is a compare-and-swap
on what was read, jobs.py)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar, Self

from sqlalchemy import Row


class _Row:
    """What every row type shares: built from the columns it names, and its JSON."""

    __dataclass_fields__: ClassVar[dict[str, Any]]

    @classmethod
    def of(cls, row: Row[Any]) -> Self:
        """The row a query read (the columns the type does not name are not read)."""
        columns = row._mapping
        return cls(**{field.name: columns[field.name] for field in fields(cls)})

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Job(_Row):
    """An `evidence_jobs` row: a job's identity, its state and its current attempt's lease (jobs.py)."""

    job_id: str
    tenant: str
    period: str
    source_sha256: str
    renderer_version: str
    policy_version: str
    fidelity: str
    state: str
    attempts: int
    lease_token: int
    lease_owner: str | None
    lease_expires_at: float | None
    budget_started_at: float
    last_reason: str | None
    created_at: float
    updated_at: float
    next_attempt_at: float | None
    last_message: str | None
    attempt_id: str | None  # None: the job's first attempt, whose id is the job's (current_attempt_id)
    replay_of: str | None

    @property
    def current_attempt_id(self) -> str:
        """The id of the job's current attempt: its first attempt's is the job id; a replay's is its own."""
        return self.attempt_id or self.job_id


@dataclass(frozen=True)
class ListedJob(Job):
    """A job as ``listed_jobs`` finds it: with its document operation (None for a tenant-month job)."""

    operation: str | None


@dataclass(frozen=True)
class JobAttempt(_Row):
    """One attempt of a job (``job_attempts``): an ended one a replay kept (`evidence_job_attempts`) or the
    current one, read from the job's row; ``ended_at`` is None while it has not ended."""

    attempt_id: str
    replay_of: str | None
    state: str
    reason: str | None
    message: str | None
    tries: int
    policy_version: str
    opened_at: float
    ended_at: float | None
