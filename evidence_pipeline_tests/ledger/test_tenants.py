"""The tenant registry in the ledger's database, its file import and `evidence tenant add | list`."""

import json

import pytest
from click.testing import CliRunner

from evidence_pipeline.audit.authorizations import recheck_ledger
from evidence_pipeline.cli import main
from evidence_pipeline.config import Settings
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.ledger import Ledger
from evidence_pipeline.ledger.tenants import EXISTING, OFFBOARDED, REGISTERED
from evidence_pipeline.models import EventType
from evidence_pipeline.operations.tenant_file import RejectedLine, read_tenant_file
from evidence_pipeline_tests.support.pieces import pieces_of
from evidence_pipeline_tests.support.signers import Signers, request_text, signers_of


def test_tenant_file_keeps_valid_slugs_and_reports_bad_lines_by_number(tmp_path):
    registry = tmp_path / "tenants.txt"
    registry.write_text(
        "acme-books\nBad|Id\n\n# comment\ndelta-foods  # note\nacme-books\n-leading\n" + "a" * 64 + "\n"
    )
    tenants, rejected = read_tenant_file(registry)
    assert tenants == ["acme-books", "delta-foods"]
    assert rejected == [
        RejectedLine(2, "TENANT_ID_INVALID"),
        RejectedLine(7, "TENANT_ID_INVALID"),
        RejectedLine(8, "TENANT_ID_INVALID"),
    ]


def test_registry_records_each_tenant_once_in_order_and_never_brings_back_an_offboarded_one(runtime):
    """On both backends: registration order is the registry's order; registering again changes nothing; the rows
    are projections of the hashed events, so `ledger verify` catches an edited row."""
    from evidence_pipeline.runtime import runtime_for

    registry, signers = runtime.tenants, signers_of(runtime.ledger)
    actor_events = runtime.ledger.verify_chain()
    fixtures = registry.active()  # the fixture months' tenants, registered by the fixture
    assert signers.register_tenants(["zeta", "acme", "zeta"]) == {"zeta": REGISTERED, "acme": REGISTERED}
    assert signers.register_tenants(["acme", "beta"]) == {"acme": EXISTING, "beta": REGISTERED}
    assert registry.active() == [*fixtures, "zeta", "acme", "beta"]
    events = runtime.ledger.events_of_type(EventType.TENANT_REGISTERED)[len(fixtures) :]
    assert [(e["tenant"], e["actor"]) for e in events] == [("zeta", "olga"), ("acme", "olga"), ("beta", "olga")]
    assert events[0]["details"]["authorization"] == events[1]["details"]["authorization"]  # one request, a run
    with pytest.raises(EvidenceError) as refused:
        signers.register_tenants(["ok", "Not A Slug"])
    assert refused.value.code == ReasonCode.TENANT_ID_INVALID
    assert registry.active() == [*fixtures, "zeta", "acme", "beta"]

    documents = runtime_for(runtime.settings)
    with runtime.ledger.writing() as conn:  # what the approved offboarding records, in the action gate's transaction
        documents.tokens.record_offboarding(conn, "acme", "operator", {"reason": "left"})
    assert registry.active() == [*fixtures, "zeta", "beta"]
    [(offboarded, _, _)] = runtime.ledger.stored_events(EventType.TENANT_OFFBOARDED, "acme")
    [acme] = [row for row in registry.listing() if row.tenant == "acme"]
    assert acme.offboarded_seq == offboarded.seq > acme.registered_seq
    assert signers.register_tenants(["acme"]) == {"acme": OFFBOARDED}
    assert runtime.ledger.verify_chain() == actor_events + 4
    assert [found.action for found in recheck_ledger(runtime.ledger, 300)][-3:] == ["tenant.register"] * 3

    table = runtime.ledger.tenants
    for tamper, undo in (
        (
            table.update().where(table.c.tenant == "acme").values(offboarded_seq=None),  # acme back, behind the ledger
            table.update().where(table.c.tenant == "acme").values(offboarded_seq=offboarded.seq),
        ),
        (
            table.insert().values(
                tenant="ghost", registered_seq=offboarded.seq, registered_at=0.0
            ),  # no event of its own
            table.delete().where(table.c.tenant == "ghost"),
        ),
    ):
        with runtime.ledger.engine.begin() as conn:  # someone with write access to the database
            conn.execute(tamper)
        with pytest.raises(EvidenceError) as tampered:
            runtime.ledger.verify_chain()
        assert tampered.value.code == ReasonCode.LEDGER_INVALID and "tenant registry" in tampered.value.message
        with runtime.ledger.engine.begin() as conn:
            conn.execute(undo)
        assert runtime.ledger.verify_chain() == actor_events + 4


