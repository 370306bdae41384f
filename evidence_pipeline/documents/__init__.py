"""Uploaded documents: the private document store, the worker-side gate and the operations that process them.

Plain Python like the rest of the domain: the intake server admits documents and jobs, Dagster runs the workers,
and both meet only in the ledger and the stores.
"""

from __future__ import annotations

from dataclasses import dataclass

from evidence_pipeline.ledger.documents import DocumentLedger
from evidence_pipeline.runtime import Runtime, s3_client
from evidence_pipeline.store import ArtifactStore
from evidence_pipeline.store.s3 import S3Options
from evidence_pipeline.store.uri import open_store


@dataclass
class Documents:
    """What intake and the document workers share: a Runtime, the document store and the document ledger."""

    runtime: Runtime
    store: ArtifactStore
    ledger: DocumentLedger

    @classmethod
    def open(cls, runtime: Runtime) -> Documents:
        settings = runtime.settings
        client = s3_client(settings) if settings.uses_s3 else None
        # Tenants' documents are encrypted at rest in S3 always; no Object Lock, so retention stays a decision.
        options = S3Options(
            server_side_encryption=settings.s3_server_side_encryption or "AES256", kms_key_id=settings.s3_kms_key_id
        )
        store = open_store(settings.documents_uri, client, options, scheme="documents", private=True)
        return cls(runtime, store, DocumentLedger(runtime.ledger))


def document_key(tenant: str, sha256: str) -> str:
    """Content-addressed, per tenant: built only from a validated slug and a digest."""
    return f"{tenant}/{sha256}"
