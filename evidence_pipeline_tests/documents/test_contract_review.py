"""`contract-review`: the pinned ruleset, extraction and decisions on synthetic leases, and the whole job through the
real intake server and the document worker, on both backends, with an ambiguous signing timeout and a SIGKILL
between the approval signature and the commit."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from asn1crypto import x509 as asn1_x509
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from dagster import DagsterInstance
from pyhanko.pdf_utils.reader import PdfFileReader
from pyhanko.sign.validation import validate_pdf_signature
from pyhanko_certvalidator import ValidationContext
from sqlalchemy import event

from evidence_pipeline.definitions import defs
from evidence_pipeline.documents import ruleset as rulesets
from evidence_pipeline.documents.dispatch import dispatch_batches
from evidence_pipeline.documents.gate import gate
from evidence_pipeline.documents.registry import ProcessorInput, operation, outcome_codes
from evidence_pipeline.documents.review import DECISION, SIGNED, review_contract
from evidence_pipeline.documents.worker import APPROVAL_FIELD, PREDICATE_TYPE, STATEMENT, run_page
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.ledger.document_jobs import WORKER_VERSION, StageChange
from evidence_pipeline.runtime import RunInfo
from evidence_pipeline.signing import dsse
from evidence_pipeline.signing.keys import load_keyring
from evidence_pipeline.signing.pades import sign_pdf, verify_pdf_signature
from evidence_pipeline.store import sha256_hex
from evidence_pipeline.synthetic.lease_contracts import DEFECTS, lease_contract
from evidence_pipeline_tests.support.cli import invoke as _invoke
from evidence_pipeline_tests.support.document_jobs import AmbiguousArchive as _AmbiguousArchive
from evidence_pipeline_tests.support.document_jobs import dispatch, make_due
from evidence_pipeline_tests.support.document_sensor import tick
from evidence_pipeline_tests.support.intake_server import client, error_code, intake_environment, submit, tokens, upload
from evidence_pipeline_tests.support.tools import require_tool

REPO = Path(__file__).resolve().parents[2]
IN_FORCE = rulesets.pin(rulesets.IN_FORCE)
REVIEW = {"operation": "contract-review"}


# --- the ruleset ----------------------------------------------------------------------------------------------


def test_the_ruleset_in_the_repository_is_the_registered_version():
    data = (rulesets.RULESETS_DIR / rulesets.file_name(rulesets.IN_FORCE)).read_bytes()
    assert sha256_hex(data) == rulesets.REGISTERED[rulesets.IN_FORCE]
    loaded = rulesets.load(rulesets.IN_FORCE, IN_FORCE["ruleset_sha256"])
    assert loaded.version == rulesets.IN_FORCE and {r["id"] for r in loaded.rules} >= {
        "dates-consistent",
        "term-within-bounds",
        "rent-positive",
        "every-party-has-a-signer",
        "required-clauses",
    }
    assert operation("contract-review").normalize({}) == IN_FORCE  # a job pins version and digest when accepted


def test_a_changed_ruleset_file_is_refused_not_used(tmp_path):
    copy = tmp_path / "rulesets"
    shutil.copytree(rulesets.RULESETS_DIR, copy)
    path = copy / rulesets.file_name(rulesets.IN_FORCE)
    path.write_bytes(path.read_bytes().replace(b'"max": 36', b'"max": 48'))  # a silent edit of version 2026.1
    for version, pinned in ((rulesets.IN_FORCE, IN_FORCE["ruleset_sha256"]), ("lease-review/2099.9", "0" * 64)):
        with pytest.raises(EvidenceError) as refused:
            rulesets.load(version, pinned, copy)
        assert refused.value.code == ReasonCode.RULESET_INVALID
    with pytest.raises(EvidenceError) as pinned_other:  # the repository's file, but the job pinned other bytes
        rulesets.load(rulesets.IN_FORCE, "f" * 64)
    assert pinned_other.value.code == ReasonCode.RULESET_INVALID


def test_a_candidate_ruleset_must_be_well_formed(tmp_path):
    document = json.loads((rulesets.RULESETS_DIR / rulesets.file_name(rulesets.IN_FORCE)).read_bytes())
    document["ruleset"] = "lease-review/2027.1-rc1"
    candidate = tmp_path / "candidate.json"
    candidate.write_text(json.dumps(document))
    assert rulesets.load_candidate(candidate).version == "lease-review/2027.1-rc1"
    for broken in (
        document | {"rules": [{"id": "term", "check": "term_months", "min": 1}]},  # no start, end, max
        document | {"rules": [{"id": "x", "check": "not_a_check"}]},
        document | {"fields": [{"name": "landlord", "type": "text"}]},  # no label
        {"schema": "evidence-ruleset/v1"},
    ):
        candidate.write_text(json.dumps(broken))
        with pytest.raises(EvidenceError) as refused:
            rulesets.load_candidate(candidate)
        assert refused.value.code == ReasonCode.RULESET_INVALID


# --- decisions on synthetic leases -----------------------------------------------------------------------------


def _review(pdf: bytes) -> tuple[dict, object]:
    file = io.BytesIO(pdf)
    document = ProcessorInput("doc_x", sha256_hex(pdf), len(pdf), gate(file), file)
    result = review_contract([document], IN_FORCE, {})
    return json.loads(result.artifacts[DECISION]), result


def test_synthetic_leases_get_their_known_decisions():
    contracts = [lease_contract(n) for n in range(4 * len(DEFECTS))]  # every defect four times: 56 contracts
    assert {c.defect for c in contracts} == set(DEFECTS)
    for contract in contracts:
        expected = contract.expected
        if expected.decision == ReasonCode.REVIEW_INPUT_INVALID:
            with pytest.raises(EvidenceError) as invalid:
                _review(contract.pdf)
            assert invalid.value.code == expected.decision, contract.defect
            continue
        decision, result = _review(contract.pdf)
        failed = tuple(r["id"] for r in decision["rules"] if r["outcome"] == "fail")
        assert (decision["decision"], tuple(decision["missing"]), failed) == (
            expected.decision,
            expected.missing,
            expected.failed_rules,
        ), (contract.number, contract.defect)
        assert (result.signed, result.rejected) == (
            (SIGNED, None) if expected.decision == "approved" else (None, ReasonCode.REVIEW_POLICY_REJECTED)
        )
    assert lease_contract(7).pdf == lease_contract(7).pdf  # deterministic bytes, so is every decision
    assert _review(lease_contract(7).pdf)[1].artifacts == _review(lease_contract(7).pdf)[1].artifacts


def test_form_fields_come_first_and_text_second():
    form, _ = _review(lease_contract(0, "form_overrides_text").pdf)
    assert form["fields"]["monthly_rent"]["source"] == "form" and form["decision"] == "approved"
    text, _ = _review(lease_contract(0, "text_only").pdf)
    assert {entry["source"] for entry in text["fields"].values()} == {"text"} and text["decision"] == "approved"
    assert text["fields"]["landlord"]["value"] == lease_contract(0, "text_only").values["landlord"]


def test_review_decisions_are_job_outcomes_not_run_failures():
    assert {ReasonCode.REVIEW_INPUT_INVALID, ReasonCode.REVIEW_POLICY_REJECTED} <= outcome_codes()
    assert ReasonCode.REVIEW_DEPENDENCY_TIMEOUT not in outcome_codes()


# --- through the front door ------------------------------------------------------------------------------------


def _stages(documents, job_id: str) -> list[tuple[str, str, int]]:
    return [
        (e["details"]["prior"], e["details"]["stage"], e["details"]["lease_token"])
        for e in documents.ledger.events_of_type("document.stage")
        if e["details"]["job_id"] == job_id
    ]


def _submit_contract(http, key: str, pdf: bytes) -> tuple[str, dict]:
    document = upload(http, pdf).json()
    accepted = submit(http, key, REVIEW | {"inputs": [document["document_id"]]})
    assert accepted.status_code == 202, accepted.text
    return accepted.json()["job_id"], document


def test_an_approved_contract_is_signed_and_a_rejected_one_is_a_decision(documents, intake):
    acme, _ = tokens(documents)
    approved_pdf, rejected_pdf = lease_contract(0).pdf, lease_contract(3).pdf  # none, missing_landlord
    with client(intake, acme) as http:
        for options in ({"ruleset": "lease-review/1999.1"}, {"ruleset_sha256": "0" * 64}):
            refused = submit(http, "bad", REVIEW | {"inputs": [], "options": options})
            assert (refused.status_code, error_code(refused)) == (422, "OPTIONS_INVALID")
        approved_id, approved_doc = _submit_contract(http, "lease-0", approved_pdf)
        rejected_id, rejected_doc = _submit_contract(http, "lease-3", rejected_pdf)
        invalid_id, _ = _submit_contract(http, "blank", lease_contract(13).pdf)  # no_text
        assert http.get(f"/v1/jobs/{approved_id}").json()["stage"] == "accepted"
        outcomes = {o.job_id: (o.state, o.reason) for o in dispatch(documents)}
        approved, rejected, invalid = (http.get(f"/v1/jobs/{i}").json() for i in (approved_id, rejected_id, invalid_id))
    assert outcomes == {
        approved_id: ("succeeded", None),
        rejected_id: ("rejected", "REVIEW_POLICY_REJECTED"),
        invalid_id: ("rejected", "REVIEW_INPUT_INVALID"),
    }
    assert (approved["state"], approved["stage"], approved["reason"]) == ("succeeded", "completed", None)
    assert approved["options"] == IN_FORCE and approved["findings"]["decision"] == "approved"
    assert (rejected["state"], rejected["stage"]) == ("rejected", "rejected")
    assert rejected["reason"] == "REVIEW_POLICY_REJECTED"
    assert rejected["message"] == "rejected under lease-review/2026.1: missing landlord; failed rules: none"
    assert rejected["findings"]["missing"] == ["landlord"] and rejected["findings"]["failed_rules"] == []
    assert (invalid["state"], invalid["stage"], invalid["reason"], invalid["outputs"]) == (
        "rejected",
        "rejected",
        "REVIEW_INPUT_INVALID",
        [],
    )
    archive, keyring = documents.archive, documents.keyring
    for status, names in ((approved, [DECISION, SIGNED, STATEMENT]), (rejected, [DECISION, STATEMENT])):
        prefix = status["outputs"][0]["artifact_id"].rsplit("/", 1)[0]
        assert archive.list(prefix) == [f"{prefix}/{name}" for name in sorted(names)]
        assert {o["artifact_id"] for o in status["outputs"]} == set(archive.list(prefix))  # visible: committed
    approved_prefix = approved["outputs"][0]["artifact_id"].rsplit("/", 1)[0]
    decision = json.loads(archive.get(f"{approved_prefix}/{DECISION}"))
    assert decision["ruleset"] == {"version": IN_FORCE["ruleset"], "sha256": IN_FORCE["ruleset_sha256"]}
    assert decision["worker_version"] == WORKER_VERSION
    assert decision["input"]["sha256"] == approved_doc["sha256"]
    assert {r["outcome"] for r in decision["rules"]} == {"pass"}
    signed = archive.get(f"{approved_prefix}/{SIGNED}")
    assert signed.startswith(approved_pdf)  # the contract as uploaded, the approval appended
    verify_pdf_signature(signed, keyring.root_pem, field_name=APPROVAL_FIELD)
    envelope = archive.get(f"{approved_prefix}/{STATEMENT}")
    opened = dsse.verify_envelope(
        envelope, {keyring.statement_key_id: keyring.statement_key.public_key()}, dsse.PAYLOAD_TYPE
    )
    statement = json.loads(opened.payload)
    assert statement["predicateType"] == PREDICATE_TYPE
    assert statement["subject"][0]["digest"] == {"sha256": approved_doc["sha256"]}
    assert {a["name"]: a["sha256"] for a in statement["predicate"]["artifacts"]} == {
        DECISION: sha256_hex(archive.get(f"{approved_prefix}/{DECISION}")),
        SIGNED: sha256_hex(signed),
    }
    assert statement["predicate"]["options"] == IN_FORCE
    # Every stage under the job's one lease; the rejected contract's decision is signed too, then rejected.
    walk = ["accepted", "validating", "reviewing", "signing", "committing"]
    assert _stages(documents, approved_id) == [(a, b, 1) for a, b in zip(walk, walk[1:])]
    assert _stages(documents, rejected_id) == [(a, b, 1) for a, b in zip(walk, walk[1:])]
    assert [s for _, s, _ in _stages(documents, invalid_id)] == ["validating", "reviewing"]
    [stage] = [e for e in documents.ledger.events_of_type("document.stage") if e["details"]["job_id"] == approved_id][
        -1:
    ]
    assert stage["details"]["policy"] == IN_FORCE and stage["details"]["inputs"] == [approved_doc["document_id"]]
    assert {o["name"] for o in stage["details"]["outputs"]} == {DECISION, SIGNED, STATEMENT}
    assert stage["details"]["correlation_id"] and stage["subject_sha256"] == stage["details"]["correlation_id"]
    [published] = [
        e for e in documents.ledger.events_of_type("document.published") if e["details"]["job_id"] == rejected_id
    ]
    assert published["details"]["summary"]["decision"] == "rejected"
    assert rejected_doc["sha256"] == published["subject_sha256"]
    assert documents.ledger.verify_chain() > 0  # the jobs' rows are still the fold of their events


def test_a_review_commits_four_ledger_transactions_one_per_stage_with_work_in_it(documents, intake):
    """The lease, the start time and the validating stage commit together, and so do the committing stage and
    the outputs: between them lies no work. A review pays four commits (each an fsync), not eight."""
    acme, _ = tokens(documents)
    with client(intake, acme) as http:
        jobs = [_submit_contract(http, f"lease-{n}", lease_contract(n).pdf)[0] for n in (0, 3)]  # approved, rejected
    commits, engine = [], documents.ledger.engine

    def count(connection) -> None:
        commits.append(connection)

    event.listen(engine, "commit", count)
    try:
        outcomes = [(o.state, o.reason) for o in dispatch(documents)]
    finally:
        event.remove(engine, "commit", count)
    assert outcomes == [("succeeded", None), ("rejected", "REVIEW_POLICY_REJECTED")]
    assert len(commits) == 1 + 2 * 4  # the jobs paged, then four per review
    walk = ["accepted", "validating", "reviewing", "signing", "committing"]
    for job_id in jobs:
        assert _stages(documents, job_id) == [(a, b, 1) for a, b in zip(walk, walk[1:])]
        assert documents.document_jobs.job("acme", job_id).started_at is not None


def test_a_batchs_reviews_are_pinned_when_the_batch_is_accepted(documents, intake):
    acme, _ = tokens(documents)
    with client(intake, acme) as http:
        ids = [upload(http, lease_contract(n).pdf).json()["document_id"] for n in (0, 4)]  # none, missing_term_end
        specs = [{"idempotency_key": f"k{n}", "operation": "contract-review", "inputs": [i]} for n, i in enumerate(ids)]
        batch = http.post("/v1/batches", json={"jobs": specs}).json()
        assert dispatch_batches(documents, 10, "test") == 2
        outcomes = sorted((o.state, o.reason or "") for o in dispatch(documents))
        states = http.get(f"/v1/batches/{batch['batch_id']}").json()["states"]
    jobs = [
        documents.document_jobs.job("acme", j)
        for j in documents.batches.batch_children_in(batch["batch_id"], "rejected")
    ]
    assert outcomes == [("rejected", "REVIEW_POLICY_REJECTED"), ("succeeded", "")] and states == {
        "rejected": 1,
        "succeeded": 1,
    }
    assert [job.request["options"] for job in jobs] == [IN_FORCE]
    correlations = {
        e["details"]["correlation_id"]
        for e in documents.ledger.events_of_type("document.stage")
        if e["details"]["job_id"] == jobs[0].job_id
    }
    assert correlations == {batch["batch_id"]}


def test_pdfsig_reads_the_approval_signature(documents, intake, tmp_path):
    pdfsig = require_tool("pdfsig")
    acme, _ = tokens(documents)
    with client(intake, acme) as http:
        job_id, _ = _submit_contract(http, "lease-14", lease_contract(14).pdf)
        dispatch(documents)
        status = http.get(f"/v1/jobs/{job_id}").json()
    [signed_key] = [o["artifact_id"] for o in status["outputs"] if o["artifact_id"].endswith(SIGNED)]
    path = tmp_path / SIGNED
    path.write_bytes(documents.archive.get(signed_key))
    out = subprocess.run([pdfsig, str(path)], capture_output=True, text=True).stdout
    assert "Signature #1" in out and "Signature is Valid" in out and "Signature #2" not in out


def test_the_approval_leaves_the_parties_own_signatures_intact(documents, intake, tmp_path):
    party = load_keyring(tmp_path / "party-keys", generate=True)  # a party's own certificate, not the service's
    signed_by_party = sign_pdf(lease_contract(0).pdf, party, field_name="TenantSignature", reason="tenant").getvalue()
    acme, _ = tokens(documents)
    with client(intake, acme) as http:
        job_id, _ = _submit_contract(http, "signed", signed_by_party)
        [outcome] = dispatch(documents)
        status = http.get(f"/v1/jobs/{job_id}").json()
    assert outcome.state == "succeeded"
    [approved_key] = [o["artifact_id"] for o in status["outputs"] if o["artifact_id"].endswith(SIGNED)]
    approved = documents.archive.get(approved_key)
    assert approved.startswith(signed_by_party)
    verify_pdf_signature(approved, documents.keyring.root_pem, field_name=APPROVAL_FIELD, earlier=1)
    [theirs, ours] = PdfFileReader(io.BytesIO(approved), strict=True).embedded_signatures
    root = asn1_x509.Certificate.load(
        x509.load_pem_x509_certificate(party.root_pem).public_bytes(serialization.Encoding.DER)
    )
    # The party's signature still covers exactly what the party signed, and still validates.
    status = validate_pdf_signature(theirs, ValidationContext(trust_roots=[root], allow_fetching=False))
    assert (theirs.field_name, ours.field_name, status.intact, status.valid, status.trusted) == (
        "TenantSignature",
        APPROVAL_FIELD,
        True,
        True,
        True,
    )


def test_a_retry_after_an_ambiguous_signing_timeout_adopts_the_stored_approval(documents, intake):
    acme, _ = tokens(documents)
    with client(intake, acme) as http:
        job_id, _ = _submit_contract(http, "lease-14", lease_contract(14).pdf)
        flaky = dataclasses.replace(documents, archive=_AmbiguousArchive(documents.archive))
        [first] = dispatch(flaky)
        waiting = http.get(f"/v1/jobs/{job_id}").json()
        prefix = f"documents/acme/{documents.document_jobs.job('acme', job_id).period}/{job_id}"
        stored = documents.archive.get(f"{prefix}/{SIGNED}")
        make_due(documents, job_id)
        [second] = dispatch(documents, "run-2")
        done = http.get(f"/v1/jobs/{job_id}").json()
    assert (first.state, first.reason) == ("accepted", "REVIEW_DEPENDENCY_TIMEOUT")
    assert (waiting["state"], waiting["stage"], waiting["outputs"]) == ("accepted", "retry_wait", [])
    assert waiting["reason"] == "REVIEW_DEPENDENCY_TIMEOUT" and waiting["message"]  # why it waits
    assert (second.state, done["state"], done["attempts"]) == ("succeeded", "succeeded", 2)
    assert documents.archive.list(prefix) == [f"{prefix}/{n}" for n in sorted((DECISION, SIGNED, STATEMENT))]
    [signed] = [o for o in done["outputs"] if o["artifact_id"].endswith(SIGNED)]
    assert signed["sha256"] == sha256_hex(stored) == sha256_hex(documents.archive.get(f"{prefix}/{SIGNED}"))
    assert len(documents.ledger.events_of_type("document.published")) == 1
    assert [(s, t) for _, s, t in _stages(documents, job_id)] == [
        ("validating", 1),
        ("reviewing", 1),
        ("signing", 1),
        ("validating", 2),
        ("reviewing", 2),
        ("signing", 2),
        ("committing", 2),
    ]
    assert _stages(documents, job_id)[3][0] == "retry_wait"


def test_sigkill_after_the_approval_is_stored_then_the_retry_adopts_it(documents, intake, backend):
    acme, _ = tokens(documents)
    with client(intake, acme) as http:
        job_id, _ = _submit_contract(http, "lease-28", lease_contract(28).pdf)
        documents.pages.assign_pages(10)
        [(page_id, _, _)] = documents.pages.open_pages()
        env = os.environ | intake_environment(backend) | {"EVIDENCE_LEASE_SECONDS": "2"}
        child = subprocess.Popen(
            [sys.executable, "-m", "evidence_pipeline_tests.support.fault_child", "documents", page_id],
            env=env | {"EVIDENCE_KILL_POINT": "after_approval_put"},
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        assert child.wait(timeout=180) == -signal.SIGKILL, child.stderr.read().decode()[-2000:]
        killed = http.get(f"/v1/jobs/{job_id}").json()
        prefix = f"documents/acme/{documents.document_jobs.job('acme', job_id).period}/{job_id}"
        stored = documents.archive.get(f"{prefix}/{SIGNED}")
        time.sleep(2.5)  # the dead worker's lease expires
        [lost] = dispatch(documents, "run-2")  # its attempt counts against the budget: retry_wait
        make_due(documents, job_id)
        [outcome] = dispatch(documents, "run-3")
        done = http.get(f"/v1/jobs/{job_id}").json()
    assert (killed["state"], killed["stage"], killed["outputs"]) == ("running", "signing", [])  # nothing visible
    assert (lost.state, lost.reason) == ("accepted", "WORKER_LOST")
    assert outcome.state == "succeeded" and done["attempts"] == 2
    [signed] = [o for o in done["outputs"] if o["artifact_id"].endswith(SIGNED)]
    assert signed["sha256"] == sha256_hex(stored)  # adopted: exactly one signed artifact, never signed again
    assert documents.archive.list(prefix) == [f"{prefix}/{n}" for n in sorted((DECISION, SIGNED, STATEMENT))]
    assert len(documents.ledger.events_of_type("document.published")) == 1
    # the dead attempt's last stage stays on record; the retry starts from retry_wait
    assert _stages(documents, job_id)[2:4] == [("reviewing", "signing", 1), ("retry_wait", "validating", 2)]


def test_a_changed_approval_under_the_key_is_never_adopted(documents, intake):
    acme, _ = tokens(documents)
    with client(intake, acme) as http:
        job_id, _ = _submit_contract(http, "lease-42", lease_contract(42).pdf)
        prefix = f"documents/acme/{documents.document_jobs.job('acme', job_id).period}/{job_id}"
        documents.archive.put_once(f"{prefix}/{SIGNED}", lease_contract(0).pdf)  # not this contract's
        [outcome] = dispatch(documents)
        status = http.get(f"/v1/jobs/{job_id}").json()
    assert (outcome.state, outcome.reason) == ("rejected", "STORE_CONFLICT")
    assert (status["state"], status["outputs"]) == ("rejected", [])
    assert documents.ledger.events_of_type("document.published") == []


def test_a_page_run_records_review_decisions_as_outcomes_not_failures(backend, documents, intake, monkeypatch):
    for name, value in intake_environment(backend).items():
        monkeypatch.setenv(name, value)  # the Dagster resource reads the same environment
    acme, _ = tokens(documents)
    with client(intake, acme) as http:
        jobs = [_submit_contract(http, f"lease-{n}", lease_contract(n).pdf)[0] for n in (0, 9, 13)]
        with DagsterInstance.ephemeral() as instance:
            instance.add_dynamic_partitions("tenant", ["acme"])
            [request] = tick(instance).run_requests
            result = defs.get_job_def("document_page_job").execute_in_process(
                run_config=request.run_config, instance=instance, tags=request.tags, raise_on_error=False
            )
        views = [http.get(f"/v1/jobs/{job_id}").json() for job_id in jobs]
    assert result.success  # a rejected contract or an unreviewable one is the job's outcome, not the run's failure
    assert [(v["state"], v["stage"], v["reason"]) for v in views] == [
        ("succeeded", "completed", None),
        ("rejected", "rejected", "REVIEW_POLICY_REJECTED"),  # term_too_long
        ("rejected", "rejected", "REVIEW_INPUT_INVALID"),  # no_text
    ]


def test_two_runs_of_one_page_at_once_make_one_signed_output(documents, intake):
    acme, _ = tokens(documents)
    with client(intake, acme) as http:
        job_id, _ = _submit_contract(http, "lease-0", lease_contract(0).pdf)
    documents.pages.assign_pages(10)
    [(page_id, _, _)] = documents.pages.open_pages()
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda run: run_page(documents, page_id, RunInfo(run)), ("run-a", "run-b")))
    outcomes = sorted((o.state, o.reason or "") for [o] in runs)
    assert outcomes in ([("running", "LEASE_BUSY"), ("succeeded", "")], [("succeeded", ""), ("succeeded", "")])
    prefix = f"documents/acme/{documents.document_jobs.job('acme', job_id).period}/{job_id}"
    assert documents.archive.list(prefix) == [f"{prefix}/{n}" for n in sorted((DECISION, SIGNED, STATEMENT))]
    assert len(documents.ledger.events_of_type("document.published")) == 1


def test_an_expired_lease_can_neither_record_a_stage_nor_commit_a_decision(documents, intake):
    acme, _ = tokens(documents)
    with client(intake, acme) as http:
        job_id, _ = _submit_contract(http, "lease-3", lease_contract(3).pdf)
    ledger = documents.ledger
    lease = ledger.acquire_lease(job_id, "zombie", 0.2)
    time.sleep(0.3)
    job = documents.document_jobs.job("acme", job_id)
    before = ledger.verify_chain()
    for attempt in (
        lambda: documents.document_jobs.record_stage(job, lease, StageChange("accepted", "validating", {}), "zombie"),
        lambda: documents.document_jobs.complete(
            job,
            lease,
            event_type="document.published",
            subject_sha256="0" * 64,
            outputs={},
            actor="zombie",
            rejected="REVIEW_POLICY_REJECTED",
        ),
    ):
        with pytest.raises(EvidenceError) as fenced:
            attempt()
        assert fenced.value.code == "LEASE_FENCED"
    assert ledger.verify_chain() == before and documents.document_jobs.job("acme", job_id).state == "running"


def test_a_shadow_run_prints_what_a_candidate_ruleset_would_change_and_writes_nothing(
    documents, intake, backend, tmp_path
):
    acme, _ = tokens(documents)
    with client(intake, acme) as http:
        jobs = {n: _submit_contract(http, f"lease-{n}", lease_contract(n).pdf)[0] for n in (0, 3, 10)}
        dispatch(documents)
    document = json.loads((rulesets.RULESETS_DIR / rulesets.file_name(rulesets.IN_FORCE)).read_bytes())
    document["rules"] = [r for r in document["rules"] if r["id"] != "rent-positive"]  # the candidate drops a rule
    candidate = tmp_path / "candidate.json"
    candidate.write_text(json.dumps(document | {"ruleset": "lease-review/2027.1-rc1"}))
    silent_edit = tmp_path / "edit.json"
    silent_edit.write_text(json.dumps(document))  # still calls itself lease-review/2026.1
    ledger, archive = documents.ledger, documents.archive
    events, objects = ledger.verify_chain(), archive.list("documents")
    env = intake_environment(backend)
    shadowed = _invoke(["ruleset", "shadow", str(candidate), "--sample", "10", "--json"], env)
    text = _invoke(["ruleset", "shadow", str(candidate)], env)
    refused = _invoke(["ruleset", "shadow", str(silent_edit), "--json"], env)
    assert shadowed.exit_code == 0, shadowed.output
    report = json.loads(shadowed.output)
    by_job = {job["job_id"]: job for job in report["jobs"]}
    assert report["candidate"]["version"] == "lease-review/2027.1-rc1" and report["changed"] == 1
    assert set(by_job) == set(jobs.values())
    zero_rent = by_job[jobs[10]]
    assert (zero_rent["current"]["decision"], zero_rent["candidate"]["decision"], zero_rent["changed"]) == (
        "rejected",
        "approved",
        True,
    )
    assert zero_rent["current"]["failed_rules"] == ["rent-positive"] and zero_rent["candidate"]["failed_rules"] == []
    assert not by_job[jobs[0]]["changed"] and not by_job[jobs[3]]["changed"]
    assert text.exit_code == 0 and "CHANGED " in text.output and "1 changed" in text.output
    assert refused.exit_code == 1 and json.loads(refused.output)["error"]["code"] == "RULESET_INVALID"
    assert (ledger.verify_chain(), archive.list("documents")) == (events, objects)  # nothing signed or recorded
