"""The domain runtime: everything a stage needs (stores, ledger, keys), built once per process from Settings.

The CLI, the Dagster resource, the intake server, the benchmarks and the tests all get their Runtime here
(`runtime_for`), so a process reuses one set of connections and loaded keys per Settings, and a forked worker
builds its own. It is the one door into the ledger: each piece of it (ledger/: tokens, tenants, document jobs,
batches, …) is built here once, over the one core ``Ledger``, and nowhere else (test_layering.py checks it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from cryptography.hazmat.primitives.asymmetric import ed25519

from evidence_pipeline.config import Settings
from evidence_pipeline.ledger import Ledger
from evidence_pipeline.ledger.actors import ActorLedger
from evidence_pipeline.ledger.batches import Batches
from evidence_pipeline.ledger.document_jobs import DocumentJobs
from evidence_pipeline.ledger.documents import DocumentRecords
from evidence_pipeline.ledger.job_states import RetryBudget
from evidence_pipeline.ledger.outbox import Outbox
from evidence_pipeline.ledger.pages import Pages
from evidence_pipeline.ledger.retries import TenantMonthRetries
from evidence_pipeline.ledger.source_events import SourceEvents
from evidence_pipeline.ledger.submissions import Submissions
from evidence_pipeline.ledger.tenants import TenantRegistry
from evidence_pipeline.ledger.tokens import Tokens
from evidence_pipeline.signing.keys import ROOT_KEY, Keyring, load_keyring, load_witness_key
from evidence_pipeline.signing.rotation import KeyDirectory
from evidence_pipeline.store import ArtifactStore
from evidence_pipeline.store.s3 import S3Options
from evidence_pipeline.store.uri import open_store

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


@dataclass
class Runtime:
    """Everything a stage needs, built from Settings."""

    settings: Settings
    sources: ArtifactStore
    staging: ArtifactStore
    previews: ArtifactStore
    archive: ArtifactStore
    ledger: Ledger
    s3: S3Client | None = field(default=None, repr=False)  # the client of this process's s3:// stores, or None

    @classmethod
    def from_settings(cls, settings: Settings, s3_client: S3Client | None = None) -> Runtime:
        """``s3_client`` (a boto3 S3 client) is needed when any store URI is s3://."""
        options = S3Options(
            settings.s3_object_lock_mode,
            settings.s3_object_lock_days,
            settings.s3_server_side_encryption,
            settings.s3_kms_key_id,
        )
        return cls(
            settings=settings,
            sources=open_store(settings.sources_uri, s3_client, options, scheme="sources", private=True),
            staging=open_store(settings.staging_uri, s3_client, S3Options(), scheme="staging", private=True),
            previews=open_store(settings.preview_uri, s3_client, S3Options(), scheme="previews", private=True),
            archive=open_store(settings.archive_uri, s3_client, options),
            ledger=Ledger(settings.ledger_url),
            s3=s3_client,
        )

    @cached_property
    def document_store(self) -> ArtifactStore:
        """Tenants' uploaded documents and their derivatives (private, put-once); opened on first use."""
        settings = self.settings
        # Tenants' documents are encrypted at rest in S3 always; no Object Lock, so retention stays a decision.
        options = S3Options(
            server_side_encryption=settings.s3_server_side_encryption or "AES256", kms_key_id=settings.s3_kms_key_id
        )
        return open_store(settings.documents_uri, self.s3, options, scheme="documents", private=True)

    # The ledger's pieces, each over the one core ``Ledger`` (ask the one that owns what you need).

    @cached_property
    def tenants(self) -> TenantRegistry:
        """The tenant registry."""
        return TenantRegistry(self.ledger)

    @cached_property
    def tokens(self) -> Tokens:
        """API tokens, offboarding records."""
        return Tokens(self.ledger)

    @cached_property
    def actors(self) -> ActorLedger:
        """Registered identities, their keys, roles and used nonces."""
        return ActorLedger(self.ledger)

    @cached_property
    def source_events(self) -> SourceEvents:
        """The `source.published` events of source revisions."""
        return SourceEvents(self.ledger)

    @cached_property
    def retries(self) -> TenantMonthRetries:
        """Tenant-month jobs waiting for a retry run (the monthly transitions themselves are ``ledger``'s)."""
        return TenantMonthRetries(self.ledger)

    @cached_property
    def document_records(self) -> DocumentRecords:
        """Admitted documents, the events that name them."""
        return DocumentRecords(self.ledger)

    @cached_property
    def submissions(self) -> Submissions:
        """Accepting document jobs: idempotency, quotas, backpressure."""
        return Submissions(self.ledger)

    @cached_property
    def document_jobs(self) -> DocumentJobs:
        """Accepted document jobs: reads, leases, stages, the commit of their outputs."""
        return DocumentJobs(self.ledger)

    @cached_property
    def batches(self) -> Batches:
        """Batches and their dispatch into child jobs."""
        return Batches(self.ledger, self.submissions)

    @cached_property
    def pages(self) -> Pages:
        """Pages of document jobs for the Dagster runs."""
        return Pages(self.ledger, self.document_jobs)

    @cached_property
    def outbox(self) -> Outbox:
        """Webhook subscriptions and the deliveries announced with events."""
        return Outbox(self.ledger)

    @property
    def retry_budget(self) -> RetryBudget:
        return RetryBudget(self.settings.max_attempts, self.settings.retry_budget_seconds)

    @property
    def retry_wait_budget(self) -> RetryBudget:
        """The budget of jobs retried by a later run: a retry waits in retry_wait (next_attempt_at) before it is
        dispatched. Document jobs, and tenant-month jobs once their run's in-run retries are spent."""
        settings = self.settings
        return RetryBudget(settings.max_attempts, settings.retry_budget_seconds, settings.retry_delay_seconds)

    @cached_property
    def keys(self) -> KeyDirectory:
        """The keys directory: which generation of signing keys is active is re-read per use (signing/rotation.py).
        Its public keys are published on first use; where the trust root's private key is at hand (development
        keys), so is the first keyring document."""
        directory = self.settings.keys_dir
        load_keyring(directory, generate=self.settings.generate_dev_keys)
        keys = KeyDirectory(directory, self.archive)
        if (directory / ROOT_KEY).exists():
            keys.ensure_keyring()
        else:
            keys.keyrings()  # publishes the public keys (and the keyring document, once there is one)
        return keys

    @property
    def keyring(self) -> Keyring:
        """The active generation of signing keys, now (a stat of keyring.json per call: a rotation is seen at once)."""
        return self.keys.active

    @cached_property
    def witness_key(self) -> ed25519.Ed25519PrivateKey | None:
        """The checkpoints' co-signer (EVIDENCE_WITNESS_KEY), or None when no witness is configured."""
        path = self.settings.witness_key
        return None if path is None else load_witness_key(path)


