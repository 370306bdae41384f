import re
import socket
import threading
import time

import pytest
from alembic import command
from sqlalchemy import create_engine, event, inspect, text
from sqlalchemy.exc import DatabaseError

from evidence_pipeline.canonical import canonical
from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.ledger import Ledger
from evidence_pipeline.ledger import ledger as ledger_module
from evidence_pipeline.ledger.admission import Clock
from evidence_pipeline.ledger.chain import GENESIS_HASH, chain_hash
from evidence_pipeline.ledger.documents import DocumentRecords
from evidence_pipeline.ledger.jobs import JobKey, Lease
from evidence_pipeline.ledger.ledger import migration_config
from evidence_pipeline_tests.support.fixture_sources import SMALL
from evidence_pipeline_tests.support.pieces import pieces_of
from evidence_pipeline_tests.support.tampering import drop_append_only_guards


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
    [
        "UPDATE evidence_audit_events SET event_type = 'x'",
        "DELETE FROM evidence_audit_events",
        "DELETE FROM evidence_publications",
        "TRUNCATE evidence_audit_events CASCADE",
    ],
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
        "UPDATE evidence_audit_events SET body = replace(body, '\"pages\":1', '\"pages\":9') WHERE seq = 2",
        "DELETE FROM evidence_audit_events WHERE seq = 2",
        "UPDATE evidence_audit_events SET event_type = 'report.validated' WHERE seq = 3",
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
        "identity": "f" * 64,
        "tenant": SMALL.tenant,
        "period": SMALL.period,
        "bundle_key": "bundles/x",
        "source_sha256": "1" * 64,
        "unsigned_sha256": "2" * 64,
        "report_sha256": "3" * 64,
        "statement_sha256": "4" * 64,
        "renderer_version": "r",
        "key_id": "k",
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
    event = ledger.event(committed.event_seq)
    assert event.event_type == "bundle.published" and event.body["details"]["report_sha256"] == "3" * 64
    assert ledger.job(KEY.job_id).state == "succeeded"
    assert ledger.verify_chain() == 6  # 3 fixture events, job.accepted, job.running, bundle.published


def test_only_progress_commits_without_waiting_for_the_disk(ledger):
    """Every transaction is durable (SQLite synchronous=FULL, PostgreSQL synchronous_commit on) unless it is
    progress that a later commit covers; a non-durable one leaves the next one durable again."""
    if ledger.engine.dialect.name == "postgresql":
        query, durable, progress = "SHOW synchronous_commit", "on", "off"
    else:
        query, durable, progress = "PRAGMA synchronous", 2, 1
    seen = []
    for flag in (True, False, True):
        with ledger.writing(durable=flag) as conn:
            seen.append(conn.exec_driver_sql(query).scalar())
    with ledger.writing() as conn:
        seen.append(conn.exec_driver_sql(query).scalar())
    assert seen == [durable, progress, durable, durable]


def test_a_transaction_reads_the_chain_head_once_and_a_rolled_back_one_leaves_none_behind(ledger):
    """Within a writing transaction each append chains on the one before it without asking the database again;
    what a rolled-back transaction appended is never the head of the next one on the same pooled connection."""
    heads = []

    def count(_conn, _cursor, statement, *_args) -> None:
        if "ORDER BY evidence_audit_events.seq DESC" in statement:
            heads.append(statement)

    event.listen(ledger.engine, "before_cursor_execute", count)
    try:
        ledger._transact(
            lambda conn: [
                ledger._append(conn, SMALL, "report.rendered", f"{i + 10:064x}", actor="run-2", details={})
                for i in range(3)
            ]
        )
        assert len(heads) == 1
        with pytest.raises(RuntimeError), ledger.writing() as conn:
            ledger._append(conn, SMALL, "report.rendered", f"{20:064x}", actor="run-3", details={})
            raise RuntimeError("the work after the append failed")
        ledger.record(SMALL, "report.rendered", f"{21:064x}", "run-3")
    finally:
        event.remove(ledger.engine, "before_cursor_execute", count)
    assert len(heads) == 3 and ledger.verify_chain() == 7  # one head per transaction; 3 + 3 + 1 events


