"""`evidence demo` as an operator runs it: real processes on one fresh home (SQLite + local archive)."""

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EVIDENCE = [sys.executable, "-c", "from evidence_pipeline.cli import main; main()"]


def _environment(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVIDENCE_", "DAGSTER_"))}
    return env | {"EVIDENCE_HOME": str(home), "EVIDENCE_WORKERS": "1"} | extra


def _demo(env: dict, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([*EVIDENCE, "demo"], env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **kwargs)


def _newly_published(stdout: str) -> int:
    return int(re.search(r"(\d+) newly published", stdout).group(1))


def test_two_concurrent_demos_on_one_home_count_each_publication_once(tmp_path):
    env = _environment(tmp_path / "home", EVIDENCE_LEASE_SECONDS="5")
    demos = [_demo(env) for _ in range(2)]
    outputs = [demo.communicate(timeout=900) for demo in demos]
    for demo, (stdout, stderr) in zip(demos, outputs):
        assert demo.returncode == 0, stdout[-3000:] + stderr[-3000:]
        assert "15 bundles" in stdout
    assert sum(_newly_published(stdout) for stdout, _ in outputs) == 15
