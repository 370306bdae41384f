"""A version-guarded patch: the backfill daemon starts a newly requested backfill within a second, not at its tick,
and records a backfill's progress within seconds of its runs finishing.

In Dagster 1.13.27 the backfill daemon's loop (``dagster._daemon.backfill.execute_backfill_iteration_loop``)
iterates every requested backfill, then sleeps what is left of ``DEFAULT_DAEMON_INTERVAL_SECONDS`` (30 s) on its
shutdown event. No setting shortens it (the upstream proposal, dagster-io/dagster#11860, was never merged), so a
backfill launched from the UI waited 0-30 s before its first run was created: 28-29 s in every benchmark run,
13% of a 1,200-partition backfill (bench/README.md, throughput.py).

Here the loop sleeps on a stand-in for that event whose ``wait`` also ends when a backfill the loop has not seen
is requested: once a second it asks for the newest backfill stamped in the last few seconds (usually none: one
small query, no backfill's body read) and wakes the loop if that is none of those requested when the loop last
started an iteration. A backfill requested at the very moment an iteration starts may be iterated twice in a row (the
stand-in cannot know what that iteration's query saw); one that the UI took more than STAMP_TO_STORE_SECONDS to
store after stamping it waits for the tick, as before.

The daemon records an asset backfill's progress (what the UI's backfill page shows as "N% completed") only when it
iterates the backfill, so its page showed "0% completed" for up to 30 s after its runs finished. The stand-in also
wakes the loop when a run of a backfill finished since its last poll (one query for the finished runs updated since
then, each read about once), but no sooner than PROGRESS_SECONDS after the iteration before started: a backfill in
progress is iterated at most once per PROGRESS_SECONDS while its runs finish (each iteration evaluates every
backfill's partitions), and no more often than before while none does.

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
from dagster import DagsterInstance, RunsFilter
from dagster._core.execution.backfill import BulkActionsFilter, BulkActionStatus
from dagster._core.storage.dagster_run import FINISHED_STATUSES
from dagster._core.storage.tags import BACKFILL_ID_TAG
from dagster._time import datetime_from_timestamp

from evidence_pipeline.defs.extensions.guard import patch

POLL_SECONDS = 1.0
# A finished backfill run wakes the loop once this long has passed since the last iteration started.
PROGRESS_SECONDS = 5.0
# Finished runs read per poll; a full page wakes the loop without reading further (many runs just finished).
RUNS_PER_POLL = 100
# The UI stamps a backfill before it computes what the backfill targets and stores it; a backfill stored more than
# this long after its stamp is found at the daemon's next tick instead (as without this patch).
STAMP_TO_STORE_SECONDS = 10.0
# sha256 of inspect.getsource(...) of the objects this relies on, in dagster==1.13.27: the loop uses its shutdown
# event only to sleep between iterations, and the backfill daemon calls the loop through daemon.py's name for it.
CHECKED_SOURCES = {
    dagster_backfill.execute_backfill_iteration_loop: "2cd2b6119e4561f746485bf9e2a23e8224c4e1a78e1edcd8060d1e04cff4d7f7",  # noqa: E501 (a pinned digest)
    dagster_daemon.BackfillDaemon.core_loop: "060dff14cea965d22a2bcd470e1c09e5917bd2db31a1a8f1825eabe1ed53b4c8",
}

_dagster_loop = dagster_backfill.execute_backfill_iteration_loop


class WakeOnNewBackfill:
    """Stands in for the backfill loop's shutdown event: ``wait`` ends on shutdown, at its timeout, as soon as a
    backfill is requested that was not requested when the loop last started an iteration, or (PROGRESS_SECONDS
    after that start at the earliest) once a backfill's run has finished since (``wait`` returning is what starts
    the next one)."""

    def __init__(self, instance: DagsterInstance, shutdown_event: threading.Event, logger: logging.Logger):
        self._instance = instance
        self._shutdown = shutdown_event
        self._logger = logger
        self._note_requested()

    def _note_requested(self) -> None:
        """Remembers the backfills requested now. Only those stamped in the last STAMP_TO_STORE_SECONDS are asked
        for, now and by the polls until the next call: a backfill in progress is older, so a poll reads no
        backfill's body (tens to hundreds of KB of JSON for thousands of partitions) until a new one comes."""
        self._recent = BulkActionsFilter(
            statuses=[BulkActionStatus.REQUESTED],
            created_after=datetime_from_timestamp(time.time() - STAMP_TO_STORE_SECONDS),
        )
        self._seen = {backfill.backfill_id for backfill in self._instance.get_backfills(filters=self._recent)}
        self._started = time.monotonic()
        self._finished_after = time.time()  # the iteration about to start sees the runs finished before now

    def _newest_unseen(self) -> str | None:
        newest = self._instance.get_backfills(filters=self._recent, limit=1)
        return newest[0].backfill_id if newest and newest[0].backfill_id not in self._seen else None

    def _finished_backfill_run(self) -> str | None:
        """The backfill of a run that finished since the last poll (or of the iteration's start), or None."""
        polled = time.time()
        records = self._instance.get_run_records(
            filters=RunsFilter(statuses=FINISHED_STATUSES, updated_after=datetime_from_timestamp(self._finished_after)),
            limit=RUNS_PER_POLL,
        )
        self._finished_after = polled
        backfills = [r.dagster_run.tags[BACKFILL_ID_TAG] for r in records if BACKFILL_ID_TAG in r.dagster_run.tags]
        return backfills[0] if backfills else ("(many runs)" if len(records) == RUNS_PER_POLL else None)

    def wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            if self._shutdown.wait(min(POLL_SECONDS, left)):
                return True
            if (backfill_id := self._newest_unseen()) is not None:
                self._logger.info(
                    "Backfill %s was requested: iterating now, %.0f s before the daemon's tick",
                    backfill_id,
                    max(0.0, deadline - time.monotonic()),
                )
                break
            if (
                time.monotonic() - self._started >= PROGRESS_SECONDS
                and (backfill_id := self._finished_backfill_run()) is not None
            ):
                self._logger.info(
                    "A run of backfill %s finished: iterating now, %.0f s before the daemon's tick",
                    backfill_id,
                    max(0.0, deadline - time.monotonic()),
                )
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
    return patch(
        dagster_daemon,
        "execute_backfill_iteration_loop",
        execute_backfill_iteration_loop,
        what=__name__,
        consequence="a new backfill waits for the backfill daemon's next 30 s tick",
        sources=CHECKED_SOURCES,
    )
