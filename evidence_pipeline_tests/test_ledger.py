import pytest
from sqlalchemy import text
from sqlalchemy.exc import DatabaseError

from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.ledger import Ledger
from evidence_pipeline.ledger.jobs import JobKey, Lease
from evidence_pipeline.ledger.ledger import chain_hash
from evidence_pipeline_tests.conftest import SMALL, drop_append_only_guards


@pytest.fixture
def ledger(backend, tmp_path):
    ledger = Ledger(backend.get("EVIDENCE_LEDGER_URL", f"sqlite:///{tmp_path / 'ledger.sqlite'}"))
    for i in range(3):
        ledger.record(SMALL, "report.rendered", f"{i:064x}", "run-1", pages=i)
    return ledger


def test_chain_verifies(ledger):
    assert ledger.verify_chain() == 3
    [rendered] = ledger.events_about("report.rendered", f"{1:064x}")
    assert rendered["details"] == {"pages": 1} and not ledger.events_about("report.validated", f"{1:064x}")


@pytest.mark.parametrize(
    "statement",
    ["UPDATE audit_events SET event_type = 'x'", "DELETE FROM audit_events", "DELETE FROM publications",
     "TRUNCATE audit_events CASCADE"],
)
def test_database_refuses_to_rewrite_history(ledger, statement):
    if statement.startswith("TRUNCATE") and ledger.engine.dialect.name != "postgresql":
        pytest.skip("SQLite has no TRUNCATE")
    _publish(ledger, _row())
    with pytest.raises(DatabaseError, match="LEDGER_APPEND_ONLY"):
        with ledger.engine.begin() as conn:
            conn.execute(text(statement))
    assert ledger.verify_chain() == 6


@pytest.mark.parametrize(
    "tamper",
    [
        "UPDATE audit_events SET body = replace(body, '\"pages\":1', '\"pages\":9') WHERE seq = 2",
        "DELETE FROM audit_events WHERE seq = 2",
        "UPDATE audit_events SET event_type = 'report.validated' WHERE seq = 3",
    ],
    ids=["rewritten", "deleted", "column-edited"],
)
def test_tampering_past_the_triggers_is_detected(ledger, tamper):
    drop_append_only_guards(ledger)
    with ledger.engine.begin() as conn:
        conn.exec_driver_sql(tamper)
    with pytest.raises(EvidenceError) as error:
        ledger.verify_chain()
    assert error.value.code == "LEDGER_INVALID"


def _row() -> dict:
    return {
        "identity": "f" * 64, "tenant": SMALL.tenant, "period": SMALL.period, "bundle_key": "bundles/x",
        "source_sha256": "1" * 64, "unsigned_sha256": "2" * 64, "report_sha256": "3" * 64,
        "statement_sha256": "4" * 64, "renderer_version": "r", "key_id": "k",
    }


KEY = JobKey(SMALL.tenant, SMALL.period, "1" * 64, "r", "p")


def _publish(ledger, row, actor="run-1"):
    ledger.accept_job(KEY, actor)
    lease = ledger.acquire_lease(KEY.job_id, actor, 60)
    return ledger.publish(row, lease, actor, extra="x")


def test_publication_event_and_job_commit_together_and_converge(ledger):
    committed, created = _publish(ledger, _row())
    again, created_again = ledger.publish(_row() | {"report_sha256": "5" * 64}, Lease(KEY.job_id, 99, "x", 0), "run-2")
    assert created and not created_again and again == committed
    event = ledger.event(committed["event_seq"])
    assert event.event_type == "bundle.published" and event.body["details"]["report_sha256"] == "3" * 64
    assert ledger.job(KEY.job_id)["state"] == "succeeded"
    assert ledger.verify_chain() == 6  # 3 fixture events, job.accepted, job.running, bundle.published


