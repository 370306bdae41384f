"""The domain runtime: everything a stage needs (stores, ledger, keys), built once per process from Settings.

The CLI, the Dagster resource, the benchmarks and the tests all get their Runtime here (`runtime_for`), so a
process reuses one set of connections and loaded keys per Settings, and a forked worker builds its own.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property

from cryptography.hazmat.primitives.asymmetric import ed25519

from evidence_pipeline.config import Settings
from evidence_pipeline.ledger import Ledger
from evidence_pipeline.ledger.jobs import RetryBudget
from evidence_pipeline.signing.keys import ROOT_KEY, Keyring, load_keyring, load_witness_key
from evidence_pipeline.signing.rotation import KeyDirectory
from evidence_pipeline.store import ArtifactStore
from evidence_pipeline.store.s3 import S3Options
from evidence_pipeline.store.uri import open_store


@dataclass
class Runtime:
    """Everything a stage needs, built from Settings."""

    settings: Settings
    sources: ArtifactStore
    staging: ArtifactStore
    previews: ArtifactStore
    archive: ArtifactStore
    ledger: Ledger

    @classmethod
    def from_settings(cls, settings: Settings, s3_client=None) -> Runtime:
        """``s3_client`` (a boto3 S3 client) is needed when any store URI is s3://."""
        options = S3Options(
            settings.s3_object_lock_mode, settings.s3_object_lock_days, settings.s3_server_side_encryption,
            settings.s3_kms_key_id,
        )
        return cls(
            settings=settings,
            sources=open_store(settings.sources_uri, s3_client, options, scheme="sources", private=True),
            staging=open_store(settings.staging_uri, s3_client, S3Options(), scheme="staging", private=True),
            previews=open_store(settings.preview_uri, s3_client, S3Options(), scheme="previews", private=True),
            archive=open_store(settings.archive_uri, s3_client, options),
            ledger=Ledger(settings.ledger_url),
        )

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


def s3_client(settings: Settings):
    """A boto3 S3 client for the configured endpoint and region (as dagster-aws's S3Resource builds one: standard
    retries, 5 attempts), each store call through it ended by EVIDENCE_S3_DEADLINE_SECONDS; credentials come from
    the standard AWS environment/chain."""
    import boto3  # only when a store is on S3
    from botocore.config import Config

    from evidence_pipeline.store import s3_deadline

    client = boto3.session.Session().client(
        "s3", endpoint_url=settings.s3_endpoint_url, region_name=settings.s3_region,
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
