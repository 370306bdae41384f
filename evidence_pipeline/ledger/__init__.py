"""The audit ledger: append-only, hash-chained events and the publications they commit.

The database layer (SQLAlchemy, Alembic) is imported on first use of ``Ledger``, so that what needs only the pure
modules (``merkle``, as `evidence verify --package` does) never loads it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from evidence_pipeline.ledger.ledger import GENESIS_HASH, Ledger, LedgerEvent

__all__ = ["GENESIS_HASH", "Ledger", "LedgerEvent"]


def __getattr__(name: str):
    if name in __all__:
        from evidence_pipeline.ledger import ledger

        return getattr(ledger, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
