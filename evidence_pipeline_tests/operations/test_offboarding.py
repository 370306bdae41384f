"""Tenant offboarding: new work stops, what is not evidence is erased and recorded, the evidence and ledger stay."""

from __future__ import annotations

import pytest

from evidence_pipeline.audit.verify import verify_bundle
from evidence_pipeline.config import Settings
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.ledger import Ledger
from evidence_pipeline.ledger import jobs as states
from evidence_pipeline.models import EventType, TenantMonth
from evidence_pipeline.monthly.bundle import staging_key
from evidence_pipeline.monthly.pipeline import preview_stage, run_tenant_month
from evidence_pipeline.monthly.sources import pin_latest
from evidence_pipeline.runtime import RunInfo
from evidence_pipeline.synthetic.demo_data import demo_transactions
from evidence_pipeline_tests.support.fixture_sources import publish_revision
from evidence_pipeline_tests.support.intake_server import client, error_code, pdf_bytes, submit, tokens, upload
from evidence_pipeline_tests.support.offboarding import approve, ask
from evidence_pipeline_tests.support.signers import Signers, signers_of

ACME, GLOBEX = TenantMonth("acme", "2026-10"), TenantMonth("globex", "2026-10")


def _month_of_evidence(rt, tenant_month: TenantMonth):
    revision = publish_revision(rt, tenant_month, demo_transactions(TenantMonth("acme-books", "2026-10")))
    preview_stage(rt, pin_latest(rt.sources, tenant_month))
    return revision, run_tenant_month(rt, tenant_month, RunInfo(f"offboarding-{tenant_month.tenant}"))