def test_concurrent_appends_keep_one_chain(ledger):
    from concurrent.futures import ThreadPoolExecutor

    def append(i):
        return ledger.record(SMALL, "report.rendered", f"{i + 100:064x}", f"run-{i}").seq

    seqs = list(ThreadPoolExecutor(6).map(append, range(24)))
    assert len(set(seqs)) == 24 and ledger.verify_chain() == 27


def test_waiting_writers_commit_together_and_each_sees_only_its_own_failure(ledger):
    """_transact_together: callers that queue while another commits are committed in one transaction; when one
    caller's work fails, the others still commit, and the failure is raised to that caller alone."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    def append_all(conn, items):
        if 3 in items:
            raise EvidenceError("REQUEST_INVALID", "this caller's own failure")
        return [
            ledger._append(conn, SMALL, "report.rendered", f"{i + 500:064x}", actor=f"run-{i}", details={}).seq
            for i in items
        ]

    def call(i):
        try:
            return ledger._transact_together(i, append_all)
        except EvidenceError as error:
            return error.code

    with ThreadPoolExecutor(8) as pool:
        with ledger._turn:  # held until all eight callers wait for it
            calls = [pool.submit(call, i) for i in range(8)]
            while len(ledger._waiting) < 8:
                threading.Event().wait(0.01)
        outcomes = [c.result(timeout=60) for c in calls]
    assert outcomes[3] == "REQUEST_INVALID"
    seqs = outcomes[:3] + outcomes[4:]
    assert len(set(seqs)) == 7 and ledger.verify_chain() == 10


def test_a_burst_reuses_the_connections_an_earlier_burst_opened(ledger):
    """Three bursts of 12 callers holding a connection at once open 12 connections, not 12 + 7 + 7: the default
    pool closed every connection past its fifth at check-in, and on PostgreSQL each new one is a forked backend."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    opened = []
    ledger.engine.dispose()  # from no connection
    event.listen(ledger.engine, "connect", lambda *args: opened.append(1))
    for _ in range(3):
        together = threading.Barrier(12)

        def hold():
            with ledger.engine.connect() as conn:
                together.wait(timeout=60)
                return conn.execute(text("SELECT 1")).scalar()

        with ThreadPoolExecutor(12) as pool:
            assert list(pool.map(lambda _: hold(), range(12))) == [1] * 12
    assert len(opened) == 12


def test_each_requests_reads_run_outside_a_transaction_on_postgresql(ledger):
    """An upload's token lookup and quota read are one statement each: in a transaction, psycopg2 sent a BEGIN
    before and the pool a ROLLBACK after, two more round trips each (848 rollbacks for 600 uploads)."""
    if ledger.engine.dialect.name != "postgresql":
        pytest.skip("SQLite's transactions cost no round trip")
    tokens, records = pieces_of(ledger).tokens, pieces_of(ledger).document_records

    def issued(conn):
        pieces_of(ledger).tenants.register(conn, ["acme"], "test", {})  # a token is issued to a registered tenant
        return tokens.issue_token(conn, "acme", "test", {})

    _, token, _ = ledger._transact(issued)
    in_transaction = []
    event.listen(
        ledger.engine,
        "before_cursor_execute",
        lambda conn, cursor, *args: in_transaction.append(not cursor.connection.autocommit),
    )
    assert tokens.caller_of_token(token)[0] == "acme"
    assert records.stored_bytes("acme") == 0 and records.document("acme", "doc_none") is None
    assert in_transaction == [False, False, False]


def _append_in_a_process(url: str, first: int) -> list[int]:
    ledger = Ledger(url)
    return [ledger.record(SMALL, "report.rendered", f"{i:064x}", "run-p").seq for i in range(first, first + 10)]


