"""Pool slots of in-process runs (`evidence demo`): no run waits for a slot without bound, and a dead run frees its.

`execute_in_process` has no run launcher and no run monitoring: when its process is SIGKILLed mid-step, its run
stays STARTED and keeps the pool slots it claimed (`concurrency_slots`), and every later run that needs the pool
waits for them forever. Worse, Dagster 1.13's in-process executor waits for a slot in a loop that neither sleeps
(`InstanceConcurrencyContext.interval_to_next_pending_claim_check` returns ``min(0, …)``, never a positive delay)
nor looks at interrupts: `capture_interrupts` turns SIGINT and SIGTERM into a flag that only the multiprocess
executor reads. So this module:

- tags each in-process run with its owner (host, pid and the pid's start time, so a reused pid is not mistaken
  for the owner),
- frees the slots of runs whose owner is gone, marking such a run failed with ``RUN_WORKER_LOST``, before a run
  starts and again while one waits,
- watches a run while it waits for a slot: it says what it waits for, and ends the wait after
  ``EVIDENCE_POOL_WAIT_SECONDS`` (``POOL_WAIT_TIMEOUT``) or when SIGINT/SIGTERM arrived (``INTERRUPTED``), by
  marking the run failed and raising Dagster's own interruption in the executing (main) thread.

Runs that Dagster's run launcher started carry no owner tags: the daemon's run monitoring frees their slots.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Callable

from dagster import DagsterInstance
from dagster._core.errors import DagsterExecutionInterruptedError
from dagster._utils.interrupts import check_captured_interrupt

from evidence_pipeline.errors import EvidenceError, ReasonCode

HOST_TAG, PID_TAG, STARTED_TAG = "evidence/owner_host", "evidence/owner_pid", "evidence/owner_started"
_POLL_SECONDS = 0.5


def owner_tags() -> dict[str, str]:
    """Tags naming the process that executes an in-process run."""
    return {HOST_TAG: socket.gethostname(), PID_TAG: str(os.getpid()), STARTED_TAG: _started(os.getpid()) or ""}


def _started(pid: int) -> str | None:
    """The pid's start time in clock ticks since boot (Linux), so that a reused pid is told apart."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def _owner_gone(tags: dict[str, str]) -> bool:
    """True only when the run names an owner on this host and that process no longer exists."""
    if tags.get(HOST_TAG) != socket.gethostname() or not tags.get(PID_TAG, "").isdigit():
        return False  # another machine's run, or one the run launcher started: not ours to judge
    pid = int(tags[PID_TAG])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # it exists, owned by someone else
    started = _started(pid)
    return bool(tags.get(STARTED_TAG)) and started is not None and started != tags[STARTED_TAG]


def free_dead_holders(instance: DagsterInstance, pools: tuple[str, ...], own_run_id: str | None = None) -> list[str]:
    """Free the slots held or awaited in ``pools`` by runs whose owning process is gone; returns their run ids.
    A run still STARTED is marked failed first, with the reason."""
    storage = instance.event_log_storage
    freed = []
    for run_id in sorted(_holders(instance, pools) - {own_run_id}):
        run = instance.get_run_by_id(run_id)
        if run is None or not _owner_gone(run.tags):
            continue
        if not run.is_finished:
            instance.report_run_failed(
                run,
                message=(
                    f"RUN_WORKER_LOST: process {run.tags[PID_TAG]} that executed this run is gone; its pool slots were "
                    "freed by a later evidence command"
                ),
            )
        storage.free_concurrency_slots_for_run(run_id)
        freed.append(run_id)
    return freed


def _holders(instance: DagsterInstance, pools: tuple[str, ...]) -> set[str]:
    holders = set()
    for pool in pools:
        info = instance.event_log_storage.get_concurrency_info(pool)
        holders |= {slot.run_id for slot in info.claimed_slots} | {step.run_id for step in info.pending_steps}
    return holders


def _waiting(instance: DagsterInstance, pools: tuple[str, ...], run_id: str) -> list[tuple[str, str, list[str]]]:
    """(pool, step, run ids holding the pool's slots) for each step of ``run_id`` still waiting for a slot."""
    waiting = []
    for pool in pools:
        info = instance.event_log_storage.get_concurrency_info(pool)
        for step in info.pending_steps:
            if step.run_id == run_id and step.assigned_timestamp is None:
                waiting.append((pool, step.step_key, sorted({slot.run_id for slot in info.claimed_slots})))
    return waiting


class SlotWatch:
    """Watches one in-process run executing in the main thread (see the module docstring). ``stopped`` is the
    reason the watch ended the run, or None."""

    def __init__(
        self,
        instance: DagsterInstance,
        *,
        run_id: str,
        pools: tuple[str, ...],
        wait_seconds: float,
        say: Callable[[str], None],
    ):
        self.instance, self.run_id, self.pools, self.wait_seconds, self.say = instance, run_id, pools, wait_seconds, say
        self.stopped: EvidenceError | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="slot-watch", daemon=True)

    def __enter__(self) -> SlotWatch:
        self._previous = signal.signal(signal.SIGUSR1, _raise_interrupt)
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._done.set()
        self._thread.join()
        signal.signal(signal.SIGUSR1, self._previous)

    def _watch(self) -> None:
        since, said = None, None
        while not self._done.wait(_POLL_SECONDS):
            waiting = _waiting(self.instance, self.pools, self.run_id)
            if not waiting:
                since = None
                continue
            since = since or time.monotonic()
            for run_id in free_dead_holders(self.instance, self.pools, self.run_id):
                self.say(f"freed the pool slots of run {run_id[:8]}: its process is gone (RUN_WORKER_LOST)")
            message = "; ".join(
                f"waiting for a `{pool}` pool slot for {step} "
                f"(held by run(s) {', '.join(r[:8] for r in holders) or '-'})"
                for pool, step, holders in waiting
            )
            if message != said:
                self.say(f"{message}; giving up after {self.wait_seconds:.0f} s")
                said = message
            if check_captured_interrupt():
                self._stop(
                    EvidenceError(ReasonCode.INTERRUPTED, "stopped by SIGINT/SIGTERM while waiting for a pool slot")
                )
            elif time.monotonic() - since >= self.wait_seconds:
                self._stop(EvidenceError(ReasonCode.POOL_WAIT_TIMEOUT, f"waited {self.wait_seconds:.0f} s: {message}"))

    def _stop(self, error: EvidenceError) -> None:
        self.stopped = error
        run = self.instance.get_run_by_id(self.run_id)
        if run is not None and not run.is_finished:
            self.instance.report_run_failed(run, message=str(error))
        self._done.set()
        signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)


def _raise_interrupt(_signum, _frame) -> None:
    """Ends the executor's wait the way Dagster ends a step on SIGINT: its pending claims are then released."""
    raise DagsterExecutionInterruptedError()
