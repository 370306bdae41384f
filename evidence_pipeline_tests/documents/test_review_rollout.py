"""Rolling out a review ruleset by version, and retrying document jobs: a canary routes an explicitly chosen set of
tenants' new contract reviews to a candidate ruleset and rollback stops it (jobs keep what they pinned, nothing is
deleted); a transient failure puts a job in retry_wait with a persisted next_attempt_at that dispatch honours,
and the spent budget makes it dead. Both backends, through the real intake server."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime

import pytest
from dagster import DagsterInstance
from sqlalchemy import select

from evidence_pipeline.actors.roles import Action
from evidence_pipeline.definitions import defs
from evidence_pipeline.defs.resources import EvidenceResource
from evidence_pipeline.documents import canary
from evidence_pipeline.documents import ruleset as rulesets
from evidence_pipeline.documents.dispatch import dispatch_batches
from evidence_pipeline.documents.review import DECISION
from evidence_pipeline.documents.worker import run_page
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.runtime import RunInfo
from evidence_pipeline.synthetic.lease_contracts import lease_contract
from evidence_pipeline_tests.support.cli import invoke as _invoke
from evidence_pipeline_tests.support.document_jobs import AmbiguousArchive as _AmbiguousArchive
from evidence_pipeline_tests.support.document_jobs import dispatch, make_due
from evidence_pipeline_tests.support.document_sensor import tick
from evidence_pipeline_tests.support.intake_server import client, intake_environment, submit, tokens, upload
from evidence_pipeline_tests.support.signers import Signers, signers_of

# A retry waits an hour (the tests move the clock with make_due); two failed attempts spend the budget.
INTAKE_OVERRIDES = {
    "EVIDENCE_RETRY_DELAY_SECONDS": "3600",
    "EVIDENCE_MAX_ATTEMPTS": "2",
    "EVIDENCE_RETRY_BUDGET_SECONDS": "0.001",
}
CANDIDATE = "lease-review/2026.2"  # 2026.1 and a pets clause
NO_PETS = lease_contract(0).pdf  # approved under 2026.1; its missing pets clause fails 2026.2's required-clauses


def _review(http, key: str, options: dict | None = None, pdf: bytes = NO_PETS) -> dict:
    document_id = upload(http, pdf).json()["document_id"]
    accepted = submit(
        http,
        key,
        {"operation": "contract-review", "inputs": [document_id]}
        | ({"options": options} if options is not None else {}),
    )
    assert accepted.status_code in (200, 202), accepted.text
    return accepted.json()


def _decision(documents, status: dict) -> dict:
    [key] = [o["artifact_id"] for o in status["outputs"] if o["artifact_id"].endswith(f"/{DECISION}")]
    return json.loads(documents.archive.get(key))


def _rows(documents) -> tuple[list, list]:
    """Every job row and every event id, in order."""
    ledger = documents.ledger
    with ledger.engine.connect() as conn:
        jobs = [tuple(row) for row in conn.execute(select(ledger.jobs).order_by(ledger.jobs.c.job_id))]
        events = list(
            conn.execute(select(ledger.audit_events.c.event_id).order_by(ledger.audit_events.c.seq)).scalars()
        )
    return jobs, events


def _canary(signers, actor: str, candidate: str, tenants: list[str]) -> dict[str, str]:
    signers.ensure(actor, ["operator"])
    return canary.start(
        signers.gate, signers.sign(actor, Action.RULESET_CANARY, {"candidate": candidate, "tenants": tenants})
    )


def _rollback(signers, actor: str) -> dict[str, str]:
    signers.ensure(actor, ["operator"])
    return canary.rollback(signers.gate, signers.sign(actor, Action.RULESET_ROLLBACK, {}))


def _unsigned(details: dict) -> dict:
    assert "authorization" in details  # the signed request that authorized the event
    return {key: value for key, value in details.items() if key != "authorization"}


def test_a_canary_routes_the_chosen_tenants_new_reviews_and_rollback_routes_them_back(documents, intake):
    ledger = documents.ledger
    signers = signers_of(ledger)
    acme, globex = tokens(documents)
    assert rulesets.IN_FORCE != CANDIDATE and CANDIDATE in rulesets.REGISTERED
    for candidate, tenants, code in (
        (rulesets.IN_FORCE, ["acme"], ReasonCode.RULESET_CANARY_CONFLICT),  # already in force
        (CANDIDATE, [], ReasonCode.RULESET_CANARY_CONFLICT),  # nobody chosen
        ("lease-review/2099.1", ["acme"], ReasonCode.RULESET_INVALID),  # not registered
        (CANDIDATE, ["Not A Slug"], ReasonCode.TENANT_ID_INVALID),
    ):
        with pytest.raises(EvidenceError) as refused:
            _canary(signers, "release-manager", candidate, tenants)
        assert refused.value.code == code
    assert _canary(signers, "release-manager", CANDIDATE, ["acme"]) == {"acme": CANDIDATE}
    assert _canary(signers, "someone-else", CANDIDATE, ["acme"]) == {"acme": CANDIDATE}  # already routed
    [started] = ledger.events_of_type("ruleset.canary")
    assert (started["tenant"], started["actor"], started["subject_sha256"]) == (
        "acme",
        "release-manager",
        rulesets.REGISTERED[CANDIDATE],
    )
    assert _unsigned(started["details"]) == {
        "candidate": CANDIDATE,
        "candidate_sha256": rulesets.REGISTERED[CANDIDATE],
        "in_force": rulesets.IN_FORCE,
        "tenants": ["acme"],
    }
    with client(intake, acme) as ours, client(intake, globex) as theirs:
        routed = _review(ours, "routed")
        named = _review(ours, "named", {"ruleset": rulesets.IN_FORCE})  # a job that names its ruleset keeps it
        other = _review(theirs, "not-chosen")
        batch = ours.post(
            "/v1/batches",
            json={
                "jobs": [
                    {
                        "idempotency_key": "b1",
                        "operation": "contract-review",
                        "inputs": [upload(ours, NO_PETS).json()["document_id"]],
                    }
                ]
            },
        ).json()
        assert dispatch_batches(documents, 10, "test") == 1  # the children pin what the batch was accepted under
        before = _rows(documents)
        assert _rollback(signers, "release-manager") == {"acme": CANDIDATE}
        assert _rollback(signers, "release-manager") == {}  # nothing routed any more
        after = _rows(documents)
        again = _review(ours, "routed")  # the same request under its key still answers the same job
        back = _review(ours, "after-rollback")
        outcomes = {o.job_id: (o.state, o.reason) for o in dispatch(documents)}
        statuses = {
            name: ours.get(f"/v1/jobs/{job['job_id']}").json()
            for name, job in (("routed", routed), ("named", named), ("back", back))
        }
        statuses["other"] = theirs.get(f"/v1/jobs/{other['job_id']}").json()
    [child] = documents.batches.batch_children_in(batch["batch_id"], "rejected")
    candidate_pin, in_force_pin = rulesets.pin(CANDIDATE), rulesets.pin(rulesets.IN_FORCE)
    assert {name: s["options"] for name, s in statuses.items()} == {
        "routed": candidate_pin,
        "named": in_force_pin,
        "back": in_force_pin,
        "other": in_force_pin,
    }
    assert documents.document_jobs.job("acme", child).request["options"] == candidate_pin
    assert again["job_id"] == routed["job_id"]
    # Accepted under the canary, worked after the rollback: it finishes under the candidate it pinned.
    assert outcomes[routed["job_id"]] == ("rejected", "REVIEW_POLICY_REJECTED")
    assert statuses["routed"]["findings"]["failed_rules"] == ["required-clauses"]
    assert _decision(documents, statuses["routed"])["ruleset"] == {
        "version": CANDIDATE,
        "sha256": rulesets.REGISTERED[CANDIDATE],
    }
    for name in ("named", "back", "other"):
        assert (statuses[name]["state"], _decision(documents, statuses[name])["ruleset"]["version"]) == (
            "succeeded",
            rulesets.IN_FORCE,
        )
    # The rollback moved no job and deleted nothing: it only appended its events.
    assert after[0] == before[0] and after[1][: len(before[1])] == before[1]
    [stopped] = ledger.events_of_type("ruleset.rolled_back")
    assert (stopped["tenant"], stopped["actor"], _unsigned(stopped["details"])) == (
        "acme",
        "release-manager",
        {"candidate": CANDIDATE, "in_force": rulesets.IN_FORCE},
    )
    assert canary.routes(ledger) == {} and ledger.verify_chain() == len(_rows(documents)[1])


def test_the_ruleset_commands_start_show_and_roll_back_a_canary(backend, documents, tmp_path):
    env = intake_environment(backend)
    signers = Signers(documents.ledger, tmp_path / "actors")
    signers.register("rm", ["operator"])
    rm = ["--key", signers.key_file("rm")]
    started = _invoke(["ruleset", "canary", CANDIDATE, "--tenant", "acme", "--tenant", "globex", *rm, "--json"], env)
    assert started.exit_code == 0, started.output
    assert json.loads(started.output) == {
        "in_force": rulesets.IN_FORCE,
        "routed": {"acme": CANDIDATE, "globex": CANDIDATE},
    }
    status = _invoke(["ruleset", "status"], env)
    assert status.exit_code == 0 and f"acme                     -> {CANDIDATE}" in status.output
    refused = _invoke(["ruleset", "canary", rulesets.IN_FORCE, "--tenant", "acme", *rm, "--json"], env)
    assert (refused.exit_code, json.loads(refused.output)["error"]["code"]) == (1, "RULESET_CANARY_CONFLICT")
    rolled = _invoke(["ruleset", "rollback", *rm], env)
    assert rolled.exit_code == 0 and f"rolled back 2 tenant(s) to {rulesets.IN_FORCE}" in rolled.output
    assert json.loads(_invoke(["ruleset", "status", "--json"], env).output)["routed"] == {}
    actors = {e["actor"] for e in documents.ledger.events_of_type("ruleset.rolled_back")}
    assert actors == {"rm"}


class _UnreachableDocument:
    """The document store, except that reading one document times out (the gate's transient failure)."""

    def __init__(self, store, key: str):
        self.store, self.key = store, key

    def __getattr__(self, name):
        return getattr(self.store, name)

    def get_file(self, key, *args, **kwargs):
        if key == self.key:
            raise EvidenceError(ReasonCode.STORE_UNAVAILABLE, "read timeout")
        return self.store.get_file(key, *args, **kwargs)


def test_a_transient_failure_waits_in_retry_wait_until_next_attempt_at_then_dies_with_the_budget(documents, intake):
    acme, _ = tokens(documents)
    with client(intake, acme) as http:
        signing = _review(http, "signing")["job_id"]  # the approval's store answers after storing it
        fetching = _review(http, "fetching", pdf=lease_contract(1).pdf)["job_id"]  # its input does not come back
        [unreachable] = documents.document_jobs.job("acme", fetching).request["inputs"]
        flaky = dataclasses.replace(documents, archive=_AmbiguousArchive(documents.archive))
        flaky.document_store = _UnreachableDocument(
            documents.document_store, documents.document_records.document("acme", unreachable).store_key
        )
        first = {o.job_id: (o.state, o.reason) for o in dispatch(flaky)}
        page = documents.document_jobs.job("acme", signing).page_id
        waiting = {job_id: http.get(f"/v1/jobs/{job_id}").json() for job_id in (signing, fetching)}
        assert documents.pages.open_pages() == []  # not before next_attempt_at: no page is dispatched
        assert run_page(documents, page, RunInfo("eager-run")) == []  # and a page run leaves them waiting
        with pytest.raises(EvidenceError) as early:
            documents.ledger.acquire_lease(signing, "eager-run", 60)
        for job_id in (signing, fetching):
            make_due(documents, job_id)
        assert [p for p, _, _ in documents.pages.open_pages()] == [page]
        second = {o.job_id: (o.state, o.reason) for o in dispatch(flaky, "run-2")}
        dead = {job_id: http.get(f"/v1/jobs/{job_id}").json() for job_id in (signing, fetching)}
    assert early.value.code == ReasonCode.RETRY_NOT_DUE and early.value.retryable
    assert first == {signing: ("accepted", "REVIEW_DEPENDENCY_TIMEOUT"), fetching: ("accepted", "STORE_UNAVAILABLE")}
    retries = {
        e["details"]["job_id"]: e
        for e in documents.ledger.events_of_type("job.accepted")
        if "next_attempt_at" in e["details"]
    }
    for job_id, status in waiting.items():
        assert (status["state"], status["stage"], status["attempts"], status["outputs"]) == (
            "accepted",
            "retry_wait",
            1,
            [],
        )
        assert status["next_attempt_at"] == retries[job_id]["details"]["next_attempt_at"]  # persisted, and audited
        wait = datetime.fromisoformat(status["next_attempt_at"]) - datetime.fromisoformat(
            retries[job_id]["recorded_at"]
        )
        assert 3599 <= wait.total_seconds() <= 3601  # EVIDENCE_RETRY_DELAY_SECONDS after the failure
    # The approval had been stored: its retry adopts it. The input stayed out of reach: two attempts and the
    # budget's time are spent, so the job is dead.
    assert second == {signing: ("succeeded", None), fetching: ("dead", "STORE_UNAVAILABLE")}
    assert (dead[signing]["state"], dead[signing]["attempts"], dead[signing]["next_attempt_at"]) == (
        "succeeded",
        2,
        None,
    )
    assert (
        dead[fetching]["state"],
        dead[fetching]["stage"],
        dead[fetching]["reason"],
        dead[fetching]["attempts"],
        dead[fetching]["next_attempt_at"],
    ) == ("dead", "dead", "STORE_UNAVAILABLE", 2, None)
    assert documents.ledger.verify_chain() > 0  # the rows are still the fold of their events


def test_a_page_run_leaves_retry_wait_to_the_sensor_which_dispatches_it_when_due(
    backend, documents, intake, monkeypatch
):
    for name, value in (intake_environment(backend) | INTAKE_OVERRIDES).items():
        monkeypatch.setenv(name, value)  # the Dagster resource reads the same environment
    acme, _ = tokens(documents)
    with client(intake, acme) as http:
        job_id = _review(http, "late")["job_id"]
    flaky = dataclasses.replace(documents, archive=_AmbiguousArchive(documents.archive))
    monkeypatch.setattr(EvidenceResource, "runtime", lambda self: flaky)
    with DagsterInstance.ephemeral() as instance:
        [request] = tick(instance).run_requests
        result = defs.get_job_def("document_page_job").execute_in_process(
            run_config=request.run_config, instance=instance, tags=request.tags
        )
        assert result.success  # the job waits; the run is not failed or retried for it
        assert tick(instance).skip_message == "no document jobs waiting"
        make_due(documents, job_id)
        [again] = tick(instance).run_requests
    assert again.run_key != request.run_key and again.tags == request.tags
    assert documents.document_jobs.job("acme", job_id).state == "accepted"
