"""Put-once artifact stores. Keys are built only from validated slugs, periods and digests."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Protocol

from evidence_pipeline.errors import EvidenceError

_KEY = re.compile(r"^[a-z0-9][a-z0-9._-]*(/[a-z0-9][a-z0-9._-]*)*$")


def check_key(key: str) -> str:
    if not _KEY.fullmatch(key) or ".." in key:
        raise EvidenceError("STORE_KEY_INVALID", "artifact key has characters outside [a-z0-9._-/]")
    return key


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class StoredObject:
    key: str
    sha256: str
    size: int
    created: bool  # False when an identical object was already there
    version_id: str | None = None


class ArtifactStore(Protocol):
    """Put-once object storage. Identical re-puts are no-ops; different bytes under a key are a conflict."""

    def put_once(self, key: str, data: bytes) -> StoredObject: ...

    def get(self, key: str, expected_sha256: str | None = None) -> bytes:
        """Read an object; with ``expected_sha256`` a mismatch raises STORE_DIGEST_MISMATCH."""
        ...

    def exists(self, key: str) -> bool: ...

    def version_id(self, key: str) -> str | None:
        """The object's version in a versioned store (S3), else None."""
        ...

    def list(self, prefix: str) -> list[str]:
        """Keys under ``prefix`` (a folder, without trailing slash), sorted."""
        ...

    def uri(self, key: str) -> str:
        """A location safe to show users: no local paths."""
        ...


def check_digest(key: str, data: bytes, expected_sha256: str | None) -> bytes:
    if expected_sha256 is not None and sha256_hex(data) != expected_sha256:
        raise EvidenceError("STORE_DIGEST_MISMATCH", f"object {key} does not match its recorded sha256")
    return data
