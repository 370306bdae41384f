import contextlib
import os
import stat
import subprocess
import time

import pytest

from evidence_pipeline.models import EventType
from evidence_pipeline.operations.maintenance import sweep_attempts
from evidence_pipeline.tempfiles import MARKER, attempt_dir, scratch_file, sweep, write_private
from evidence_pipeline_tests.support.tools import require_tool


def _age(path, seconds):
    past = time.time() - seconds
    os.utime(path, (past, past), follow_symlinks=False)


def test_attempt_dir_is_private_and_removed_on_every_exit(tmp_path):
    with pytest.raises(RuntimeError):
        with attempt_dir(tmp_path / "work", "job", 1) as scratch:
            path = write_private(scratch / "report.pdf", b"x")
            assert stat.S_IMODE(scratch.stat().st_mode) == 0o700 and stat.S_IMODE(path.stat().st_mode) == 0o600
            assert scratch.name.startswith(MARKER) and "acme" not in scratch.name
            with pytest.raises(FileExistsError):
                write_private(scratch / "report.pdf", b"y")  # exclusive creation
            raise RuntimeError("the attempt fails")
    assert list((tmp_path / "work").iterdir()) == []


def test_scratch_files_are_private_and_nameless(tmp_path):
    """Render and gate stream through these: nothing is left behind, whatever way the process ends."""
    with scratch_file(tmp_path / "work") as file:
        file.write(b"report bytes")
        assert stat.S_IMODE(os.fstat(file.fileno()).st_mode) == 0o600
        assert stat.S_IMODE((tmp_path / "work").stat().st_mode) == 0o700
        assert list((tmp_path / "work").iterdir()) == []  # unlinked (or never named) while still open
        file.seek(0)
        assert file.read() == b"report bytes"


def test_sweep_removes_only_abandoned_attempts(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    old_dead, old_live, young = (work / f"{MARKER}{name}" for name in ("dead", "live", "young"))
    for directory, job in ((old_dead, "job-dead"), (old_live, "job-live"), (young, "job-young")):
        directory.mkdir(mode=0o700)
        (directory / ".lease").write_text(f"{job} 1\n")
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    link = work / f"{MARKER}link"
    link.symlink_to(outside, target_is_directory=True)
    other = work / "not-ours"
    other.mkdir()
    for path in (old_dead, old_live, link, other):
        _age(path, 3600)

    swept = sweep(work, max_age_seconds=60, lease_is_live=lambda job, token: job == "job-live")
    assert swept.removed == ["dead"]
    assert swept.counts() == {"removed": 1, "kept_live": 1, "kept_young": 1, "failed": 0}
    assert sorted(p.name for p in work.iterdir()) == sorted([old_live.name, young.name, link.name, other.name])
    assert (outside / "keep.txt").read_text() == "keep"  # never followed the symlink


@contextlib.contextmanager
def _immutable(path):
    """``path`` cannot be unlinked while the block runs, not even by root (ext4's immutable attribute)."""
    chattr = require_tool("chattr")
    if subprocess.run([chattr, "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("this file system has no immutable attribute")
    try:
        yield
    finally:
        subprocess.run([chattr, "-i", str(path)], check=True)


def test_the_sweep_is_recorded_in_the_ledger_and_a_removal_that_failed_is_failed_not_swept(local_runtime):
    """Every sweep leaves a `sweep.completed` event with its counts: removed, kept (a live lease, too young) and
    failed; a directory it could not remove is counted as failed (before: as swept, silently)."""
    work = local_runtime.settings.work_dir
    ledger = local_runtime.ledger
    stuck, dead = (work / f"{MARKER}{name}" for name in ("stuck", "dead"))
    for directory in (stuck, dead):
        directory.mkdir(parents=True, mode=0o700)
        (directory / ".lease").write_text("job-gone 1\n")
    (stuck / "held").write_bytes(b"x")
    (work / f"{MARKER}young").mkdir(mode=0o700)
    for directory in (stuck, dead):
        _age(directory, 3600)
    with _immutable(stuck / "held"):
        swept = sweep_attempts(local_runtime, "test-sweeper")
        assert stuck.exists()
    assert (swept.removed, swept.failed) == (["dead"], ["stuck"])
    [event] = ledger.events_of_type(EventType.SWEEP_COMPLETED)
    assert (event["tenant"], event["actor"]) == ("", "test-sweeper")
    assert event["details"] == {"removed": 1, "kept_live": 0, "kept_young": 1, "failed": 1}

    _age(stuck, 3600)  # once the file can go, the next sweep removes it and says so
    assert sweep_attempts(local_runtime, "test-sweeper").removed == ["stuck"]
    assert ledger.events_of_type(EventType.SWEEP_COMPLETED)[-1]["details"] == {
        "removed": 1,
        "kept_live": 0,
        "kept_young": 1,
        "failed": 0,
    }
    assert ledger.verify_chain() > 0
