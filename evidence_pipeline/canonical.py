"""The one spelling of each value whose text is stored, hashed or signed: canonical JSON, the legacy ASCII form that
persisted ids were derived from, SHA-256 of text, and UTC ISO 8601 times.

Ground floor: imports nothing of the project, so the offline verifiers, the ledger and the signing code share it.
"""

from __future__ import annotations

import hashlib
import json
import time
from datetime import datetime, timezone
from typing import Literal


def canonical(value: object) -> str:
    """Canonical JSON: keys sorted, no whitespace, strings unescaped (what the ledger stores and hashes as an event
    body, and what DSSE payloads and request texts are, as UTF-8)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_json(value: object) -> bytes:
    """``canonical`` as UTF-8 bytes."""
    return canonical(value).encode("utf-8")


def legacy_ascii_json_for_ids(value: object) -> bytes:
    """The ASCII-escaped form (non-ASCII as \\uXXXX) that job ids, replay attempt ids and refusal digests have
    always been derived from. Those are persisted and named by events: this spelling must never be unified with
    ``canonical_json``, or the same request would get a new id."""
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode("ascii")


def sha256_text(text: str) -> str:
    """The hex SHA-256 of a text's UTF-8 bytes."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


Precision = Literal["seconds", "milliseconds", "microseconds"]


def utc_iso(stamp: float | None = None, *, timespec: Precision = "milliseconds") -> str:
    """A moment (a Unix time, or now) as UTC ISO 8601 at ``timespec``: event bodies record microseconds, job
    statuses milliseconds, registries seconds; each keeps the precision it always stored."""
    return datetime.fromtimestamp(time.time() if stamp is None else stamp, timezone.utc).isoformat(timespec=timespec)
