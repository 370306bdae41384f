"""Uploaded documents: the worker-side gate and the operations that process them.

Plain Python like the rest of the domain: the intake server admits documents and jobs, Dagster runs the workers,
and both meet only in the ledger and the stores (the runtime's ledger pieces and its document store).
"""

from __future__ import annotations


def document_key(tenant: str, sha256: str) -> str:
    """Content-addressed, per tenant: built only from a validated slug and a digest."""
    return f"{tenant}/{sha256}"
