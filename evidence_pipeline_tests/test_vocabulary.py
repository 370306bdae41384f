"""The shared vocabulary is declared once: the README's reason-code table is the ReasonCode enum, row by row."""

import re
from pathlib import Path

import pytest

from evidence_pipeline.errors import RETRYABLE, EvidenceError, ReasonCode, exit_code

README = Path(__file__).resolve().parent.parent / "README.md"
ROW = re.compile(r"^\| `([A-Z_]+)` \| (yes|no) \| ([0-3]) \| .+ \|$", re.M)


def test_the_readme_reason_code_table_is_the_enum():
    rows = {code: (retried == "yes", int(exit)) for code, retried, exit in ROW.findall(README.read_text())}
    assert rows == {code.value: (code in RETRYABLE, exit_code(code)) for code in ReasonCode}


def test_an_undeclared_code_cannot_be_raised():
    with pytest.raises(ValueError):
        EvidenceError("NOT_A_CODE", "x")
