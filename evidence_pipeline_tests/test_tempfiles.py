import os
import stat
import time

import pytest

from evidence_pipeline.tempfiles import MARKER, attempt_dir, scratch_file, sweep, write_private


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

    removed = sweep(work, max_age_seconds=60, lease_is_live=lambda job, token: job == "job-live")
    assert removed == ["dead"]
    assert sorted(p.name for p in work.iterdir()) == sorted([old_live.name, young.name, link.name, other.name])
    assert (outside / "keep.txt").read_text() == "keep"  # never followed the symlink
