"""The ledger's rows are typed (ledger/rows.py): its job, document and batch reads return frozen dataclasses, code
reads them by attribute, and each row type names the columns of its table, so a column a migration adds is read or
left out on purpose, never by accident. What the intake API shows of a document or a batch keeps the keys its
contract documents."""

import ast
import dataclasses
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import sqlalchemy

from evidence_pipeline.intake import admission, openapi
from evidence_pipeline.ledger import Ledger
from evidence_pipeline.ledger.admission import Clock, JobLimits
from evidence_pipeline.ledger.announcements import outbox, webhooks
from evidence_pipeline.ledger.jobs import JobKey
from evidence_pipeline.ledger.rows import (
    Batch,
    Delivery,
    Document,
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
from evidence_pipeline.models import ActorKeyState, ActorState, ChainedEvent, EventType
from evidence_pipeline_tests.support.pieces import pieces_of

PACKAGE = Path(__file__).resolve().parents[2] / "evidence_pipeline"
LEDGER = PACKAGE / "ledger"
# The modules that read rows for everyone else: what they hand out is a row type, never a dict of columns (a typed
# mapping is not a row: a batch's children counted by state, dict[str, int]; admissions by key, dict[..., Document]).
ROW_READERS = (
    *("jobs.py", "document_jobs.py", "pages.py", "submissions.py", "retries.py", "batches.py", "documents.py"),
    *("outbox.py", "tenants.py", "tokens.py", "actors.py"),
)
# What is left a mapping is one by nature: an event's details that the offboarding merges into its own.
STILL_A_MAPPING = ["outbox.py: remove_tenant -> dict[str, Any]"]
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


def _a_row_as_dict(annotation: str) -> bool:
    return "dict[str, Any]" in annotation or re.search(r"\bdict\b(?!\[)", annotation) is not None


def test_the_row_readers_hand_out_rows_not_dicts():
    offenders = [
        f"{name}: {node.name} -> {ast.unparse(node.returns)}"
        for name in ROW_READERS
        for node in ast.walk(ast.parse((LEDGER / name).read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.returns is not None
        and _a_row_as_dict(ast.unparse(node.returns))
    ]
    assert offenders == STILL_A_MAPPING


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
    assert named(Document) == set(ledger.documents.c.keys())
    assert named(Batch) == set(ledger.batches.c.keys())
    job = ledger.accept_job(JobKey("acme", "2026-01", "a" * 64, "renderer/1", "policy/1"), "pin")
    assert isinstance(job, Job) and job.current_attempt_id == job.job_id and ledger.job(job.job_id) == job
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.state = "succeeded"  # a row is what was read: every change is a compare-and-swap in the ledger


def test_documents_batches_and_their_events_are_rows_and_the_api_shows_the_keys_its_contract_documents(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    pieces = pieces_of(ledger)
    records, batches = pieces.document_records, pieces.batches
    upload = {"size": 10, "media_type": "application/pdf", "store_key": "acme/a", "actor": "t", "clock": Clock(None)}
    admitted, created = records.admit_document("acme", "a" * 64, **upload, max_bytes=100)
    again, _ = records.admit_document("acme", "a" * 64, **upload, max_bytes=100)  # the same bytes: its first row
    assert (
        isinstance(admitted, Document)
        and created
        and again == admitted == records.document("acme", admitted.document_id)
    )
    assert records.document("globex", admitted.document_id) is None  # another tenant's does not exist
    event = records.find_event("acme", EventType.DOCUMENT_ADMITTED, "document_id", admitted.document_id)
    assert isinstance(event, ChainedEvent) and event.seq == admitted.event_seq
    assert records.event("acme", EventType.DOCUMENT_ADMITTED, event.parsed["event_id"]) == event

    limits = JobLimits(max_outstanding=10, max_queue_age_seconds=60, max_queued=10)
    batch, _ = batches.create_batch(
        "acme",
        "bat_1",
        manifest_sha256="b" * 64,
        store_key="acme/batches/b",
        jobs=2,
        actor="test",
        limits=limits,
        clock=Clock(None),
    )
    assert isinstance(batch, Batch) and batches.batch("acme", "bat_1") == batch and batches.open_batches() == [batch]
    stopped = batches.stop_batch("acme", "bat_1", "test")
    assert isinstance(stopped, Batch) and stopped.state == "cancelled"

    def documented(schema: str) -> set[str]:
        return set(openapi.SCHEMAS[schema]["properties"])

    assert set(admission.document_view(admitted)) == documented("Document")
    assert set(admission.batch_view(SimpleNamespace(batches=batches), stopped)) == documented("Batch")
    assert set(admission.batch_outcome(SimpleNamespace(batches=batches), stopped)) == documented("BatchCancelled")


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
