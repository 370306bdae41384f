"""The audit ledger: append-only, hash-chained events and the publications they commit."""

from evidence_pipeline.ledger.ledger import GENESIS_HASH, Ledger, LedgerEvent

__all__ = ["GENESIS_HASH", "Ledger", "LedgerEvent"]
