"""Local-filesystem ArtifactStore: put-once by hard-linking a fully written, fsynced temp file into place."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.store import StoredObject, check_digest, check_key, sha256_hex


class LocalStore:
    def __init__(self, root: Path, scheme: str = "archive"):
        self.root = Path(root)
        self.scheme = scheme

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def put_once(self, key: str, data: bytes) -> StoredObject:
        path = self._path(key)
        digest = sha256_hex(data)
        if path.exists():
            return self._reconcile(key, path, data, digest)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.parent / f".put-{uuid.uuid4().hex}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, 0o444)  # published objects are immutable
            try:
                os.link(tmp, path)  # atomic and refuses to replace: the put-once primitive
            except FileExistsError:
                return self._reconcile(key, path, data, digest)
            _fsync_dir(path.parent)
        finally:
            tmp.unlink(missing_ok=True)
        return StoredObject(key=key, sha256=digest, size=len(data), created=True)

    def _reconcile(self, key: str, path: Path, data: bytes, digest: str) -> StoredObject:
        if path.read_bytes() != data:
            raise EvidenceError("STORE_CONFLICT", f"object {key} already exists with different bytes")
        return StoredObject(key=key, sha256=digest, size=len(data), created=False)

    def get(self, key: str, expected_sha256: str | None = None) -> bytes:
        path = self._path(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise EvidenceError("STORE_NOT_FOUND", f"object {key} does not exist") from None
        return check_digest(key, data, expected_sha256)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def version_id(self, key: str) -> str | None:
        return None  # a put-once file has exactly one version

    def list(self, prefix: str) -> list[str]:
        base = self._path(prefix)
        if not base.is_dir():
            return []
        return sorted(
            str(p.relative_to(self.root))
            for p in base.rglob("*")
            if p.is_file() and not p.name.startswith(".")
        )

    def uri(self, key: str) -> str:
        return f"{self.scheme}://{check_key(key)}"


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
