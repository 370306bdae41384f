"""Put-once artifact stores. Keys are built only from validated slugs, periods and digests."""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import BinaryIO, Protocol

from evidence_pipeline.errors import EvidenceError, ReasonCode

CHUNK = 1 << 20  # streamed reads and writes move at most this much at a time
_KEY = re.compile(r"^[a-z0-9][a-z0-9._-]*(/[a-z0-9][a-z0-9._-]*)*$")


def check_key(key: str) -> str:
    if not _KEY.fullmatch(key) or ".." in key:
        raise EvidenceError(ReasonCode.STORE_KEY_INVALID, "artifact key has characters outside [a-z0-9._-/]")
    return key


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Reader(Protocol):
    """What streamed bytes come from: a binary file, or an S3 object's body."""

    def read(self, size: int, /) -> bytes: ...

    def close(self) -> None: ...


def chunks(file: Reader, limit: int | None = None) -> Iterator[bytes]:
    """The rest of ``file`` (at most ``limit`` bytes), CHUNK bytes at a time."""
    while limit is None or limit > 0:
        chunk = file.read(CHUNK if limit is None else min(CHUNK, limit))
        if not chunk:
            return
        limit = None if limit is None else limit - len(chunk)
        yield chunk


class Sink(Protocol):
    """Where streamed bytes go: a binary file, or DISCARD when they only need hashing."""

    def write(self, chunk: bytes, /) -> int: ...


def copy_hashing(source: Iterable[bytes], out: Sink) -> tuple[str, int]:
    """Write ``source`` to ``out``, hashing on the way; returns (sha256, size)."""
    digest, size = hashlib.sha256(), 0
    for chunk in source:
        digest.update(chunk)
        out.write(chunk)
        size += len(chunk)
    return digest.hexdigest(), size


def verified_chunks(store: ArtifactStore, key: str, sha256: str, size: int) -> Iterator[bytes]:
    """The object's bytes, streamed CHUNK by CHUNK, for a receiver that was promised ``size`` bytes of ``sha256``:
    the last chunk is held back until the whole object hashed right, so bytes that differ (or a different size)
    end in STORE_DIGEST_MISMATCH before the receiver ever holds all it was promised."""
    digest, received, held = hashlib.sha256(), 0, b""
    reader = store.open_read(key)
    try:
        for chunk in chunks(reader, size + 1):
            if held:
                yield held
            digest.update(chunk)
            received += len(chunk)
            held = chunk
    finally:
        reader.close()
    if received != size or digest.hexdigest() != sha256:
        raise EvidenceError(ReasonCode.STORE_DIGEST_MISMATCH, f"object {key} does not match its recorded sha256")
    if held:
        yield held


class _Discard:
    def write(self, chunk: bytes) -> int:
        return len(chunk)


DISCARD = _Discard()  # a sink for bytes that only need hashing


def sha256_file(file: BinaryIO, limit: int | None = None) -> tuple[str, int]:
    """(sha256, size) of a seekable file's content (its first ``limit`` bytes); leaves it rewound."""
    file.seek(0)
    result = copy_hashing(chunks(file, limit), DISCARD)
    file.seek(0)
    return result


def readable(data: bytes | BinaryIO) -> BinaryIO:
    """Callers hand over bytes or a seekable binary file; parsers get a file either way."""
    return io.BytesIO(data) if isinstance(data, bytes) else data


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

    def put_file(self, key: str, file: BinaryIO) -> StoredObject:
        """put_once from a seekable binary file (its whole content), streamed rather than held in memory."""
        ...

    def spool(self, scratch_dir: Path) -> BinaryIO:
        """A private (0600), nameless read/write file to receive bytes into, gone on every exit path unless
        ``put_spooled`` stores it. A local store makes it on its own filesystem, so that storing it is a link."""
        ...

    def put_spooled(self, key: str, spool: BinaryIO, sha256: str, size: int) -> StoredObject:
        """put_file of a file from this store's ``spool()``, whose sha256 and size the caller computed while
        writing it: the bytes are neither hashed again nor, where the store can avoid it, copied."""
        ...

    def get(self, key: str, expected_sha256: str | None = None, max_bytes: int | None = None) -> bytes:
        """Read an object; with ``expected_sha256`` a mismatch raises STORE_DIGEST_MISMATCH, and an object larger
        than ``max_bytes`` is STORE_OBJECT_TOO_LARGE before anything is read."""
        ...

    def get_versioned(self, key: str, max_bytes: int | None = None) -> tuple[bytes, str | None]:
        """``get``, and the version id of the bytes read (see ``version_id``), from one request where the store
        can: asked for later, the version could be one written since."""
        ...

    def get_file(self, key: str, out: Sink, expected_sha256: str | None = None, max_bytes: int | None = None) -> str:
        """Stream an object into ``out``, hashing while writing, and return its sha256. Digests and sizes are
        checked as by ``get``; on a mismatch ``out`` holds unverified bytes, which the caller must discard."""
        ...

    def open_read(self, key: str) -> Reader:
        """A reader of the object's bytes, for a caller that streams them on (a download) and closes it; nothing is
        hashed here: the caller checks what it read against the digest it recorded."""
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

    def erase(self, key: str) -> bool:
        """Remove an object and every version of it; False when there was none. Only offboarding erases, and only
        from the private stores of what is not evidence (sources, staging, previews, documents)."""
        ...

    def retained_until(self, key: str) -> datetime | None:
        """When the object's Object Lock retention ends (S3), else None."""
        ...


class StreamingStore(ArtifactStore):
    """The bytes methods of an ArtifactStore, for stores that implement put_file and get_file."""

    def put_once(self, key: str, data: bytes) -> StoredObject:
        return self.put_file(key, io.BytesIO(data))  # BytesIO shares the bytes: no copy

    def get(self, key: str, expected_sha256: str | None = None, max_bytes: int | None = None) -> bytes:
        out = io.BytesIO()
        self.get_file(key, out, expected_sha256, max_bytes)
        return out.getvalue()

    def get_versioned(self, key: str, max_bytes: int | None = None) -> tuple[bytes, str | None]:
        return self.get(key, max_bytes=max_bytes), self.version_id(key)  # a store without versions asks nothing


def check_size(key: str, size: int | None, max_bytes: int | None) -> None:
    """Refuse an object larger than ``max_bytes`` before reading it."""
    if max_bytes is not None and size is not None and size > max_bytes:
        raise EvidenceError(ReasonCode.STORE_OBJECT_TOO_LARGE, f"object {key} is larger than {max_bytes} bytes")


def check_digest(key: str, sha256: str, expected_sha256: str | None) -> str:
    if expected_sha256 is not None and sha256 != expected_sha256:
        raise EvidenceError(ReasonCode.STORE_DIGEST_MISMATCH, f"object {key} does not match its recorded sha256")
    return sha256
