"""parallel.map_stage: results in order, per-item errors as values, a lost worker is a retryable error."""

import multiprocessing
import os

import pytest

from evidence_pipeline import parallel
from evidence_pipeline.errors import EvidenceError


def no_runtime():
    return None


def square_or_fail(_runtime, item):
    if item == "bad":
        error = EvidenceError("SOURCE_INVALID", "bad item")
        error.lease_token = 7
        raise error
    if item == "die":
        os._exit(3)  # what an OOM kill looks like to the pool
    if item == "bug":
        raise KeyError("a defect")
    if item == "env":
        return os.environ.get("EVIDENCE_TEST_MARKER"), os.getpid()
    return item * item, os.getpid()


def test_items_run_in_worker_processes_and_come_back_in_order():
    results = parallel.map_stage(no_runtime, square_or_fail, [1, 2, 3, 4], workers=2)
    assert [value for value, _ in results] == [1, 4, 9, 16]
    assert os.getpid() not in {pid for _, pid in results}  # done by workers, not by the caller


def test_one_item_runs_in_the_caller():
    [(value, pid)] = parallel.map_stage(no_runtime, square_or_fail, [5], workers=2)
    assert (value, pid) == (25, os.getpid())


def test_an_items_error_is_returned_in_its_place_with_its_code_and_lease():
    ok, failed, ok_again = parallel.map_stage(no_runtime, square_or_fail, [2, "bad", 3], workers=2)
    assert ok[0] == 4 and ok_again[0] == 9
    assert isinstance(failed, EvidenceError) and failed.code == "SOURCE_INVALID" and failed.lease_token == 7


def test_an_unexpected_exception_is_contained_to_its_item():
    ok, bug = parallel.map_stage(no_runtime, square_or_fail, [3, "bug"], workers=2)
    assert ok[0] == 9 and bug.code == "UNEXPECTED_ERROR" and "KeyError" in bug.message


def test_workers_see_the_callers_current_environment(monkeypatch):
    parallel.map_stage(no_runtime, square_or_fail, [1, 2], workers=2)  # the pool exists before the change
    monkeypatch.setenv("EVIDENCE_TEST_MARKER", "now")
    results = parallel.map_stage(no_runtime, square_or_fail, ["env", "env"], workers=2)
    assert [value for value, _ in results] == ["now", "now"]


def test_a_dead_worker_is_a_retryable_error_and_the_next_call_gets_a_fresh_pool():
    with pytest.raises(EvidenceError) as lost:
        parallel.map_stage(no_runtime, square_or_fail, [1, "die", 3], workers=2)
    assert lost.value.code == "WORKER_LOST" and lost.value.retryable
    assert [v for v, _ in parallel.map_stage(no_runtime, square_or_fail, [1, 2], workers=2)] == [1, 4]


def _child_that_uses_a_pool(queue) -> None:
    queue.put([value for value, _ in parallel.map_stage(no_runtime, square_or_fail, [1, 2, 3], workers=2)])


def test_a_multiprocessing_child_that_used_a_pool_still_exits():
    # A Dagster run worker is such a child; it leaves through os._exit after joining its children, so workers
    # left running would keep it (and them) alive forever.
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_child_that_uses_a_pool, args=(queue,))
    child.start()
    assert queue.get(timeout=120) == [1, 4, 9]
    child.join(timeout=60)
    if child.exitcode is None:
        child.kill()
    assert child.exitcode == 0


def sleep_then_square(_runtime, item):
    import time

    time.sleep(300)  # long enough that only the parent's death can end it
    return item * item


def _parent_of_sleeping_workers() -> None:
    parallel.map_stage(no_runtime, sleep_then_square, [1, 2], workers=2)


def test_workers_die_with_their_sigkilled_parent():
    import signal
    import time

    import psutil

    parent = multiprocessing.get_context("spawn").Process(target=_parent_of_sleeping_workers)
    parent.start()
    deadline = time.monotonic() + 120
    workers = []
    while len(workers) < 2 and time.monotonic() < deadline:
        workers = psutil.Process(parent.pid).children()
        time.sleep(0.1)
    assert len(workers) == 2, "the parent never started its workers"
    os.kill(parent.pid, signal.SIGKILL)
    parent.join()
    _, alive = psutil.wait_procs(workers, timeout=10)  # a bound on liveness, not a performance figure
    for orphan in alive:
        orphan.kill()
    assert alive == []
