"""Directories with explicit modes: what the process creates must not depend on the umask it was started with."""

from __future__ import annotations

import os
from pathlib import Path


def make_dirs(path: Path, mode: int) -> Path:
    """Create ``path`` with ``mode`` and any missing ancestors owner-only (0700), whatever the umask.
    Directories that already exist keep their modes."""
    missing = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=0o700)
        except FileExistsError:
            continue  # a concurrent creator won: its directory, its mode
        os.chmod(directory, mode if directory == missing[0] else 0o700)
    return missing[0] if missing else path


def private_dirs(path: Path) -> Path:
    """``path`` and its missing ancestors, owner-only."""
    return make_dirs(path, 0o700)