@dataclass(frozen=True)
class RunInfo:
    """Who is acting: the Dagster run id and attempt, or a tool's name."""

    run_id: str
    attempt: int = 1


_runtimes: dict[Settings, Runtime] = {}  # one per process and settings: connections and loaded keys are reused
_MAX_RUNTIMES = 8


def runtime_for(settings: Settings) -> Runtime:
    """This process's Runtime for ``settings``."""
    if settings not in _runtimes:
        if len(_runtimes) >= _MAX_RUNTIMES:
            _runtimes.pop(next(iter(_runtimes))).ledger.engine.dispose()
        _runtimes[settings] = Runtime.from_settings(settings, s3_client(settings) if settings.uses_s3 else None)
    return _runtimes[settings]


def s3_client(settings: Settings) -> S3Client:
    """A boto3 S3 client for the configured endpoint and region (as dagster-aws's S3Resource builds one: standard
    retries, 5 attempts), each store call through it ended by EVIDENCE_S3_DEADLINE_SECONDS; credentials come from
    the standard AWS environment/chain."""
    import boto3  # only when a store is on S3
    from botocore.config import Config

    from evidence_pipeline.store import s3_deadline

    client: S3Client = boto3.session.Session().client(
        "s3",
        endpoint_url=settings.s3_endpoint_url,
        region_name=settings.s3_region,
        config=Config(retries={"max_attempts": 5, "mode": "standard"}),
    )
    s3_deadline.install(client, settings.s3_deadline_seconds)  # botocore's timeouts are per read, not per call
    return client


_inherited: list[Runtime] = []


def _forget_runtimes_in_forked_child() -> None:
    """A forked worker (parallel.map_stage) builds its own Runtime and must neither use nor close its parent's
    connections: closing an inherited SQLite connection can checkpoint or remove the parent's WAL. So the
    inherited ones are kept referenced, untouched, for the child's lifetime."""
    _inherited.extend(_runtimes.values())
    _runtimes.clear()


os.register_at_fork(after_in_child=_forget_runtimes_in_forked_child)
