"""The hash chain's link, pure: ``event_hash = sha256(prev_hash || body)`` over an event body's exact bytes, from
GENESIS_HASH. The ledger computes it when it appends and when it verifies; the offline auditors (audit packages,
lineage) recompute it from exported bytes without SQLAlchemy or a database."""

from __future__ import annotations

import hashlib

GENESIS_HASH = "0" * 64


def chain_hash(prev_hash: str, body: str | bytes) -> str:
    """The hash of the event whose body (its text, or that text's UTF-8 bytes) follows the event ``prev_hash``."""
    data = body.encode("utf-8") if isinstance(body, str) else body
    return hashlib.sha256(bytes.fromhex(prev_hash) + data).hexdigest()
