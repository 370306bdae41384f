"""Named kill points for fault-injection tests. Inert unless EVIDENCE_KILL_POINT names the point.

A test sets EVIDENCE_KILL_POINT=<name> for a child process; reaching that point SIGKILLs the process, exactly
like a crashed worker: no cleanup handlers, no exception, nothing flushed.
"""

from __future__ import annotations

import os
import signal

KILL_POINTS = (
    "after_pin", "mid_render", "after_staging", "after_validate", "after_sign", "after_archive_put",
    "after_commit", "during_renew", "during_sweep",
)


def kill_point(name: str) -> None:
    if os.environ.get("EVIDENCE_KILL_POINT") == name:
        os.kill(os.getpid(), signal.SIGKILL)