def test_writers_in_several_processes_keep_one_chain(ledger):
    """Intake's workers and Dagster's run workers write one ledger from several processes: all of them commit."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    url = ledger.engine.url.render_as_string(hide_password=False)
    with ProcessPoolExecutor(3, mp_context=multiprocessing.get_context("spawn")) as pool:
        seqs = sum(pool.map(_append_in_a_process, [url] * 3, [200, 300, 400]), [])
    assert len(set(seqs)) == 30 and ledger.verify_chain() == 33


def test_migrations_are_versioned_and_idempotent(ledger):
    again = Ledger(ledger.engine.url.render_as_string(hide_password=False))
    assert again.verify_chain() == 3
    with ledger.engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM evidence_ledger_version")).scalar() == "0015"


def _admit(records: DocumentRecords, tenant: str, digit: str, size: int):
    """``tenant``'s upload of ``size`` bytes whose digest is ``digit`` repeated, under a quota of 2,500 bytes."""
    upload = {"media_type": "application/pdf", "store_key": f"{tenant}/{digit}", "actor": "test", "clock": Clock(None)}
    return records.admit_document(tenant, digit * 64, size=size, max_bytes=2500, **upload)


def test_each_tenants_stored_bytes_are_the_sum_of_its_documents_and_revision_0015_computes_them(ledger):
    """Admission reads the running total, not a sum over the tenant's history (23.5 ms at 100,000 documents on
    SQLite, twice an upload); it must equal that sum, and 0015 sums the documents admitted before it."""
    records = pieces_of(ledger).document_records

    def admit(tenant: str, digit: str, size: int):
        return _admit(records, tenant, digit, size)

    for tenant, digit, size in (("acme", "a", 1000), ("acme", "b", 1200), ("globex", "a", 700), ("acme", "a", 1000)):
        admit(tenant, digit, size)  # the last is acme's first document again: admitted once, counted once
    with pytest.raises(EvidenceError) as refused:
        admit("acme", "c", 301)  # 2,200 + 301 > 2,500
    assert refused.value.code == "REQUEST_EXCEEDS_QUOTA"  # documents are kept: it never fits
    sums = "SELECT tenant, SUM(size) FROM evidence_documents GROUP BY tenant ORDER BY tenant"
    totals = "SELECT tenant, stored_bytes FROM evidence_tenant_storage ORDER BY tenant"
    with ledger.engine.connect() as conn:
        assert conn.execute(text(totals)).all() == conn.execute(text(sums)).all() == [("acme", 2200), ("globex", 700)]
    assert (records.stored_bytes("acme"), records.stored_bytes("initech")) == (2200, 0)

    with ledger.engine.begin() as conn:  # the ledger as revision 0014 left it
        conn.execute(text("DROP TABLE evidence_tenant_storage"))
        conn.execute(text("UPDATE evidence_ledger_version SET version_num = '0014'"))
    upgraded = Ledger(ledger.engine.url.render_as_string(hide_password=False))
    with upgraded.engine.connect() as conn:
        assert conn.execute(text(totals)).all() == [("acme", 2200), ("globex", 700)]
    assert admit("globex", "b", 1800)[1]  # 700 + 1,800 = 2,500: the quota, exactly


