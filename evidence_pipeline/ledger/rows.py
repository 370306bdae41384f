"""The rows the ledger hands out: frozen dataclasses, each built from a SQLAlchemy row in one place (``of``) and
read by attribute. What the API and the CLI print of one is built field by field where it is printed (a job's
status, a dead letter, a replay), so a column added to a table changes no output.

A row is what the ledger read in one transaction: it is never written back (every write is a compare-and-swap
on what was read, jobs.py)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Self

from sqlalchemy import Row


class _Row:
    """What every row type shares: it is built from the columns it names."""

    __dataclass_fields__: ClassVar[dict[str, Any]]

    @classmethod
    def of(cls, row: Row[Any]) -> Self:
        """The row a query read (the columns the type does not name are not read)."""
        return cls._of(row._mapping)

    @classmethod
    def _of(cls, columns: Mapping[Any, Any]) -> Self:
        return cls(**{field.name: columns[field.name] for field in fields(cls)})


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


@dataclass(frozen=True)
class DocumentJob(_Row):
    """A document job (document_jobs.py): its `evidence_document_jobs` row, its request and outputs decoded, with
    its `evidence_jobs` state."""

    job_id: str
    tenant: str
    batch_id: str  # "" for a job asked for on its own
    idempotency_key: str
    request_sha256: str
    operation: str
    request: dict[str, Any]  # inputs and options (and what the operation pinned at acceptance)
    accepted_at: float
    started_at: float | None
    finished_at: float | None
    page_id: str | None
    outputs: dict[str, Any] | None  # once committed
    state: str
    attempts: int
    last_reason: str | None
    last_message: str | None
    period: str
    lease_token: int
    policy_version: str
    next_attempt_at: float | None

    @classmethod
    def of(cls, row: Row[Any]) -> Self:
        columns = row._mapping
        outputs = columns["outputs"]
        return cls._of(
            {**columns, "request": json.loads(columns["request"]), "outputs": json.loads(outputs) if outputs else None}
        )


@dataclass(frozen=True)
class PublicationRecord(_Row):
    """An `evidence_publications` row: a committed bundle, a projection of its `bundle.published` event (at
    ``event_seq``)."""

    identity: str
    tenant: str
    period: str
    bundle_key: str
    source_sha256: str
    unsigned_sha256: str
    report_sha256: str
    statement_sha256: str
    renderer_version: str
    key_id: str
    event_seq: int


@dataclass(frozen=True)
class PublicationClaim(_Row):
    """An `evidence_publication_claims` row: the attempt (job, lease) publishing a tenant-month right now."""

    tenant: str
    period: str
    identity: str
    job_id: str
    lease_token: int
    supersedes: str | None  # the tenant-month's current identity when claimed, if any
    claimed_at: float


# Intake's rows: documents and batches (documents.py, batches.py).


@dataclass(frozen=True)
class Document(_Row):
    """An `evidence_documents` row: an admitted upload, content-addressed per tenant, and its `document.admitted`
    event (at ``event_seq``)."""

    document_id: str
    tenant: str
    sha256: str
    size: int
    media_type: str
    store_key: str  # in the document store
    created_at: float
    event_seq: int


@dataclass(frozen=True)
class Batch(_Row):
    """An `evidence_batches` row: a stored manifest of job specs and how far the dispatcher has turned it into
    child jobs (``dispatched``, in manifest order)."""

    batch_id: str
    tenant: str
    manifest_sha256: str
    store_key: str  # the manifest, in the document store
    jobs: int
    dispatched: int
    state: str  # open, dispatched, cancelled
    created_at: float
    updated_at: float


# The webhook outbox's rows (outbox.py), the tenant registry's listing (tenants.py) and the offboarding record
# (tokens.py). A listing (ListedDelivery, ListedTenant) is already what its command prints: its fields, in order, are
# the keys of `evidence webhook deliveries --json` and `evidence tenant list --json` (test_rows.py holds them).


@dataclass(frozen=True)
class Subscription(_Row):
    """A tenant's webhook (`evidence_webhooks`): where its deliveries go and the secrets that sign them."""

    tenant: str
    url: str
    secret: str
    previous_secret: str | None  # signs beside ``secret`` until ``previous_until`` (a rotation)
    previous_until: float | None
    config_seq: int
    updated_at: float


@dataclass(frozen=True)
class Delivery(_Row):
    """An `evidence_webhook_outbox` row: a delivery as a deliverer claims it and records its attempts."""

    delivery_id: str
    tenant: str
    event_type: str
    event_seq: int
    payload: str
    state: str
    attempts: int
    next_attempt_at: float
    claimed_until: float | None
    last_code: str | None
    last_status: int | None
    created_at: float
    updated_at: float


@dataclass(frozen=True)
class ListedDelivery:
    """A delivery as the listings show it (its times in UTC ISO; ``next_attempt_at`` only while it is pending)."""

    delivery_id: str
    tenant: str
    event_type: str
    event_seq: int
    state: str
    attempts: int
    last_code: str | None
    last_status: int | None
    payload: str
    created_at: str
    next_attempt_at: str | None


@dataclass(frozen=True)
class ListedTenant:
    """A registered tenant as the listing shows it (offboarded ones too): its ledger positions."""

    tenant: str
    registered_at: str  # UTC ISO, to the second
    registered_seq: int
    offboarded_seq: int | None  # None while it is active


@dataclass(frozen=True)
class Offboarding:
    """A tenant's offboarding as its `tenant.offboarded` event records it (the event's body)."""

    event_id: str
    recorded_at: str
    actor: str
    details: dict[str, Any]  # the decision: its request, what it erases and keeps, the tokens it revoked, ...

    @classmethod
    def of_body(cls, body: Mapping[str, Any]) -> Self:
        return cls(body["event_id"], body["recorded_at"], body["actor"], body["details"])
