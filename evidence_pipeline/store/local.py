"""Local-filesystem ArtifactStore: put-once by hard-linking a fully written, fsynced temp file into place.

A spool (an upload being received) is a nameless file in the store's own root, so storing it is a link: its bytes
are written and hashed once, by the receiver.

A put that fails (disk full, read-only mount, permissions) leaves nothing behind: the temp file is removed and so
are the folders that this put created, so a failed publication never leaves an empty or partial bundle folder.

Objects are copied and hashed a chunk at a time, so a put or a read never holds a whole object in memory (``get``
aside, which returns bytes by definition).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import BinaryIO

from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.faults import io_fault
from evidence_pipeline.paths import make_dirs
from evidence_pipeline.store import (
    Sink,
    StoredObject,
    StreamingStore,
    check_digest,
    check_key,
    check_size,
    chunks,
    copy_hashing,
    sha256_file,
)


class LocalStore(StreamingStore):
    """``file_mode`` 0o444 suits the archive (evidence meant to be read); private stores use 0o400.

    Every path is walked from the root one component at a time through directory descriptors opened with
    O_NOFOLLOW: a symlink anywhere below the root (a swapped file, a swapped folder) is refused, never followed,
    and only regular files are read. Directories and files get explicit modes, whatever the umask.
    """

    def __init__(self, root: Path, scheme: str = "archive", file_mode: int = 0o444):
        self.root = Path(root)
        self.scheme = scheme
        self.file_mode = file_mode
        self.dir_mode = 0o700 if file_mode == 0o400 else 0o755

    def put_file(self, key: str, file: BinaryIO) -> StoredObject:
        with io_errors(key):
            return self._put_once(key, file)

    def spool(self, scratch_dir: Path) -> BinaryIO:
        with io_errors("a spool"):
            make_dirs(self.root, self.dir_mode)
            # O_TMPFILE without O_EXCL: nameless until put_spooled links it (tempfile's are never linkable)
            fd = os.open(self.root, os.O_TMPFILE | os.O_RDWR, 0o600)
        return os.fdopen(fd, "w+b")

    def put_spooled(self, key: str, spool: BinaryIO, sha256: str, size: int) -> StoredObject:
        with io_errors(key):
            return self._put_once(key, spool, (sha256, size))

    def _put_once(self, key: str, file: BinaryIO, spooled: tuple[str, int] | None = None) -> StoredObject:
        """``spooled``: ``file`` is a spool of this store with that (sha256, size); it is linked, not copied."""
        *folders, name = check_key(key).split("/")
        created: list[str] = []
        directory = self._directory(key, folders, created=created)
        tmp = f".put-{uuid.uuid4().hex}.tmp"
        linked = False
        try:
            if self._entry(key, name, directory) is not None:
                linked = True
                return self._reconcile(key, self._open(key, name, directory), *(spooled or sha256_file(file)))
            if spooled is None:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=directory)
                with os.fdopen(fd, "wb") as handle:
                    file.seek(0)
                    digest, size = copy_hashing(chunks(file), handle)
                    self._seal(handle)
            else:
                digest, size = spooled
                self._seal(file)
                # /proc/self/fd names the open, nameless file; the link gives it the temp name, no bytes move
                os.link(f"/proc/self/fd/{file.fileno()}", tmp, dst_dir_fd=directory, follow_symlinks=True)
            try:  # atomic and refuses to replace: the put-once primitive
                os.link(tmp, name, src_dir_fd=directory, dst_dir_fd=directory, follow_symlinks=False)
            except FileExistsError:
                linked = True  # another put made the object: the folders are theirs too
                return self._reconcile(key, self._open(key, name, directory), digest, size)
            linked = True
            os.fsync(directory)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=directory)
            os.close(directory)
            if not linked:
                self._remove_empty(created)
        return StoredObject(key=key, sha256=digest, size=size, created=True)

    def _seal(self, handle: BinaryIO) -> None:
        """Make a written file durable and, as every stored object is, immutable."""
        io_fault(f"{self.scheme}_write")
        handle.flush()
        os.fsync(handle.fileno())
        os.fchmod(handle.fileno(), self.file_mode)

    def _remove_empty(self, folders: list[str]) -> None:
        """Remove the folders a failed put created (deepest first) while they are empty; a concurrent put's
        objects keep theirs."""
        for folder in reversed(folders):
            try:
                os.rmdir(self.root / folder)
            except OSError:
                return

    def _reconcile(self, key: str, fd: int, digest: str, size: int) -> StoredObject:
        with os.fdopen(fd, "rb") as existing:
            if sha256_file(existing) != (digest, size):
                raise EvidenceError(ReasonCode.STORE_CONFLICT, f"object {key} already exists with different bytes")
        return StoredObject(key=key, sha256=digest, size=size, created=False)

    def get_file(self, key: str, out: Sink, expected_sha256: str | None = None, max_bytes: int | None = None) -> str:
        # Hash what is copied, not the stored file: the caller uses exactly the bytes that were checked.
        *folders, name = check_key(key).split("/")
        with io_errors(key):
            directory = self._directory(key, folders)
            try:
                fd = self._open(key, name, directory)
            finally:
                os.close(directory)
            with os.fdopen(fd, "rb") as stored:
                check_size(key, os.fstat(fd).st_size, max_bytes)
                # A file that grows while it is read is refused too, never silently cut short.
                digest, size = copy_hashing(chunks(stored, None if max_bytes is None else max_bytes + 1), out)
                check_size(key, size, max_bytes)
        return check_digest(key, digest, expected_sha256)

    def open_read(self, key: str) -> BinaryIO:
        *folders, name = check_key(key).split("/")
        with io_errors(key):
            directory = self._directory(key, folders)
            try:
                return os.fdopen(self._open(key, name, directory), "rb")
            finally:
                os.close(directory)

    def exists(self, key: str) -> bool:
        *folders, name = check_key(key).split("/")
        with io_errors(key):
            directory = self._existing_directory(key, folders)
            if directory is None:
                return False
            try:
                mode = self._entry(key, name, directory)
            finally:
                os.close(directory)
        return mode is not None

    def version_id(self, key: str) -> str | None:
        return None  # a put-once file has exactly one version

    def uri(self, key: str) -> str:
        return f"{self.scheme}://{check_key(key)}"

    def erase(self, key: str) -> bool:
        *folders, name = check_key(key).split("/")
        with io_errors(key):
            directory = self._existing_directory(key, folders)
            if directory is None:
                return False
            try:
                if self._entry(key, name, directory) is None:
                    return False
                os.unlink(name, dir_fd=directory)
            finally:
                os.close(directory)
            self._remove_empty(["/".join(folders[:depth]) for depth in range(1, len(folders) + 1)])
        return True

    def retained_until(self, key: str) -> datetime | None:
        return None  # a local store has no retention of its own: its files stay until someone removes them

    def _directory(self, key: str, folders: list[str], created: list[str] | None = None) -> int:
        """A descriptor of root/folders..., each component opened without following symlinks. With ``created``,
        missing folders are made and the ones made here are appended to it (as paths below the root)."""
        if created is not None:
            make_dirs(self.root, self.dir_mode)
        try:
            fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        except FileNotFoundError:
            raise EvidenceError(ReasonCode.STORE_NOT_FOUND, f"object {key} does not exist") from None
        try:
            for depth, folder in enumerate(folders, start=1):
                made = False
                if created is not None:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(folder, 0o700, dir_fd=fd)
                        made = True
                        created.append("/".join(folders[:depth]))
                mode = self._entry(key, folder, fd)
                if mode is None:
                    raise EvidenceError(ReasonCode.STORE_NOT_FOUND, f"object {key} does not exist")
                if not stat.S_ISDIR(mode):  # a FIFO or file where a folder belongs: a fact, not an I/O outage
                    raise EvidenceError(ReasonCode.STORE_NOT_REGULAR_FILE, f"{key} passes through a non-folder")
                child = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd = child
                if made:
                    os.fchmod(fd, self.dir_mode)  # explicit, whatever the umask
        except BaseException:
            os.close(fd)
            if created is not None:
                self._remove_empty(created)
            raise
        return fd

    def _existing_directory(self, key: str, folders: list[str]) -> int | None:
        """``_directory``, or None when a folder on the way does not exist."""
        try:
            return self._directory(key, folders)
        except EvidenceError as error:
            if error.code == ReasonCode.STORE_NOT_FOUND:
                return None
            raise

    def _open(self, key: str, name: str, directory: int) -> int:
        """A read descriptor of the regular file ``name`` in ``directory`` (no symlink, no FIFO, no device)."""
        if self._entry(key, name, directory) is None:
            raise EvidenceError(ReasonCode.STORE_NOT_FOUND, f"object {key} does not exist")
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=directory)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise EvidenceError(ReasonCode.STORE_NOT_REGULAR_FILE, f"object {key} is not a regular file")
        return fd

    @staticmethod
    def _entry(key: str, name: str, directory: int) -> int | None:
        """The mode of ``name`` in ``directory`` (None when absent); a symlink is refused."""
        try:
            mode = os.lstat(name, dir_fd=directory).st_mode
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(mode):
            raise EvidenceError(
                ReasonCode.STORE_SYMLINK_REFUSED, f"{key} passes through a symlink; stores never follow one"
            )
        return mode

    def _walk(self, prefix: str, directory: int) -> list[str]:
        keys: list[str] = []
        for path, folders, files, _ in os.fwalk(".", dir_fd=directory):  # never descends into a symlink
            links = [f for f in folders if stat.S_ISLNK(os.lstat(os.path.join(path, f), dir_fd=directory).st_mode)]
            keys += [f"{prefix}/{os.path.normpath(os.path.join(path, name))}" for name in files + links]
        return keys

    # Last in the class: from here on, ``list`` in the class body names this method, not the builtin.
    def list(self, prefix: str) -> list[str]:
        """Every entry under ``prefix`` that is not a real folder, so that a symlink is listed, then refused."""
        folders = check_key(prefix).split("/")
        with io_errors(prefix):
            directory = self._existing_directory(prefix, folders)
            if directory is None:
                return []
            try:
                keys = self._walk(prefix, directory)
            finally:
                os.close(directory)
        return sorted(key for key in keys if not key.rsplit("/", 1)[-1].startswith("."))


@contextlib.contextmanager
def io_errors(key: str) -> Iterator[None]:
    try:
        yield
    except OSError as error:
        raise _classified(key, error) from None


# errno -> reason code. Space can come back; a read-only mount or missing permissions need an operator.
_ERRNO_CODES = {
    errno.ENOSPC: ReasonCode.STORE_FULL,
    errno.EDQUOT: ReasonCode.STORE_FULL,
    errno.EROFS: ReasonCode.STORE_READ_ONLY,
    errno.EACCES: ReasonCode.STORE_ACCESS_DENIED,
    errno.EPERM: ReasonCode.STORE_ACCESS_DENIED,
}


def _classified(key: str, error: OSError) -> EvidenceError:
    """An OSError as its reason code (other I/O errors are STORE_UNAVAILABLE, retried), without the local path."""
    reason = errno.errorcode.get(error.errno or 0, type(error).__name__)
    code = _ERRNO_CODES.get(error.errno or 0, ReasonCode.STORE_UNAVAILABLE)
    return EvidenceError(code, f"local store cannot write or read {key} ({reason})")