def test_concurrent_appends_keep_one_chain(ledger):
    from concurrent.futures import ThreadPoolExecutor

    def append(i):
        return ledger.record(SMALL, "report.rendered", f"{i + 100:064x}", f"run-{i}").seq

    seqs = list(ThreadPoolExecutor(6).map(append, range(24)))
    assert len(set(seqs)) == 24 and ledger.verify_chain() == 27


def test_migrations_are_versioned_and_idempotent(ledger):
    again = Ledger(ledger.engine.url.render_as_string(hide_password=False))
    assert again.verify_chain() == 3
    with ledger.engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM evidence_ledger_version")).scalar() == "0002"


@pytest.mark.parametrize(
    "table, tamper",
    [
        ("audit_events", "UPDATE audit_events SET event_id = '00000000-0000-0000-0000-000000000000' WHERE seq = 2"),
        ("audit_events", "UPDATE audit_events SET period = '1999-01' WHERE seq = 2"),
        ("publications", "UPDATE publications SET report_sha256 = '{}'".format("9" * 64)),
        ("publications", "DELETE FROM publications"),
        ("jobs", "UPDATE jobs SET state = 'rejected', last_reason = 'REPORT_INVALID'"),
        ("jobs", "UPDATE jobs SET lease_token = 7"),
        ("jobs", "UPDATE jobs SET renderer_version = 'other'"),
    ],
    ids=["event-id", "event-period", "publication-report", "publication-deleted", "job-state", "job-lease",
         "job-identity"],
)
def test_every_column_that_mirrors_an_event_is_checked(ledger, table, tamper):
    _publish(ledger, _row())
    assert ledger.verify_chain() == 6
    if table != "jobs":  # jobs are mutable by design: no trigger to drop
        drop_append_only_guards(ledger, table)
    with ledger.engine.begin() as conn:
        conn.exec_driver_sql(tamper)
    with pytest.raises(EvidenceError) as error:
        ledger.verify_chain()
    assert error.value.code == "LEDGER_INVALID"


@pytest.mark.parametrize("body", ["not json", "{}", '{"a":' * 100_000])
def test_a_rechained_body_that_is_not_an_event_is_invalid(ledger, body):
    """The last event's body is replaced and its hash recomputed: the chain holds, the body must still be an event."""
    drop_append_only_guards(ledger)
    with ledger.engine.begin() as conn:
        prev = conn.execute(text("SELECT prev_hash FROM audit_events WHERE seq = 3")).scalar()
        conn.execute(text("UPDATE audit_events SET body = :body, event_hash = :hash WHERE seq = 3"),
                     {"body": body, "hash": chain_hash(prev, body)})
    with pytest.raises(EvidenceError) as error:
        ledger.verify_chain()
    assert error.value.code == "LEDGER_INVALID"


@pytest.mark.parametrize("content", [None, b"", bytes(range(256)) * 64])
def test_read_only_open_writes_nothing_and_classifies(tmp_path, content):
    path = tmp_path / "ledger.sqlite"
    if content is not None:
        path.write_bytes(content)
    expected = "LEDGER_NOT_FOUND" if content is None else "LEDGER_INVALID"
    with pytest.raises(EvidenceError) as error:
        Ledger(f"sqlite:///{path}", read_only=True)
    assert error.value.code == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == ([] if content is None else ["ledger.sqlite"])
    assert content is None or path.read_bytes() == content


def test_read_only_open_verifies_an_existing_ledger_without_changing_it(ledger, backend, tmp_path):
    url = ledger.engine.url.render_as_string(hide_password=False)
    ledger.engine.dispose()
    database = tmp_path / "ledger.sqlite"
    before = database.read_bytes() if "EVIDENCE_LEDGER_URL" not in backend else None
    reader = Ledger(url, read_only=True)
    assert reader.verify_chain() == 3
    with pytest.raises(EvidenceError):
        reader.record(SMALL, "report.rendered", "f" * 64, "run-x")
    reader.engine.dispose()
    # (SQLite may create its -wal/-shm coordination files to read a WAL database; the database is untouched.)
    assert before is None or database.read_bytes() == before
