"""A reviewer's decision on a part (`part.decide`, `evidence part decide`): the four-part district agreement is
split, its parts reviewed under the district ruleset (which rejects the data-processing addendum), and a reviewer's
signed decision approves or rejects a part for the merge; lineage walks the decision, `ledger verify` re-checks it.
Through the real intake server and the document worker, on both backends."""

from __future__ import annotations

import copy
import io
import json

import httpx
import pytest
import sqlalchemy as sa
from pypdf import PdfReader

from evidence_pipeline.actors.keyfiles import generate_actor_key
from evidence_pipeline.actors.offline import recheck_events
from evidence_pipeline.actors.roles import Action
from evidence_pipeline.actors.verify import ActionRefused
from evidence_pipeline.audit.authorizations import recheck_ledger
from evidence_pipeline.documents.decisions import decide_part
from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.ledger.ledger import event_body
from evidence_pipeline.models import EventType
from evidence_pipeline.operator_api.app import CONTRACT, create_app
from evidence_pipeline.store import sha256_hex
from evidence_pipeline.synthetic import district_agreements as bundles
from evidence_pipeline_tests.support import split_merge
from evidence_pipeline_tests.support.cli import invoke
from evidence_pipeline_tests.support.contract import conforms
from evidence_pipeline_tests.support.document_jobs import dispatch
from evidence_pipeline_tests.support.intake_server import client, error_code, running_app, submit, tokens
from evidence_pipeline_tests.support.signers import signers_of
from evidence_pipeline_tests.support.split_merge import (
    ADDENDUM,
    accept,
    decide,
    pdfs,
    reviewed,
    split_agreement,
    status,
    walk,
)
from evidence_pipeline_tests.support.tampering import drop_append_only_guards

# the fixtures of the split and merge tests: the district's signing certificate, trusted by the documents' policy
pki, environment, documents = split_merge.pki, split_merge.environment, split_merge.documents


