"""The shared vocabulary is declared once: the reason-code reference page is the ReasonCode enum, row by row, with
each code's meaning, retry class and exit code (docs/gen_reference.py prints it from the code)."""

import re

import pytest

from evidence_pipeline.errors import RETRYABLE, EvidenceError, ReasonCode, exit_code
from evidence_pipeline_tests.support.docs_pages import generated_page

ROW = re.compile(r"^\| `([A-Z_]+)` \| (yes|no) \| ([0-3]) \| (\d{3})? \| (\d{3})? \| (.+) \|$", re.M)


def test_the_reason_code_page_is_the_enum():
    rows = {
        code: (retried == "yes", int(exit), meaning)
        for code, retried, exit, _, _, meaning in ROW.findall(generated_page("reference/reason-codes.md"))
    }
    cell = {code: " ".join(code.meaning.split()).replace("|", "\\|") for code in ReasonCode}  # as a table cell
    assert rows == {code.value: (code in RETRYABLE, exit_code(code), cell[code]) for code in ReasonCode}
    assert all(len(code.meaning) > 10 for code in ReasonCode)  # a meaning, not a placeholder


def test_an_undeclared_code_cannot_be_raised():
    with pytest.raises(ValueError):
        EvidenceError("NOT_A_CODE", "x")