def test_a_turns_admissions_share_a_few_statements_and_each_caller_gets_its_own_answer(ledger):
    """Admissions that queue for one turn are written together: one lookup, one lock, one read of the totals, one
    insert of the events, one of the documents and one write per tenant's total. On PostgreSQL each statement is a
    round trip under the admissions' lock; six per upload bounded a burst to 0.63 of the durable floor. In a turn,
    the same bytes twice are one document, and each upload's quota counts the turn's uploads before it."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    records = pieces_of(ledger).document_records

    def admit(tenant: str, digit: str, size: int):
        try:
            row, created = _admit(records, tenant, digit, size)
            return row.document_id, created
        except EvidenceError as error:
            return error.code

    def one_turn(uploads):
        statements = []

        def count(conn, cursor, statement, *args):
            statements.append(statement)

        with ThreadPoolExecutor(len(uploads)) as pool:
            with ledger._turn:  # held until every caller waits for it
                calls = [pool.submit(admit, *upload) for upload in uploads]
                while len(ledger._waiting) < len(uploads):
                    threading.Event().wait(0.01)
                event.listen(ledger.engine, "before_cursor_execute", count)
            try:
                outcomes = [c.result(timeout=60) for c in calls]
            finally:
                event.remove(ledger.engine, "before_cursor_execute", count)
        return outcomes, statements

    admit("acme", "0", 100)  # acme has a running total before the turn, globex and initech do not
    uploads = [
        ("acme", "a", 1000),
        ("globex", "a", 700),
        ("acme", "b", 1200),
        ("acme", "a", 1000),
        ("globex", "b", 500),
        ("initech", "a", 2500),
        ("acme", "0", 100),
    ]
    outcomes, statements = one_turn(uploads)
    assert [created for _, created in outcomes] == [True, True, True, False, True, True, False]
    assert outcomes[0][0] == outcomes[3][0] and len({document_id for document_id, _ in outcomes}) == 6
    lock = 1 if ledger.engine.dialect.name == "postgresql" else 0
    writes = [re.match(r"(INSERT|UPDATE)(?: INTO)? (\w+)", statement) for statement in statements]
    written = [f"{write[1]} {write[2]}" for write in writes if write]
    assert sorted(written) == [
        "INSERT evidence_audit_events",
        "INSERT evidence_documents",
        "INSERT evidence_tenant_storage",
        "INSERT evidence_tenant_storage",
        "UPDATE evidence_tenant_storage",
    ], statements
    assert len(statements) == 3 + lock + len(written), statements  # + the lookup, the totals, the chain head

    # acme has 2,300 stored: its 200 more fit (2,500, the quota), its 1 more then does not; that caller alone is refused
    outcomes, _ = one_turn([("acme", "c", 200), ("acme", "d", 1), ("globex", "c", 100)])
    assert [outcome if isinstance(outcome, str) else outcome[1] for outcome in outcomes] == [
        True,
        "REQUEST_EXCEEDS_QUOTA",
        True,
    ]
    sums = "SELECT tenant, SUM(size) FROM evidence_documents GROUP BY tenant ORDER BY tenant"
    totals = "SELECT tenant, stored_bytes FROM evidence_tenant_storage ORDER BY tenant"
    with ledger.engine.connect() as conn:
        assert (
            conn.execute(text(totals)).all()
            == conn.execute(text(sums)).all()
            == [("acme", 2500), ("globex", 1300), ("initech", 2500)]
        )
    assert ledger.verify_chain() == 3 + 1 + 5 + 2


# Issue 16, finding 12: the ledger's tables move under the evidence_ prefix (Dagster owns `jobs` in a shared
# database). A ledger that revision 0002 created must upgrade in place: same chain, same rows, guards still on.
LEGACY_TABLES = {"audit_events", "publications", "jobs"}
LEDGER_TABLES = {
    "evidence_audit_events",
    "evidence_publications",
    "evidence_jobs",
    "evidence_publication_claims",
    "evidence_tenants",
}


def _ledger_at_revision_0002(url: str) -> int:
    """Write a ledger as revision 0002 and the code of its time left it: 3 chained events, a succeeded job and its
    publication. Returns the number of events."""
    engine = create_engine(url)
    with engine.begin() as conn:
        command.upgrade(migration_config(conn), "0002")
        prev = GENESIS_HASH
        row = _row()
        job = {"job_id": KEY.job_id}
        events = (
            ("job.accepted", KEY.source_sha256, job | {"fidelity": KEY.fidelity}),
            ("job.running", KEY.source_sha256, job | {"lease_token": 1, "attempt": 1}),
            ("bundle.published", row["report_sha256"], job | row),
        )
        for i, (event_type, subject, details) in enumerate(events):
            body = canonical(
                {
                    "event_id": f"00000000-0000-0000-0000-{i:012d}",
                    "event_type": event_type,
                    "tenant": SMALL.tenant,
                    "period": SMALL.period,
                    "subject_sha256": subject,
                    "actor": "run-0",
                    "recorded_at": "2026-11-01T00:00:00.000000+00:00",
                    "details": details,
                }
            )
            event_hash = chain_hash(prev, body)
            conn.execute(
                text(
                    "INSERT INTO audit_events (event_id, event_type, tenant, period, subject_sha256, body, prev_hash,"
                    " event_hash) VALUES (:id, :type, :tenant, :period, :subject, :body, :prev, :hash)"
                ),
                {
                    "id": f"00000000-0000-0000-0000-{i:012d}",
                    "type": event_type,
                    "tenant": SMALL.tenant,
                    "period": SMALL.period,
                    "subject": subject,
                    "body": body,
                    "prev": prev,
                    "hash": event_hash,
                },
            )
            prev = event_hash
        now = time.time()
        conn.execute(
            text(
                "INSERT INTO jobs (job_id, tenant, period, source_sha256, renderer_version, policy_version,"
                " fidelity, state, attempts, lease_token, lease_owner, budget_started_at, created_at, updated_at)"
                " VALUES (:job_id, :tenant, :period, :source, :renderer, :policy, :fidelity, 'succeeded', 1, 1,"
                " 'run-0', :now, :now, :now)"
            ),
            {
                "job_id": KEY.job_id,
                "tenant": KEY.tenant,
                "period": KEY.period,
                "source": KEY.source_sha256,
                "renderer": KEY.renderer_version,
                "policy": KEY.policy_version,
                "fidelity": KEY.fidelity,
                "now": now,
            },
        )
        conn.execute(
            text(
                f"INSERT INTO publications ({', '.join(row)}, event_seq) VALUES "
                f"({', '.join(':' + name for name in row)}, 3)"
            ),
            row,
        )
    engine.dispose()
    return 3


@pytest.mark.empty_database  # the test writes revision 0002 itself
def test_a_ledger_at_revision_0002_upgrades_in_place_and_keeps_its_chain_and_guards(backend, tmp_path):
    url = backend.get("EVIDENCE_LEDGER_URL", f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    events = _ledger_at_revision_0002(url)

    ledger = Ledger(url)  # migrates to the newest revision on first use

    tables = set(inspect(ledger.engine).get_table_names())
    assert LEDGER_TABLES <= tables and not LEGACY_TABLES & tables
    assert ledger.verify_chain() == events
    assert ledger.job(KEY.job_id).state == "succeeded" and ledger.publication("f" * 64).event_seq == 3
    ledger.record(SMALL, "report.rendered", "9" * 64, "run-1")  # the chain goes on from the migrated head
    assert ledger.verify_chain() == events + 1
    statements = [
        "UPDATE evidence_audit_events SET event_type = 'x'",
        "DELETE FROM evidence_audit_events",
        "UPDATE evidence_publications SET key_id = 'x'",
        "DELETE FROM evidence_publications",
    ]
    if ledger.engine.dialect.name == "postgresql":
        statements += ["TRUNCATE evidence_audit_events CASCADE", "TRUNCATE evidence_publications"]
    for statement in statements:
        with pytest.raises(DatabaseError, match="LEDGER_APPEND_ONLY"):
            with ledger.engine.begin() as conn:
                conn.execute(text(statement))
    assert ledger.verify_chain() == events + 1


@pytest.mark.parametrize(
    "table, tamper",
    [
        (
            "evidence_audit_events",
            "UPDATE evidence_audit_events SET event_id = '00000000-0000-0000-0000-000000000000' WHERE seq = 2",
        ),
        ("evidence_audit_events", "UPDATE evidence_audit_events SET period = '1999-01' WHERE seq = 2"),
        ("evidence_publications", "UPDATE evidence_publications SET report_sha256 = '{}'".format("9" * 64)),
        ("evidence_publications", "DELETE FROM evidence_publications"),
        ("evidence_jobs", "UPDATE evidence_jobs SET state = 'rejected', last_reason = 'REPORT_INVALID'"),
        ("evidence_jobs", "UPDATE evidence_jobs SET lease_token = 7"),
        ("evidence_jobs", "UPDATE evidence_jobs SET renderer_version = 'other'"),
    ],
    ids=[
        "event-id",
        "event-period",
        "publication-report",
        "publication-deleted",
        "job-state",
        "job-lease",
        "job-identity",
    ],
)
def test_every_column_that_mirrors_an_event_is_checked(ledger, table, tamper):
    _publish(ledger, _row())
    assert ledger.verify_chain() == 6
    if table != "evidence_jobs":  # jobs are mutable by design: no trigger to drop
        drop_append_only_guards(ledger, table)
    with ledger.engine.begin() as conn:
        conn.exec_driver_sql(tamper)
    with pytest.raises(EvidenceError) as error:
        ledger.verify_chain()
    assert error.value.code == "LEDGER_INVALID"


@pytest.mark.parametrize(
    "tamper",
    [
        "UPDATE evidence_document_jobs SET idempotency_key = 'another-key'",
        "UPDATE evidence_document_jobs SET request_sha256 = '{}'".format("9" * 64),
        "UPDATE evidence_jobs SET state = 'succeeded'",
        "DELETE FROM evidence_document_jobs",
    ],
    ids=["document-job-key", "document-job-request", "document-job-state", "document-job-deleted"],
)
def test_a_document_job_row_is_checked_against_its_identity_and_events(ledger, tamper):
    """A document job's id is its tenant's idempotency key, not a JobKey: ledger verify checks that, too."""
    events = ledger.verify_chain()
    pieces_of(ledger).submissions.submit_job(
        "acme",
        "key-1",
        request_sha256="a" * 64,
        operation="inspect",
        request={"inputs": []},
        policy_version="policy/1",
        actor="test",
        limits=None,
        clock=Clock(None),
    )
    assert ledger.verify_chain() == events + 1
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
        prev = conn.execute(text("SELECT prev_hash FROM evidence_audit_events WHERE seq = 3")).scalar()
        conn.execute(
            text("UPDATE evidence_audit_events SET body = :body, event_hash = :hash WHERE seq = 3"),
            {"body": body, "hash": chain_hash(prev, body)},
        )
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


def test_a_postgresql_server_that_never_answers_is_ledger_unavailable_not_a_wait(monkeypatch):
    """A server that accepts the connection and never speaks (a half-dead host, a stuck proxy): libpq gives up after
    the ledger's connect timeout and the caller gets LEDGER_UNAVAILABLE, a retried failure (before, it waited
    forever)."""
    monkeypatch.setattr(ledger_module, "CONNECT_TIMEOUT_SECONDS", 1)
    server = socket.create_server(("127.0.0.1", 0))
    accepted = []
    threading.Thread(target=lambda: [accepted.append(server.accept()) for _ in range(20)], daemon=True).start()
    codes = []

    def open_ledger():
        try:
            Ledger(f"postgresql+psycopg2://evidence@127.0.0.1:{server.getsockname()[1]}/evidence")
        except EvidenceError as error:
            codes.append(error.code)

    opener = threading.Thread(target=open_ledger, daemon=True)
    opener.start()
    opener.join(120)  # turns the old endless wait into a failure instead of a stuck suite
    assert codes == ["LEDGER_UNAVAILABLE"] and accepted