def test_a_reviewer_approves_the_rejected_part_and_all_four_merge(documents, intake, pki, environment, tmp_path):
    acme, _ = tokens(documents)
    signers = signers_of(documents.ledger)
    key = tmp_path / "rita.pem"
    signers.register("rita", ["reviewer"], key=generate_actor_key(key))
    with client(intake, acme) as http:
        parts = reviewed(documents, http, pki)
        everything = [parts[p.name] for p in bundles.PARTS]
        refused = submit(http, "merge-0", {"operation": "merge", "inputs": everything})
        decided = invoke(
            [
                "part",
                "decide",
                "acme",
                parts[ADDENDUM],
                "--approve",
                "--reason",
                "no end date: it runs while student records are held",
                "--key",
                str(key),
                "--json",
            ],
            environment,
        )
        merge_id = accept(http, "merge-1", {"operation": "merge", "inputs": everything})
        dispatch(documents, "run-merge")
        merge = status(http, merge_id)
    assert (refused.status_code, error_code(refused)) == (422, "MERGE_INPUT_NOT_APPROVED")
    assert decided.exit_code == 0, decided.output
    assert json.loads(decided.output) == {
        "tenant": "acme",
        "artifact_id": parts[ADDENDUM],
        "decision": "approved",
        "reason": "no end date: it runs while student records are held",
        "sha256": sha256_hex(documents.archive.get(parts[ADDENDUM])),
    }
    assert (merge["state"], merge["stage"]) == ("succeeded", "completed"), merge

    ledger = documents.ledger
    [event] = ledger.events_of_type(EventType.PART_DECIDED, "acme")
    assert (event["actor"], event["subject_sha256"]) == ("rita", event["details"]["sha256"])
    [merged_id] = pdfs(merge).values()
    pages = [p.extract_text() for p in PdfReader(io.BytesIO(documents.archive.get(merged_id))).pages]
    assert len(pages) == 7 and "Data processing addendum" in pages[2]  # the addendum is in, by the decision
    [derived] = [
        e for e in ledger.events_of_type(EventType.DOCUMENT_DERIVED) if e["details"]["artifact_id"] == merged_id
    ]
    pins = {pin["artifact_id"]: pin for pin in derived["details"]["lineage"]["reviews"]}
    assert pins[parts[ADDENDUM]] == {
        "artifact_id": parts[ADDENDUM],
        "decision_event_id": event["event_id"],
        "decided_by": "rita",
    }
    assert all("review_job_id" in pin for artifact_id, pin in pins.items() if artifact_id != parts[ADDENDUM])

    # Lineage walks the reviewer's decision beside the three reviews; `ledger verify` re-checks who decided.
    code, report = walk(environment, merged_id)
    assert code == 0 and report["ok"], report
    kinds = [link["link"] for link in report["links"]]
    assert kinds.count("review") == 3 and kinds.count("decision") == 1 and kinds.count("upload") == 4
    [walked] = [link for link in report["links"] if link["link"] == "decision"]
    assert (walked["artifact_id"], walked["decided_by"], walked["event_id"]) == (
        parts[ADDENDUM],
        "rita",
        event["event_id"],
    )
    verified = invoke(["ledger", "verify"], environment)
    assert verified.exit_code == 0, verified.output
    [authorization] = [a for a in recheck_ledger(ledger, 300) if a.event_type == EventType.PART_DECIDED]
    assert (authorization.actor, authorization.action, authorization.event_id) == (
        "rita",
        "part.decide",
        event["event_id"],
    )

    # Offline, an event that says otherwise than its signed request fails the re-check.
    events = ledger.audit_events.c
    with ledger.engine.connect() as conn:
        bodies = [event_body(b) for b in conn.execute(sa.select(events.body).order_by(events.seq)).scalars()]
    at = next(n for n, body in enumerate(bodies) if body["event_type"] == EventType.PART_DECIDED)
    forged = copy.deepcopy(bodies)
    forged[at]["details"]["reason"] = "something else"
    with pytest.raises(EvidenceError) as differs:
        recheck_events(forged)
    assert differs.value.code == "LEDGER_INVALID" and "ACTION_REQUEST_INVALID" in differs.value.message

    # A tampered decision event breaks the lineage at the decision.
    drop_append_only_guards(ledger)
    with ledger.engine.begin() as conn:
        body = conn.execute(sa.select(events.body).where(events.event_id == event["event_id"])).scalar()
        rewritten = body.replace("no end date", "no end-date")
        assert rewritten != body
        conn.execute(ledger.audit_events.update().where(events.event_id == event["event_id"]).values(body=rewritten))
    code, report = walk(environment, merged_id)
    assert (code, report["code"], report["link"]) == (
        1,
        "LINEAGE_EVENT_INVALID",
        f"decision {event['event_id']} on {parts[ADDENDUM]}",
    )
    assert "breaks the hash chain" in report["message"]


def test_a_reviewers_rejection_of_an_approved_part_blocks_the_merge(documents, intake, pki):
    acme, _ = tokens(documents)
    with client(intake, acme) as http:
        parts = reviewed(documents, http, pki)
        pair = [parts["master-agreement"], parts["signature-page"]]
        decide(documents, "rita", "acme", parts["signature-page"], "rejected", "the signatory is not authorized")
        rejected = submit(http, "merge-1", {"operation": "merge", "inputs": pair})
        decide(documents, "bob", "acme", parts["signature-page"], "approved", "authority confirmed by the board")
        approved = submit(http, "merge-2", {"operation": "merge", "inputs": pair})  # the latest decision wins
        decide(documents, "rita", "acme", parts["signature-page"], "rejected", "the board minutes are unsigned")
        again = submit(http, "merge-3", {"operation": "merge", "inputs": pair})
    assert (rejected.status_code, error_code(rejected)) == (422, "MERGE_INPUT_NOT_APPROVED")
    assert approved.status_code == 202, approved.text
    assert (again.status_code, error_code(again)) == (422, "MERGE_INPUT_NOT_APPROVED")
    decisions = documents.ledger.events_of_type(EventType.PART_DECIDED, "acme")
    assert [(e["actor"], e["details"]["decision"]) for e in decisions] == [
        ("rita", "rejected"),
        ("bob", "approved"),
        ("rita", "rejected"),
    ]