def test_offboarding_stops_new_work_erases_what_is_not_evidence_and_keeps_the_bundles(documents, intake):
    rt = documents
    acme_token, globex_token = tokens(documents)
    registry, signers = rt.tenants, signers_of(rt.ledger)
    signers.register_tenants(["acme", "globex"])
    _, acme_bundle = _month_of_evidence(rt, ACME)
    _, globex_bundle = _month_of_evidence(rt, GLOBEX)
    with client(intake, acme_token) as http:
        document = upload(http, pdf_bytes(1)).json()
        waiting = submit(http, "waiting", {"operation": "inspect", "inputs": [document["document_id"]]}).json()
    with client(intake, globex_token) as http:
        upload(http, pdf_bytes(2))
    acme_objects = {
        "sources": rt.sources.list("acme"),
        "previews": rt.previews.list("previews/acme"),
        "staging": [staging_key(acme_bundle.unsigned_sha256)],
        "documents": documents.document_store.list("acme"),
    }
    assert all(acme_objects.values()) and rt.staging.exists(acme_objects["staging"][0])

    ask(documents, "acme", "contract ended")
    result = approve(documents, "acme")

    assert result["first_run"] and result["tokens_revoked"] == 1 and result["jobs_rejected"] == 1
    locked = rt.settings.s3_object_lock_mode is not None  # aws backend: sources and the archive are under retention
    kept = result["kept_until_retention"]
    assert sorted(kept["sources"]) == (acme_objects["sources"] if locked else [])
    assert result["erased"] == {
        name: 0 if locked and name == "sources" else len(keys) for name, keys in acme_objects.items()
    }
    # erased from every private store, and only acme's
    assert rt.sources.list("acme") == (acme_objects["sources"] if locked else [])
    assert rt.previews.list("previews/acme") == [] and documents.document_store.list("acme") == []
    if locked:  # erased means every version is gone from the versioned bucket, not hidden by a delete marker
        store = documents.document_store
        listed = store.client.list_object_versions(Bucket=store.bucket, Prefix=store._key("acme") + "/")
        assert not listed.get("Versions") and not listed.get("DeleteMarkers")
    assert not rt.staging.exists(acme_objects["staging"][0])
    assert rt.staging.exists(staging_key(globex_bundle.unsigned_sha256)) and documents.document_store.list("globex")
    assert rt.previews.list("previews/globex") and rt.sources.list("globex")
    # the evidence stays and verifies; the ledger records the decision and stays verifiable
    assert verify_bundle(rt.archive, acme_bundle.bundle_key).ok
    assert result["evidence"]["bundles"] == 1 and (result["evidence"]["retained_until"] is not None) == locked
    [event] = rt.ledger.events_of_type(EventType.TENANT_OFFBOARDED, "acme")
    assert event["actor"] == "bob" and event["details"]["reason"] == "contract ended"  # the approver decides
    assert event["details"]["requested"]["actor"] == "olga"  # on the operator's request
    assert event["details"]["erase"] == {
        name: [] if locked and name == "sources" else keys for name, keys in acme_objects.items()
    }
    rt.ledger.verify_chain()
    # no new work: registry, tokens, jobs, runs
    assert registry.active() == ["globex"]
    assert signers.register_tenants(["acme", "initech"]) == {"acme": "offboarded", "initech": "registered"}
    with client(intake, acme_token) as http:
        assert error_code(upload(http, pdf_bytes(3))) == ReasonCode.TOKEN_INVALID
    assert documents.document_jobs.job("acme", waiting["job_id"]).state == states.REJECTED
    with pytest.raises(EvidenceError) as refused:
        run_tenant_month(rt, ACME, RunInfo("after-offboarding"))
    assert refused.value.code == ReasonCode.TENANT_OFFBOARDED
    with pytest.raises(EvidenceError) as refused:
        signers.issue_token("acme")
    assert refused.value.code == ReasonCode.TENANT_OFFBOARDED
    assert rt.ledger.offboarded_tenants() == {"acme"}

    # a second run converges: nothing more to erase, no second record
    again = approve(documents, "acme")
    assert not again["first_run"] and again["erased"] == dict.fromkeys(acme_objects, 0)
    assert again["offboarded_at"] == result["offboarded_at"]
    assert len(rt.ledger.events_of_type(EventType.TENANT_OFFBOARDED, "acme")) == 1
    assert rt.ledger.events_of_type(EventType.TENANT_DATA_ERASED, "acme") == []

    # an object that appeared since (work that raced the first run) is erased by the next and recorded
    late = rt.previews.put_once("previews/acme/2026-10/late.pdf", b"late")
    third = approve(documents, "acme")
    assert third["erased"]["previews"] == 1 and not rt.previews.exists(late.key)
    [erased] = rt.ledger.events_of_type(EventType.TENANT_DATA_ERASED, "acme")
    assert erased["details"]["erase"]["previews"] == [late.key]
    rt.ledger.verify_chain()


def test_offboard_command_reports_and_refuses_an_empty_reason(tmp_path):
    from click.testing import CliRunner

    from evidence_pipeline.cli import main

    env = {"EVIDENCE_HOME": str(tmp_path / "home")}
    signers = Signers(Ledger(Settings.from_env(env).ledger_url), tmp_path / "actors")
    olga, bob = ["--key", signers.key_file("olga")], ["--key", signers.key_file("bob")]
    empty = CliRunner().invoke(main, ["tenant", "offboard", "acme", "--reason", "  ", *olga], env=env)
    assert empty.exit_code == 2 and "printable" in empty.output
    asked = CliRunner().invoke(main, ["tenant", "offboard", "acme", "--reason", "left", *olga], env=env)
    assert asked.exit_code == 0 and "--approve" in asked.output, asked.output
    done = CliRunner().invoke(main, ["tenant", "offboard", "acme", "--approve", *bob], env=env)
    assert done.exit_code == 0, done.output
    assert "tenant acme offboarded at" in done.output and "evidence kept: 0 bundles" in done.output
    again = CliRunner().invoke(main, ["tenant", "offboard", "acme", "--approve", *bob], env=env)
    assert again.exit_code == 0 and "this one converged" in again.output
