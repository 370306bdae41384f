"""Named fault points for fault-injection tests. Inert unless the environment names the point.

A test sets EVIDENCE_KILL_POINT=<name> for a child process; reaching that point SIGKILLs the process, exactly
like a crashed worker: no cleanup handlers, no exception, nothing flushed.

EVIDENCE_IO_FAULT=<point>:<errno name> (e.g. ``archive_write:ENOSPC``) makes a local store's write fail at that
point with that OSError, after part of the object was written, as a full or read-only disk does. The point is
``<scheme>_write``, so one store (the archive) can fail while the others work; forked workers inherit it.
With EVIDENCE_IO_FAULT_WHILE=<path> as well, the fault holds only while that file exists: an outage that a test
ends by removing the file, in processes (a code server's runs) whose environment it cannot change.
"""

from __future__ import annotations

import errno
import os
import signal

KILL_POINTS = (
    "after_pin",
    "mid_render",
    "after_staging",
    "after_validate",
    "after_sign",
    "after_archive_put",
    "after_commit",
    "during_renew",
    "during_sweep",
    "after_approval_put",
    "after_document_verified",
    "after_document_put",
)


def kill_point(name: str) -> None:
    if os.environ.get("EVIDENCE_KILL_POINT") == name:
        os.kill(os.getpid(), signal.SIGKILL)


IO_FAULT_POINTS = ("archive_write", "sources_write", "staging_write", "previews_write")


def io_fault(point: str) -> None:
    name, _, code = os.environ.get("EVIDENCE_IO_FAULT", "").partition(":")
    switch = os.environ.get("EVIDENCE_IO_FAULT_WHILE")
    if name == point and (not switch or os.path.exists(switch)):
        number = getattr(errno, code)
        raise OSError(number, os.strerror(number))
