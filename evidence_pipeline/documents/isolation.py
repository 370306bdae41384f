"""Work on an untrusted document runs in a worker process of its own, under a memory and a wall-time limit.

The document worker forks one child per piece of work (the gate, the signature check, the processor, the second
pass): the child's address space may grow by at most the memory limit beyond what it inherited (RLIMIT_AS), and it
is killed when it outlives the time limit. Whatever happens in it ends as a value, the child's own EvidenceError,
or a coded failure of that one job: PROCESSOR_RESOURCE_EXHAUSTED, PROCESSOR_TIMED_OUT, PROCESSOR_INPUT_FAILED (an
unclassified exception, named by its type only: its text may quote the input; terminal, as the same bytes fail the
same way) or PROCESSOR_FAILED (an I/O error, or a death by signal). The parent
holds no ledger transaction while it waits, and its lease heartbeat runs in a process the child's CPU cannot
starve.

A fork, not a fresh interpreter: the child starts with every module imported and the job's inputs open; what it
costs is copying the parent's page tables (bench/isolation.py). Only the forking thread is copied; the child uses
no lock or connection of the parent's, and reads its files through descriptors of its own (``reopened``).
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import resource
import signal
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from evidence_pipeline.errors import EvidenceError, ReasonCode

_FORK = multiprocessing.get_context("fork")
_log = logging.getLogger(__name__)
_LIBC = ctypes.CDLL(None)
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


@dataclass(frozen=True)
class Limits:
    memory_bytes: int  # how far the child's address space may grow beyond what it inherited
    seconds: float  # wall time, from the fork to its answer


def unclassified(error: BaseException) -> EvidenceError:
    """The coded failure of an exception that is not an EvidenceError; its type only, never its text. The log
    says where it was raised (module and line of each frame) for the operator."""
    frames = traceback.extract_tb(error.__traceback__)
    _log.warning(
        "unclassified %s at %s",
        type(error).__name__,
        " < ".join(f"{Path(f.filename).name}:{f.lineno}" for f in reversed(frames)),
    )
    if isinstance(error, MemoryError):
        return EvidenceError(ReasonCode.PROCESSOR_RESOURCE_EXHAUSTED, "the work reached its memory limit")
    return EvidenceError(ReasonCode.PROCESSOR_FAILED, f"the work failed unexpectedly ({type(error).__name__})")


def deterministic(error: Exception) -> EvidenceError:
    """The coded failure of work on a document's bytes: the child reads only its files and fetches nothing, so an
    exception other than running out of memory or an I/O error is the same on the same bytes, every attempt
    (PROCESSOR_INPUT_FAILED, terminal: retrying it spends the budget for nothing)."""
    coded = unclassified(error)
    if coded.code != ReasonCode.PROCESSOR_FAILED or isinstance(error, OSError):
        return coded
    return EvidenceError(
        ReasonCode.PROCESSOR_INPUT_FAILED,
        f"the work failed on this document ({type(error).__name__}); retrying cannot change that",
    )


def isolated(limits: Limits, work: Callable, *args):
    """``work(*args)`` in a forked child under ``limits``: its value, or its failure raised as an EvidenceError."""
    receive, send = _FORK.Pipe(duplex=False)
    child = _FORK.Process(target=_child, args=(send, os.getpid(), limits.memory_bytes, work, args), daemon=True)
    child.start()
    send.close()  # the child holds the only writer: its death is an EOF here
    try:
        if not receive.poll(limits.seconds):
            raise EvidenceError(ReasonCode.PROCESSOR_TIMED_OUT, f"the work ran longer than {limits.seconds:g} s")
        succeeded, value = receive.recv()  # EOFError: it died without an answer
    except BaseException as error:
        child.kill()  # a no-op once it has exited
        child.join()
        if isinstance(error, EOFError):
            raise EvidenceError(
                ReasonCode.PROCESSOR_FAILED, f"the worker process died ({_death(child.exitcode)})"
            ) from None
        raise
    finally:
        receive.close()
    # It answered and exits at once: not waiting for the teardown of its address space halves the cost of a
    # child (multiprocessing reaps it when the next one starts).
    if succeeded:
        return value
    raise value


def reopened(file: BinaryIO) -> BinaryIO:
    """A read-only file object of the child's own over an inherited (possibly anonymous) file: reading it never
    moves the offset the parent's buffered file object relies on."""
    return open(f"/proc/self/fd/{file.fileno()}", "rb")  # closed when the child exits


def _child(send, parent: int, memory_bytes: int, work: Callable, args: tuple) -> None:
    # The parent enforces the time limit: a child whose run was SIGKILLed must not outlive it.
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it died before the request took effect
        os._exit(1)
    _limit_address_space(memory_bytes)
    try:
        answer = (True, work(*args))
    except EvidenceError as error:
        answer = (False, error)
    except Exception as error:  # MemoryError included: every failure is an answer
        answer = (False, deterministic(error))
    try:
        send.send(answer)
    except Exception as error:  # the value would not pickle, or memory ran out while pickling it
        send.send((False, unclassified(error)))
    os._exit(0)  # now: no thread the work left behind, and no finalizer of the parent's objects, may hold it


def _limit_address_space(growth: int) -> None:
    with open("/proc/self/statm") as statm:
        inherited = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = inherited + growth if hard == resource.RLIM_INFINITY else min(inherited + growth, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # an abort leaves no core file holding a tenant's document


def _death(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        return f"signal {signal.Signals(-exitcode).name}"
    return f"exit status {exitcode}"
