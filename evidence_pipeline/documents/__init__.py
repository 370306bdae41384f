"""Uploaded documents: the private document store, the worker-side gate and the operations that process them.

Plain Python like the rest of the domain: the intake server admits documents and jobs, Dagster runs the workers,
and both meet only in the ledger and the stores.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from evidence_pipeline.ledger.batches import Batches
from evidence_pipeline.ledger.document_jobs import DocumentJobs
from evidence_pipeline.ledger.documents import DocumentRecords
from evidence_pipeline.ledger.pages import Pages
from evidence_pipeline.ledger.submissions import Submissions
from evidence_pipeline.ledger.tokens import Tokens
from evidence_pipeline.runtime import Runtime, s3_client
from evidence_pipeline.store import ArtifactStore
from evidence_pipeline.store.s3 import S3Options
from evidence_pipeline.store.uri import open_store


@dataclass
class Documents:
    """What intake and the document workers share: a Runtime, the document store, and the pieces of the runtime's
    ledger that intake and the workers use (each owns its part: ask the one that owns what you need)."""

    runtime: Runtime
    store: ArtifactStore
    tokens: Tokens = field(init=False)  # API tokens, offboarding records
    records: DocumentRecords = field(init=False)  # admitted documents, the events that name them
    submissions: Submissions = field(init=False)  # accepting jobs: idempotency, quotas, backpressure
    jobs: DocumentJobs = field(init=False)  # accepted jobs: reads, leases, stages, the commit of their outputs
    batches: Batches = field(init=False)  # batches and their dispatch into child jobs
    pages: Pages = field(init=False)  # pages of jobs for the Dagster runs

    def __post_init__(self) -> None:
        ledger = self.runtime.ledger
        self.tokens = Tokens(ledger)
        self.records = DocumentRecords(ledger)
        self.submissions = Submissions(ledger)
        self.jobs = DocumentJobs(ledger)
        self.batches = Batches(ledger, self.submissions)
        self.pages = Pages(ledger, self.jobs)

    @classmethod
    def open(cls, runtime: Runtime) -> Documents:
        settings = runtime.settings
        client = s3_client(settings) if settings.uses_s3 else None
        # Tenants' documents are encrypted at rest in S3 always; no Object Lock, so retention stays a decision.
        options = S3Options(
            server_side_encryption=settings.s3_server_side_encryption or "AES256", kms_key_id=settings.s3_kms_key_id
        )
        store = open_store(settings.documents_uri, client, options, scheme="documents", private=True)
        return cls(runtime, store)


def document_key(tenant: str, sha256: str) -> str:
    """Content-addressed, per tenant: built only from a validated slug and a digest."""
    return f"{tenant}/{sha256}"