def test_tenant_commands_register_import_and_list(tmp_path):
    env = {"EVIDENCE_HOME": str(tmp_path / "home")}
    runner = CliRunner()
    signers = Signers(Ledger(Settings.from_env(env).ledger_url), tmp_path / "actors")
    unsigned = runner.invoke(main, ["tenant", "add", "acme"], env=env)
    assert unsigned.exit_code != 0 and "ACTION_UNSIGNED" in unsigned.output, unsigned.output
    auditor = runner.invoke(main, ["tenant", "add", "acme", "--key", signers.key_file("audrey")], env=env)
    assert auditor.exit_code != 0 and "ACTION_FORBIDDEN" in auditor.output, auditor.output
    env["EVIDENCE_ACTOR_KEY"] = signers.key_file("olga")  # the operator
    added = runner.invoke(main, ["tenant", "add", "acme", "globex"], env=env)
    assert added.exit_code == 0 and "registered (2): acme globex" in added.output, added.output
    listed = tmp_path / "tenants.txt"
    listed.write_text("# the old registry file\nglobex\ninitech  # new\n")
    imported = runner.invoke(main, ["tenant", "add", "--from-file", str(listed), "--json"], env=env)
    assert json.loads(imported.output) == {"globex": "existing", "initech": "registered"}
    listed.write_text("umbrella\nNOT-A-SLUG\n\nx|y\n")
    rejected = runner.invoke(main, ["tenant", "add", "--from-file", str(listed)], env=env)
    assert rejected.exit_code == 2 and "lines 2, 4" in rejected.output and "TENANT_ID_INVALID" in rejected.output
    assert "NOT-A-SLUG" not in rejected.output  # what a user typed is not echoed
    assert runner.invoke(main, ["tenant", "add"], env=env).exit_code == 2

    asked = ["tenant", "offboard", "globex", "--reason", "left"]  # the operator asks, an approver approves
    assert runner.invoke(main, asked, env=env).exit_code == 0
    approved = ["tenant", "offboard", "globex", "--approve", "--key", signers.key_file("bob")]
    assert runner.invoke(main, approved, env=env).exit_code == 0
    again = runner.invoke(main, ["tenant", "add", "globex", "umbrella"], env=env)
    assert again.exit_code == 1 and "TENANT_OFFBOARDED" in again.output and "registered (1): umbrella" in again.output
    active = runner.invoke(main, ["tenant", "list"], env=env)
    assert [line.split()[0] for line in active.output.splitlines()] == ["acme", "initech", "umbrella"]
    everyone = json.loads(runner.invoke(main, ["tenant", "list", "--all", "--json"], env=env).output)
    assert [(row["tenant"], row["offboarded_seq"] is not None) for row in everyone] == [
        ("acme", False),
        ("globex", True),
        ("initech", False),
        ("umbrella", False),
    ]
    assert runner.invoke(main, ["ledger", "verify"], env=env).exit_code == 0


def test_a_file_of_more_tenants_than_one_signed_request_holds_registers_them_all_in_order(tmp_path):
    """1,050 ids of 63 characters are 69 KB of request, past the 64 KiB a signed request may have. Before: the whole
    file was one request, refused ACTION_REQUEST_INVALID, and 10,000 tenants could not be registered from a file.
    Now one request per REGISTER_PER_REQUEST tenants, each tenant's event storing its own request."""
    from evidence_pipeline.actors.requests import MAX_ENVELOPE_BYTES
    from evidence_pipeline.cli.tenant import REGISTER_PER_REQUEST

    env = {"EVIDENCE_HOME": str(tmp_path / "home")}
    ledger = Ledger(Settings.from_env(env).ledger_url)
    env["EVIDENCE_ACTOR_KEY"] = Signers(ledger, tmp_path / "actors").key_file("olga")
    wanted = [f"t{n:04d}-" + "x" * 57 for n in range(1050)]
    assert len(json.dumps(wanted)) > MAX_ENVELOPE_BYTES
    listed = tmp_path / "tenants.txt"
    listed.write_text("\n".join(wanted) + "\n")
    added = CliRunner().invoke(main, ["tenant", "add", "--from-file", str(listed), "--json"], env=env)
    assert added.exit_code == 0, added.output
    assert json.loads(added.output) == dict.fromkeys(wanted, REGISTERED)
    assert pieces_of(ledger).tenants.active() == wanted
    requests = [request_text(e["details"]["authorization"]) for e in ledger.events_of_type(EventType.TENANT_REGISTERED)]
    assert len(set(requests)) == -(-len(wanted) // REGISTER_PER_REQUEST)  # 11 requests, each signed on its own
    assert all(len(request) < MAX_ENVELOPE_BYTES // 8 for request in requests)
    rechecked = recheck_ledger(ledger, 300)  # every stored request verifies, each by its signer
    assert {(found.action, found.actor) for found in rechecked[-len(wanted) :]} == {("tenant.register", "olga")}
