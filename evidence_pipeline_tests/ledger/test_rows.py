"""The ledger's job rows are typed (ledger/rows.py): its job reads return frozen dataclasses, code reads them by
attribute, and each row type names the columns of its table, so a column a migration adds is read or left out on
purpose, never by accident."""

import ast
import dataclasses
from pathlib import Path

import pytest
import sqlalchemy

from evidence_pipeline.ledger import Ledger
from evidence_pipeline.ledger.announcements import outbox, webhooks
from evidence_pipeline.ledger.jobs import JobKey
from evidence_pipeline.ledger.rows import (
    Delivery,
    DocumentJob,
    Job,
    JobAttempt,
    ListedDelivery,
    ListedJob,
    ListedTenant,
    PublicationClaim,
    PublicationRecord,
    Subscription,
)
from evidence_pipeline.models import ActorKeyState, ActorState

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


def test_the_webhook_rows_name_the_columns_of_their_tables(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    reflected = sqlalchemy.MetaData()
    reflected.reflect(ledger.engine, only=[webhooks.name, outbox.name])
    for row_type, table in ((Subscription, webhooks), (Delivery, outbox)):
        columns = reflected.tables[table.name].c.keys()
        assert [field.name for field in dataclasses.fields(row_type)] == list(table.c.keys())
        assert set(table.c.keys()) == set(columns)  # the lightweight table is the migrated one


# What `evidence webhook deliveries --json`, `evidence tenant list --json` and `evidence actor list --json` (each
# actor's state and keys) print of each row: scripts read these keys, in this order. A field renamed or dropped from
# a listing's row type changes that output: it fails here.
LISTED_KEYS = {
    ListedDelivery: [
        "delivery_id",
        "tenant",
        "event_type",
        "event_seq",
        "state",
        "attempts",
        "last_code",
        "last_status",
        "payload",
        "created_at",
        "next_attempt_at",
    ],
    ListedTenant: ["tenant", "registered_at", "registered_seq", "offboarded_seq"],
    ActorState: ["roles", "keys"],
    ActorKeyState: ["public_key", "valid_from", "revoked_at"],
}


def test_the_listings_print_the_keys_they_always_printed():
    assert {row_type: [field.name for field in dataclasses.fields(row_type)] for row_type in LISTED_KEYS} == LISTED_KEYS


# The other pieces' reads hand out rows too; what is left a mapping is one by nature: an event's details that the
# offboarding merges into its own (remove_tenant).
ROW_READERS = ("outbox.py", "tenants.py", "tokens.py", "actors.py")
STILL_A_MAPPING = {"outbox.py: remove_tenant"}


def _returns(path: Path) -> dict[str, str]:
    """Each function of a module that annotates its return, with that annotation."""
    functions = [node for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.FunctionDef)]
    return {function.name: ast.unparse(function.returns) for function in functions if function.returns is not None}


def test_the_other_readers_hand_out_rows_not_untyped_dicts():
    untyped = {
        f"{name}: {function}"
        for name in ROW_READERS
        for function, returns in _returns(LEDGER / name).items()
        if "dict[str, Any]" in returns
    }
    assert untyped == STILL_A_MAPPING
