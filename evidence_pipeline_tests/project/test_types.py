"""The type check runs in the suite (so in `make test`): mypy over the modules pyproject.toml's [tool.mypy] lists is
clean, and the same configuration fails on a type error (so this test can fail), and on an unannotated function in
a module it holds to strict rules."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _mypy(*paths: Path) -> subprocess.CompletedProcess:
    # One cache (.mypy_cache at the root, as a developer's runs use): warm, a check costs a fraction of a second.
    return subprocess.run([sys.executable, "-m", "mypy", *map(str, paths)], cwd=ROOT, capture_output=True, text=True)


def test_the_listed_modules_type_check_and_a_type_error_fails(tmp_path):
    clean = _mypy()
    assert clean.returncode == 0, clean.stdout + clean.stderr
    wrong = tmp_path / "wrong.py"
    wrong.write_text("from evidence_pipeline.canonical import sha256_text\n\nsha256_text(b'bytes, not text')\n")
    failed = _mypy(wrong)
    assert failed.returncode == 1 and "[arg-type]" in failed.stdout, failed.stdout + failed.stderr


def test_a_strict_module_refuses_an_unannotated_function(tmp_path):
    module = ROOT / "evidence_pipeline" / "signed_note.py"
    shadow = tmp_path / "signed_note.py"
    shadow.write_text(module.read_text() + "\n\ndef unannotated(note):\n    return note\n")
    failed = _mypy("--shadow-file", str(module), str(shadow), str(module))
    assert failed.returncode == 1 and "[no-untyped-def]" in failed.stdout, failed.stdout + failed.stderr
    clean = _mypy("--shadow-file", str(module), str(module), str(module))  # the same run without the change
    assert clean.returncode == 0, clean.stdout + clean.stderr
