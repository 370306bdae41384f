"""A witness's durable state: per log origin, the newest checkpoint it co-signed.

One file per origin (named by the origin's SHA-256, never by the text a client sent), replaced atomically: written
to a temporary file, fsynced, renamed over the old one, the folder fsynced. The check of the old size and the
update happen under an exclusive lock of the folder (flock), so two concurrent submissions cannot roll the record
back (the race tlog-witness describes), whichever processes or threads serve them. A record only ever grows.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

from evidence_pipeline.signed_note import Checkpoint, NoteError, parse_checkpoint

LOCK = ".lock"


class WitnessState:
    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)

    def _path(self, origin: str) -> Path:
        return self.folder / f"{hashlib.sha256(origin.encode()).hexdigest()}.checkpoint"

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        fd = os.open(self.folder / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def latest(self, origin: str) -> Checkpoint | None:
        """The newest checkpoint co-signed for ``origin``, or None. A record that does not parse is an error:
        silently starting over at size 0 would let a forked history be co-signed."""
        try:
            text = self._path(origin).read_text()
        except FileNotFoundError:
            return None
        checkpoint = parse_checkpoint(text)
        if checkpoint.origin != origin:
            raise NoteError("the witness's state file does not describe its origin")
        return checkpoint

    def record(self, checkpoint: Checkpoint) -> None:
        """Replace the origin's record (the caller holds the lock and has checked that it extends the old one)."""
        target = self._path(checkpoint.origin)
        temporary = target.with_suffix(".partial")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, checkpoint.text().encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, target)
        folder = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
