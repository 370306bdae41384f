"""The ledger's job rows are typed (ledger/rows.py): its job reads return frozen dataclasses, code reads them by
attribute, and each row type names the columns of its table, so a column a migration adds is read or left out on
purpose, never by accident."""

import ast
import dataclasses
from pathlib import Path

import pytest

from evidence_pipeline.ledger import Ledger
from evidence_pipeline.ledger.jobs import JobKey
from evidence_pipeline.ledger.rows import DocumentJob, Job, JobAttempt, ListedJob, PublicationClaim, PublicationRecord

PACKAGE = Path(__file__).resolve().parents[2] / "evidence_pipeline"
LEDGER = PACKAGE / "ledger"
# The modules that read jobs for everyone else: what they hand out is a row type, never a dict.
JOB_READERS = ("jobs.py", "document_jobs.py", "pages.py", "submissions.py", "retries.py")
ROW_NAMES = {"job"}  # what production code calls a job row it holds


def _subscripted_rows(path: Path) -> list[str]:
    """``job["state"]``, ``self.job['request']``: a row read by a string key."""
    return [
        f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Subscript)
        and isinstance(node.slice, ast.Constant)
        and isinstance(node.slice.value, str)
        and (getattr(node.value, "id", None) in ROW_NAMES or getattr(node.value, "attr", None) in ROW_NAMES)
    ]


def test_production_code_reads_job_rows_by_attribute():
    assert [where for path in sorted(PACKAGE.rglob("*.py")) for where in _subscripted_rows(path)] == []


def test_the_job_readers_hand_out_rows_not_dicts():
    offenders = [
        f"{name}: {node.name} -> {ast.unparse(node.returns)}"
        for name in JOB_READERS
        for node in ast.walk(ast.parse((LEDGER / name).read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.returns is not None
        and "dict" in ast.unparse(node.returns)
    ]
    assert offenders == []


def test_each_row_type_names_the_columns_of_its_table_and_is_frozen(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    jobs, documents, ended = ledger.jobs.c.keys(), ledger.document_jobs.c.keys(), ledger.ended_attempts.c.keys()

    def named(row_type: type) -> set[str]:
        return {field.name for field in dataclasses.fields(row_type)}

    assert named(Job) == set(jobs)  # every column: a migration that adds one adds it here
    assert named(ListedJob) == set(jobs) | {"operation"}
    assert named(DocumentJob) == set(documents) | {
        "state",
        "attempts",
        "last_reason",
        "last_message",
        "period",
        "lease_token",
        "policy_version",
        "next_attempt_at",
    }
    assert named(JobAttempt) <= set(ended)
    assert named(PublicationRecord) == set(ledger.publications.c.keys())
    assert named(PublicationClaim) == set(ledger.claims.c.keys())
    job = ledger.accept_job(JobKey("acme", "2026-01", "a" * 64, "renderer/1", "policy/1"), "pin")
    assert isinstance(job, Job) and job.current_attempt_id == job.job_id and ledger.job(job.job_id) == job
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.state = "succeeded"  # a row is what was read: every change is a compare-and-swap in the ledger
