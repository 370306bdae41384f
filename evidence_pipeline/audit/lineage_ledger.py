"""`evidence lineage ARTIFACT_ID` over the ledger and the stores: lineage.py's walk, reading the database.

Each event met is checked against the hash chain (its own hash, the hash of the event before it, and the
previous hash of the event after it); an upload's bytes are read from the document store; the derived-by
signatures are checked against the deployment's trust root at its PAdES level.
"""

from __future__ import annotations

from typing import Any

from evidence_pipeline.audit.lineage import DerivedBy, walk
from evidence_pipeline.ledger.chain import GENESIS_HASH, chain_hash
from evidence_pipeline.models import ChainedEvent
from evidence_pipeline.runtime import Runtime
from evidence_pipeline.signing.keys import published_statement_keys
from evidence_pipeline.store import ArtifactStore


def lineage(rt: Runtime, artifact_id: str) -> dict[str, Any]:
    """The walk's report (audit/lineage.py's ``walk``) over the ledger and the stores."""
    return walk(LedgerSource(rt), artifact_id)


class LedgerSource:
    """audit/lineage.py's Source over the database and the stores."""

    def __init__(self, rt: Runtime):
        self.rt = rt
        self.archive: ArtifactStore = rt.archive
        self.statement_keys = published_statement_keys(self.archive)

    def find_event(self, tenant: str, event_type: str, name: str, value: str) -> ChainedEvent | None:
        return self.rt.document_records.find_event(tenant, event_type, name, value)

    def event(self, tenant: str, event_type: str, event_id: str) -> ChainedEvent | None:
        return self.rt.document_records.event(tenant, event_type, event_id)

    def chained(self, event: ChainedEvent) -> str | None:
        """The event's row hashes to its event_hash from its prev_hash, which is the hash of the event before, and
        the event after it (if any) chains from it."""
        before, after = self.rt.document_records.neighbour_hashes(event.seq)
        if (
            chain_hash(event.prev_hash, event.body) != event.event_hash
            or event.prev_hash != (before or GENESIS_HASH)
            or after not in (None, event.event_hash)
        ):
            return f"ledger event {event.seq} breaks the hash chain"
        return None

    def upload(self, tenant: str, document_id: str) -> tuple[ArtifactStore, str]:
        row = self.rt.document_records.document(tenant, document_id)
        return self.rt.document_store, (row.store_key if row else f"{tenant}/missing/{document_id}")

    def derived_by(self) -> DerivedBy:
        rt = self.rt
        return DerivedBy(
            rt.keyring.root_pem,
            rt.settings.pades_level,
            rt.keyring.tsa_root_pem if rt.settings.pades_level != "B-B" else None,
        )
