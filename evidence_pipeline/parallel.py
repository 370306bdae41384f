"""Run one stage over many tenant-months at once, in worker processes sized to the machine.

A range of partitions is independent work: each item is rendered, gated, signed and published on its own, so the
stage function runs in a process pool (CPU-bound PDF work does not share one interpreter well). Workers are forked
from the calling process once, when first needed, so they start in milliseconds with every library already
imported, and serve every later stage; each builds its own Runtime (connections, keys) on first use. Code that
caches connections must drop them in a forked child (`os.register_at_fork`), as `defs.resources` does. Failures
come back as values: an ``EvidenceError`` for one partition never hides the outcome of the others.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import multiprocessing.util
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TypeVar

from evidence_pipeline.errors import EvidenceError, ReasonCode

T = TypeVar("T")
R = TypeVar("R")
Built = TypeVar("Built")  # what make_runtime builds in a worker, for each of its stage calls

_pools: dict[int, ProcessPoolExecutor] = {}
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_PARENT_CHECK_SECONDS = 1.0


def map_stage(
    make_runtime: Callable[[], Built], stage: Callable[[Built, T], R], items: Sequence[T], workers: int
) -> list[R | EvidenceError]:
    """``stage(runtime, item)`` for every item, in order; an item's EvidenceError is returned in its place.

    ``make_runtime`` and ``stage`` must be importable top-level callables (they are pickled by reference).
    One item, or one worker, runs in this process: a single tenant-month pays no pool start-up.
    """
    return list(iter_stage(make_runtime, stage, items, workers))


def iter_stage(
    make_runtime: Callable[[], Built], stage: Callable[[Built, T], R], items: Sequence[T], workers: int
) -> Iterator[R | EvidenceError]:
    """map_stage, yielding each item's outcome, in order, as soon as it and those before it are done."""
    if workers <= 1 or len(items) <= 1:
        yield from (_attempt(make_runtime, stage, item) for item in items)
        return
    n = len(items)
    try:
        yield from _pool(workers).map(_attempt, [make_runtime] * n, [stage] * n, items, [dict(os.environ)] * n)
    except BrokenProcessPool:  # a worker died (killed, out of memory): the next call starts a fresh pool
        _pools.pop(workers).shutdown(cancel_futures=True)
        raise EvidenceError(ReasonCode.WORKER_LOST, "a worker process died while running a stage") from None


def _attempt(make_runtime, stage, item, environ=None):
    """One item: its result, or its failure as an EvidenceError (never an exception that would hide the others)."""
    # Workers outlive the environment they were forked with: adopt the caller's, so credentials from the standard
    # chain (AWS_*) and settings are the ones the caller has now.
    if environ is not None and environ != os.environ:
        os.environ.clear()
        os.environ.update(environ)
    try:
        return stage(make_runtime(), item)
    except EvidenceError as error:
        return error
    except Exception as error:  # a defect, not a foreseen condition: keep the traceback for the run's logs
        traceback.print_exc()
        return EvidenceError(
            ReasonCode.UNEXPECTED_ERROR, f"{type(error).__name__} while running a stage (see the run's logs)"
        )


def _pool(workers: int) -> Executor:
    if workers not in _pools:
        # fork, not spawn: a spawned worker re-imports pandas, reportlab, pyHanko and Dagster (seconds per run).
        # Workers die with this process: a SIGKILLed run must not leave them computing for nobody.
        _pools[workers] = ProcessPoolExecutor(
            max_workers=workers,
            mp_context=multiprocessing.get_context("fork"),
            initializer=_die_with_parent,
            initargs=(os.getpid(),),
        )
        # Shut the workers down when this process exits. A Dagster run worker is itself a multiprocessing child:
        # it leaves through os._exit (no atexit) after joining its own children, so live workers would keep it
        # alive forever. multiprocessing runs exit finalizers before that join, and from its atexit hook in an
        # ordinary exit. Registered here, not at import: a multiprocessing child clears the finalizers that its
        # start-up (unpickling the target) registered. Priority 100 runs it before the pool's own queues close
        # (their finalizers have priority 10), or the workers would never receive their stop sentinels.
        multiprocessing.util.Finalize(_pools[workers], _shutdown, exitpriority=100)
    return _pools[workers]


def _die_with_parent(parent_pid: int) -> None:
    """Worker initializer. On Linux the kernel SIGKILLs the worker when its parent dies (PR_SET_PDEATHSIG; the
    parent is the thread that forked it, and the pools are created and used by the run's main thread). Everywhere,
    a watchdog thread also ends the worker once it has been re-parented, which covers other systems and a parent
    that died before the request took effect."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    threading.Thread(target=_exit_when_orphaned, args=(parent_pid,), name="parent-watch", daemon=True).start()


def _exit_when_orphaned(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(_PARENT_CHECK_SECONDS)
    os._exit(1)


def _shutdown() -> None:
    while _pools:
        _pools.popitem()[1].shutdown(cancel_futures=True)


# A forked worker must not believe it owns its parent's pools.
os.register_at_fork(after_in_child=_pools.clear)