def test_who_may_decide_and_on_what(documents, intake, pki):
    acme, globex = tokens(documents)
    with client(intake, acme) as http:
        _, split = split_agreement(http, documents, bundles.sign(bundles.district_agreement(), pki[0]))
        addendum = pdfs(split)[ADDENDUM]
        no_route = http.post("/v1/parts/decisions", json={"artifact_id": addendum, "decision": "approved"})
    approve = {"artifact_id": addendum, "decision": "approved", "reason": "fine"}
    signers = signers_of(documents.ledger)
    for actor in ("audrey", "olga"):  # an auditor, an operator
        with pytest.raises(ActionRefused) as forbidden:
            decide_part(signers.gate, documents, signers.sign(actor, Action.PART_DECIDE, approve, tenant="acme"))
        assert forbidden.value.code == "ACTION_FORBIDDEN", actor
    with pytest.raises(EvidenceError) as token:  # a tenant's API token is no signed request of an actor
        decide_part(signers.gate, documents, acme)
    assert token.value.code == "ACTION_REQUEST_INVALID"
    assert no_route.status_code in (404, 405)  # and the tenant API has no way to decide
    with pytest.raises(EvidenceError) as foreign:  # another tenant's part does not exist for this one
        decide(documents, "rita", "globex", addendum, "approved", "fine")
    assert foreign.value.code == "DOCUMENT_NOT_FOUND"
    for args in (
        {**approve, "decision": "maybe"},
        {**approve, "reason": ""},
        {**approve, "reason": "x" * 501},
        {**approve, "reason": "line\nbreak"},
        {"artifact_id": addendum, "decision": "approved"},
    ):
        with pytest.raises(EvidenceError) as invalid:
            decide_part(signers.gate, documents, signers.sign("bob", Action.PART_DECIDE, args, tenant="acme"))
        assert invalid.value.code == "ACTION_REQUEST_INVALID", args
    with pytest.raises(EvidenceError) as untenanted:
        decide_part(signers.gate, documents, signers.sign("bob", Action.PART_DECIDE, approve))
    assert untenanted.value.code == "ACTION_REQUEST_INVALID"
    ledger = documents.ledger
    assert ledger.events_of_type(EventType.PART_DECIDED) == []
    refused = [
        (e["actor"], e["details"]["code"])
        for e in ledger.events_of_type(EventType.ACTION_REFUSED)
        if e["details"]["action"] == "part.decide"
    ]
    # recorded: the refusals of identities, and the token's without its content
    assert refused == [("audrey", "ACTION_FORBIDDEN"), ("olga", "ACTION_FORBIDDEN"), ("", "ACTION_REQUEST_INVALID")]
    assert decide(documents, "rita", "acme", addendum, "approved", "fine")["decision"] == "approved"


def test_a_reviewer_decides_over_the_operator_api_as_on_the_command_line(documents, intake, pki, environment):
    acme, _ = tokens(documents)
    signers = signers_of(documents.ledger)
    signers.ensure("rita", ["reviewer"])
    with client(intake, acme) as http:
        parts = reviewed(documents, http, pki)
    args = {"artifact_id": parts[ADDENDUM], "decision": "approved", "reason": "counsel read it"}
    answers = []
    with running_app(create_app(documents), documents.settings) as url:
        for tenant in ("acme", "globex"):  # its own part, and the same id named for another tenant
            answers.append(
                httpx.post(
                    url + "/v1/parts/decide",
                    timeout=30,
                    json={"authorization": signers.sign("rita", Action.PART_DECIDE, args, tenant=tenant)},
                )
            )
            conforms("post", "/v1/parts/decide", answers[-1], CONTRACT)
    decided, elsewhere = answers
    assert decided.status_code == 201, decided.text
    assert decided.json() | {"authorization": None} == args | {
        "sha256": sha256_hex(documents.archive.get(parts[ADDENDUM])),
        "authorization": None,
    }
    assert (elsewhere.status_code, elsewhere.json()["error"]["code"]) == (404, "DOCUMENT_NOT_FOUND")
    [event] = documents.ledger.events_of_type(EventType.PART_DECIDED, "acme")
    assert event["actor"] == "rita" and event["details"]["authorization"] == decided.json()["authorization"]
