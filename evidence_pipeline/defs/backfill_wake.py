"""A version-guarded patch: the backfill daemon starts a newly requested backfill within a second, not at its tick.

In Dagster 1.13.27 the backfill daemon's loop (``dagster._daemon.backfill.execute_backfill_iteration_loop``)
iterates every requested backfill, then sleeps what is left of ``DEFAULT_DAEMON_INTERVAL_SECONDS`` (30 s) on its
shutdown event. No setting shortens it (the upstream proposal, dagster-io/dagster#11860, was never merged), so a
backfill launched from the UI waited 0-30 s before its first run was created: 28-29 s in every benchmark run,
13% of a 1,200-partition backfill (bench/README.md, throughput.py).

Here the loop sleeps on a stand-in for that event whose ``wait`` also ends when a backfill the loop has not seen
is requested: once a second it asks for the newest backfill stamped in the last few seconds (usually none: one
small query, no backfill's body read) and wakes the loop if that is none of those requested when the loop last
started an iteration. Backfills already in progress are iterated no more often than before: the loop wakes only
for a new backfill (which, like any iteration, also iterates the others once), and after it the 30 s interval
starts again. A backfill requested at the very moment an iteration starts may be iterated twice in a row (the
stand-in cannot know what that iteration's query saw); one that the UI took more than STAMP_TO_STORE_SECONDS to
store after stamping it waits for the tick, as before.

The daemon imports this package with the storage classes dagster.yaml names (storage.py), before its daemons
start. The patch applies only to the exact version and sources it was checked against; otherwise it warns and
leaves Dagster alone (correct, only the 30 s tick). test_backfill_wake.py fails until it is re-checked.
"""

import logging
import threading
import time
from collections.abc import Iterator

import dagster._daemon.backfill as dagster_backfill
import dagster._daemon.daemon as dagster_daemon
from dagster import DagsterInstance
from dagster._core.execution.backfill import BulkActionsFilter, BulkActionStatus
from dagster._time import datetime_from_timestamp

from evidence_pipeline.defs.guard import patch

POLL_SECONDS = 1.0
# The UI stamps a backfill before it computes what the backfill targets and stores it; a backfill stored more than
# this long after its stamp is found at the daemon's next tick instead (as without this patch).
STAMP_TO_STORE_SECONDS = 10.0
# sha256 of inspect.getsource(...) of the objects this relies on, in dagster==1.13.27: the loop uses its shutdown
# event only to sleep between iterations, and the backfill daemon calls the loop through daemon.py's name for it.
CHECKED_SOURCES = {
    dagster_backfill.execute_backfill_iteration_loop:
        "2cd2b6119e4561f746485bf9e2a23e8224c4e1a78e1edcd8060d1e04cff4d7f7",
    dagster_daemon.BackfillDaemon.core_loop: "060dff14cea965d22a2bcd470e1c09e5917bd2db31a1a8f1825eabe1ed53b4c8",
}

_dagster_loop = dagster_backfill.execute_backfill_iteration_loop


class WakeOnNewBackfill:
    """Stands in for the backfill loop's shutdown event: ``wait`` ends on shutdown, at its timeout, or as soon as a
    backfill is requested that was not requested when the loop last started an iteration (``wait`` returning is
    what starts the next one)."""

    def __init__(self, instance: DagsterInstance, shutdown_event: threading.Event, logger: logging.Logger):
        self._instance = instance
        self._shutdown = shutdown_event
        self._logger = logger
        self._note_requested()

    def _note_requested(self) -> None:
        """Remembers the backfills requested now. Only those stamped in the last STAMP_TO_STORE_SECONDS are asked
        for, now and by the polls until the next call: a backfill in progress is older, so a poll reads no
        backfill's body (tens to hundreds of KB of JSON for thousands of partitions) until a new one comes."""
        self._recent = BulkActionsFilter(statuses=[BulkActionStatus.REQUESTED],
                                         created_after=datetime_from_timestamp(time.time() - STAMP_TO_STORE_SECONDS))
        self._seen = {backfill.backfill_id for backfill in self._instance.get_backfills(filters=self._recent)}

    def _newest_unseen(self) -> str | None:
        newest = self._instance.get_backfills(filters=self._recent, limit=1)
        return newest[0].backfill_id if newest and newest[0].backfill_id not in self._seen else None

    def wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            if self._shutdown.wait(min(POLL_SECONDS, left)):
                return True
            if (backfill_id := self._newest_unseen()) is not None:
                self._logger.info("Backfill %s was requested: iterating now, %.0f s before the daemon's tick",
                                  backfill_id, max(0.0, deadline - time.monotonic()))
                break
        # What is requested now, the iteration that starts when this returns sees.
        self._note_requested()
        return False


def execute_backfill_iteration_loop(workspace_process_context, logger, shutdown_event, **kwargs) -> Iterator:
    """Dagster's loop, sleeping on a WakeOnNewBackfill instead of the shutdown event itself."""
    wake = WakeOnNewBackfill(workspace_process_context.instance, shutdown_event, logger)
    yield from _dagster_loop(workspace_process_context, logger, wake, **kwargs)


def install() -> bool:
    """Patch the backfill daemon's loop if Dagster is the checked version; True when patched."""
    return patch(dagster_daemon, "execute_backfill_iteration_loop", execute_backfill_iteration_loop,
                 "evidence_pipeline.defs.backfill_wake",
                 "a new backfill waits for the backfill daemon's next 30 s tick", CHECKED_SOURCES)
