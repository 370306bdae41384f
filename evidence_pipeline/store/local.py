"""Local-filesystem ArtifactStore: put-once by hard-linking a fully written, fsynced temp file into place.

A put that fails (disk full, read-only mount, permissions) leaves nothing behind: the temp file is removed and so
are the folders that this put created, so a failed publication never leaves an empty or partial bundle folder.

Objects are copied and hashed a chunk at a time, so a put or a read never holds a whole object in memory (``get``
aside, which returns bytes by definition).
"""

from __future__ import annotations

import contextlib
import errno
import os
import uuid
from pathlib import Path
from typing import BinaryIO

from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.faults import io_fault
from evidence_pipeline.store import StoredObject, StreamingStore, check_digest, check_key, chunks, copy_hashing, sha256_file


class LocalStore(StreamingStore):
    """``file_mode`` 0o444 suits the archive (evidence meant to be read); private stores use 0o400."""

    def __init__(self, root: Path, scheme: str = "archive", file_mode: int = 0o444):
        self.root = Path(root)
        self.scheme = scheme
        self.file_mode = file_mode

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def put_file(self, key: str, file: BinaryIO) -> StoredObject:
        with _io_errors(key):
            return self._put_once(key, file)

    def _put_once(self, key: str, file: BinaryIO) -> StoredObject:
        path = self._path(key)
        if path.exists():
            return self._reconcile(key, path, *sha256_file(file))
        created = _make_folders(path.parent, mode=0o700 if self.file_mode == 0o400 else 0o777)
        tmp = path.parent / f".put-{uuid.uuid4().hex}.tmp"
        linked = False
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as handle:
                file.seek(0)
                digest, size = copy_hashing(chunks(file), handle)
                io_fault(f"{self.scheme}_write")
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, self.file_mode)  # stored objects are immutable
            try:
                os.link(tmp, path)  # atomic and refuses to replace: the put-once primitive
            except FileExistsError:
                linked = True  # another put made the object: the folders are theirs too
                return self._reconcile(key, path, digest, size)
            linked = True
            _fsync_dir(path.parent)
        finally:
            tmp.unlink(missing_ok=True)
            if not linked:
                _remove_empty(created)
        return StoredObject(key=key, sha256=digest, size=size, created=True)

    def _reconcile(self, key: str, path: Path, digest: str, size: int) -> StoredObject:
        with path.open("rb") as existing:
            if sha256_file(existing) != (digest, size):
                raise EvidenceError("STORE_CONFLICT", f"object {key} already exists with different bytes")
        return StoredObject(key=key, sha256=digest, size=size, created=False)

    def get_file(self, key: str, out: BinaryIO, expected_sha256: str | None = None) -> str:
        # Hash what is copied, not the stored file: the caller uses exactly the bytes that were checked.
        try:
            with self._path(key).open("rb") as stored:
                digest, _ = copy_hashing(chunks(stored), out)
        except FileNotFoundError:
            raise EvidenceError("STORE_NOT_FOUND", f"object {key} does not exist") from None
        except OSError as error:
            raise _classified(key, error) from None
        return check_digest(key, digest, expected_sha256)

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


def _make_folders(folder: Path, mode: int) -> list[Path]:
    """Create ``folder`` and its missing parents; returns the ones created here, deepest first."""
    missing = []
    while not folder.is_dir():
        missing.append(folder)
        folder = folder.parent
    made: list[Path] = []
    for path in reversed(missing):
        try:
            path.mkdir(mode=mode)
        except FileExistsError:
            continue  # a concurrent put made it: not ours to remove
        except OSError:
            _remove_empty(made[::-1])
            raise
        made.append(path)
    return made[::-1]


def _remove_empty(folders: list[Path]) -> None:
    """Remove folders (deepest first) that are still empty; a concurrent put's objects keep theirs."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


@contextlib.contextmanager
def _io_errors(key: str):
    try:
        yield
    except OSError as error:
        raise _classified(key, error) from None


# errno -> reason code. Space can come back; a read-only mount or missing permissions need an operator.
_ERRNO_CODES = {
    errno.ENOSPC: "STORE_FULL", errno.EDQUOT: "STORE_FULL", errno.EROFS: "STORE_READ_ONLY",
    errno.EACCES: "STORE_ACCESS_DENIED", errno.EPERM: "STORE_ACCESS_DENIED",
}


def _classified(key: str, error: OSError) -> EvidenceError:
    """An OSError as its reason code (other I/O errors are STORE_UNAVAILABLE, retried), without the local path."""
    reason = errno.errorcode.get(error.errno or 0, type(error).__name__)
    code = _ERRNO_CODES.get(error.errno, "STORE_UNAVAILABLE")
    return EvidenceError(code, f"local store cannot write or read {key} ({reason})")


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
