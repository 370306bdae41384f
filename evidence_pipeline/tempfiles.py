"""Private per-attempt scratch directories, and the sweeper for the ones a dead process left behind.

A directory is 0700 with a generated name (a service marker and a random id; never a tenant id or a user-supplied
name); files in it are created exclusively with 0600. It is removed on every exit path of the attempt. A `.lease`
file names the job and lease token so the sweeper can skip directories whose attempt may still be alive.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from evidence_pipeline.paths import private_dirs

MARKER = "evidence-attempt-"
log = logging.getLogger(__name__)


@contextlib.contextmanager
def attempt_dir(work_root: Path, job_id: str, lease_token: int) -> Iterator[Path]:
    private_dirs(work_root)
    path = work_root / f"{MARKER}{uuid.uuid4().hex}"
    path.mkdir(mode=0o700)
    try:
        write_private(path / ".lease", f"{job_id} {lease_token}\n".encode())
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def scratch_file(directory: Path) -> BinaryIO:
    """An anonymous 0600 file (read/write) in a private directory: it has no name once open, so it is gone on every
    exit path, SIGKILL included."""
    private_dirs(directory)
    return tempfile.TemporaryFile(dir=directory)


def write_private(path: Path, data: bytes) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    return path


@dataclass
class Swept:
    """What one sweep did, by attempt directory: ids removed, ids it failed to remove, and how many it kept."""

    removed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    kept_live: int = 0  # its lease is live: the attempt may still be working
    kept_young: int = 0  # younger than the maximum lease age

    def counts(self) -> dict[str, int]:
        return {
            "removed": len(self.removed),
            "kept_live": self.kept_live,
            "kept_young": self.kept_young,
            "failed": len(self.failed),
        }


def sweep(work_root: Path, max_age_seconds: float, lease_is_live: Callable[[str, int], bool]) -> Swept:
    """Remove abandoned attempt directories older than ``max_age_seconds``; says what it removed and kept.

    Never follows symlinks, skips anything that is not one of our directories, and keeps a directory whose
    lease is still live. A directory still there after its removal (a file it could not unlink) is failed, not
    removed. Logs ids, never file names.
    """
    swept = Swept()
    if not work_root.is_dir():
        return swept
    cutoff = time.time() - max_age_seconds
    for entry in os.scandir(work_root):
        if not entry.name.startswith(MARKER):
            continue
        info = entry.stat(follow_symlinks=False)
        if not stat.S_ISDIR(info.st_mode):
            continue  # a symlink or a file: not one of ours
        if info.st_mtime > cutoff:
            swept.kept_young += 1
            continue
        attempt_id = entry.name.removeprefix(MARKER)
        job_id, token = _lease_of(Path(entry.path))
        if job_id and lease_is_live(job_id, token):
            swept.kept_live += 1
            continue
        shutil.rmtree(entry.path, ignore_errors=True)  # rmtree does not follow symlinks inside the tree
        if os.path.lexists(entry.path):
            log.warning("could not remove abandoned attempt directory %s", attempt_id)
            swept.failed.append(attempt_id)
            continue
        log.info("swept abandoned attempt directory %s", attempt_id)
        swept.removed.append(attempt_id)
    return swept


def _lease_of(path: Path) -> tuple[str | None, int]:
    try:
        fd = os.open(path / ".lease", os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd) as handle:
            job_id, token = handle.read().split()
        return job_id, int(token)
    except (OSError, ValueError):
        return None, 0
