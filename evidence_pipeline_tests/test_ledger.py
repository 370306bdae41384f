import pytest
from sqlalchemy import text
from sqlalchemy.exc import DatabaseError

from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.ledger import Ledger
from evidence_pipeline_tests.conftest import SMALL


@pytest.fixture
def ledger(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    for i in range(3):
        ledger.record(SMALL, "report.rendered", f"{i:064x}", "run-1", pages=i)
    return ledger


def test_chain_verifies(ledger):
    assert ledger.verify_chain() == 3
    assert ledger.has_event("report.rendered", f"{1:064x}") and not ledger.has_event("report.validated", f"{1:064x}")


@pytest.mark.parametrize("statement", ["UPDATE audit_events SET event_type = 'x'", "DELETE FROM audit_events"])
def test_database_refuses_to_rewrite_history(ledger, statement):
    with pytest.raises(DatabaseError, match="LEDGER_APPEND_ONLY"):
        with ledger.engine.begin() as conn:
            conn.execute(text(statement))
    assert ledger.verify_chain() == 3


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
    with ledger.engine.begin() as conn:  # an attacker with DDL rights drops the guard first
        conn.execute(text("DROP TRIGGER audit_events_no_update"))
        conn.execute(text("DROP TRIGGER audit_events_no_delete"))
        conn.exec_driver_sql(tamper)
    with pytest.raises(EvidenceError) as error:
        ledger.verify_chain()
    assert error.value.code == "LEDGER_INVALID"


def test_publication_and_event_commit_together_and_converge(ledger):
    row = {
        "identity": "f" * 64, "tenant": SMALL.tenant, "period": SMALL.period, "bundle_key": "bundles/x",
        "source_sha256": "1" * 64, "unsigned_sha256": "2" * 64, "report_sha256": "3" * 64,
        "statement_sha256": "4" * 64, "renderer_version": "r", "key_id": "k",
    }
    committed, created = ledger.publish(row, "run-1", extra="x")
    again, created_again = ledger.publish(row | {"report_sha256": "5" * 64}, "run-2")
    assert created and not created_again and again == committed
    event = ledger.event(committed["event_seq"])
    assert event.event_type == "bundle.published" and event.body["details"]["report_sha256"] == "3" * 64
    assert ledger.verify_chain() == 4
