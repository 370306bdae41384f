"""Replay opens a new attempt linked to the ended one, which stays as it ended; dead letters list failures only,
filtered, with the next step for each kind of job (issue 30)."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from evidence_pipeline.cli import main
from evidence_pipeline.ledger import Ledger, append_only
from evidence_pipeline.ledger.jobs import JobKey
from evidence_pipeline.ledger.rows import Job
from evidence_pipeline_tests.support import jobs
from evidence_pipeline_tests.support.document_jobs import dispatch
from evidence_pipeline_tests.support.hostile_pdfs import HOSTILE
from evidence_pipeline_tests.support.intake_server import client, intake_environment, pdf_bytes, submit, tokens, upload
from evidence_pipeline_tests.support.jobs import KEY, code, fail
from evidence_pipeline_tests.support.signers import Signers, signers_of

# A document job is dead after one failed attempt (its time budget is spent at once).
INTAKE_OVERRIDES = {"EVIDENCE_MAX_ATTEMPTS": "1", "EVIDENCE_RETRY_BUDGET_SECONDS": "0.001"}


ledger = jobs.ledger  # the same fixture: a ledger on the backend with KEY accepted


def _replay(ledger: Ledger, job_id: str, actor: str, reason: str, policy_version: str | None = None) -> Job:
    """`evidence replay` of ``job_id``, signed by ``actor`` (an operator)."""
    signers = signers_of(ledger)
    signers.ensure(actor, ["operator"])
    return signers.replay(job_id, reason, actor, policy_version)


def test_replay_opens_a_new_attempt_linked_to_the_dead_one_which_stays_as_it_ended(ledger):
    assert fail(ledger, KEY) == "dead"
    [dead] = ledger.job_attempts(KEY.job_id)
    assert (dead.attempt_id, dead.replay_of, dead.state, dead.reason, dead.tries) == (
        KEY.job_id,
        None,
        "dead",
        "STORE_UNAVAILABLE",
        1,
    ) and dead.ended_at
    job = _replay(ledger, KEY.job_id, "alice", "S3 outage over")
    assert job.attempt_id not in (None, KEY.job_id) and job.replay_of == KEY.job_id
    assert (job.state, job.attempts, job.last_reason, job.source_sha256, job.policy_version) == (
        "accepted",
        0,
        None,
        KEY.source_sha256,
        KEY.policy_version,
    )  # the same input, under its pinned policy
    ended, current = ledger.job_attempts(KEY.job_id)
    assert ended == dead  # the dead attempt: state, reason, message, tries and clocks as they were
    assert (current.attempt_id, current.replay_of, current.state, current.ended_at) == (
        job.attempt_id,
        KEY.job_id,
        "accepted",
        None,
    )
    [event] = ledger.events_of_type("job.replayed")
    assert event["actor"] == "alice" and event["subject_sha256"] == KEY.source_sha256
    assert {k: event["details"][k] for k in ("job_id", "attempt_id", "replay_of", "policy_version", "reason")} == {
        "job_id": KEY.job_id,
        "attempt_id": job.attempt_id,
        "replay_of": KEY.job_id,
        "policy_version": KEY.policy_version,
        "reason": "S3 outage over",
    }
    assert ledger.verify_chain()


def test_one_live_attempt_at_a_time_and_each_replay_links_to_the_attempt_before(ledger):
    assert code(lambda: _replay(ledger, KEY.job_id, "alice", "never failed")) == "JOB_CLOSED"
    fail(ledger, KEY)
    second = _replay(ledger, KEY.job_id, "alice", "first replay")
    assert code(lambda: _replay(ledger, KEY.job_id, "dave", "the same dead job again")) == "JOB_CLOSED"
    assert len(ledger.events_of_type("job.replayed")) == 1  # the refused replay wrote nothing
    assert fail(ledger, KEY, "SOURCE_INVALID", retryable=False) == "rejected"
    third = _replay(ledger, KEY.job_id, "carol", "source fixed")
    assert third.replay_of == second.attempt_id != third.attempt_id
    attempts = ledger.job_attempts(KEY.job_id)
    assert [(a.attempt_id, a.replay_of, a.state, a.reason) for a in attempts] == [
        (KEY.job_id, None, "dead", "STORE_UNAVAILABLE"),
        (second.attempt_id, KEY.job_id, "rejected", "SOURCE_INVALID"),
        (third.attempt_id, second.attempt_id, "accepted", None),
    ]
    assert ledger.verify_chain()


def test_a_replay_runs_under_the_pinned_policy_only(ledger):
    fail(ledger, KEY)
    assert code(lambda: _replay(ledger, KEY.job_id, "alice", "newer policy", "policy/2")) == "REPLAY_POLICY_MISMATCH"
    assert ledger.job(KEY.job_id).state == "dead" and len(ledger.job_attempts(KEY.job_id)) == 1
    assert _replay(ledger, KEY.job_id, "alice", "named", KEY.policy_version).policy_version == KEY.policy_version


def test_an_ended_attempt_cannot_be_changed_and_an_edit_fails_verification(ledger):
    fail(ledger, KEY)
    _replay(ledger, KEY.job_id, "alice", "S3 outage over")
    table = "evidence_job_attempts"
    with pytest.raises(Exception, match="LEDGER_APPEND_ONLY|append"), ledger.writing() as conn:
        conn.execute(ledger.ended_attempts.update().values(reason="WORKER_LOST"))
    with ledger.writing() as conn:  # someone with DDL rights drops the guards and rewrites history
        for statement in append_only.drop_guards(ledger.engine.dialect.name, table):
            conn.exec_driver_sql(statement)
        conn.execute(ledger.ended_attempts.update().values(reason="WORKER_LOST"))
    assert code(ledger.verify_chain) == "LEDGER_INVALID"


def test_a_replayed_document_job_is_picked_up_finishes_and_its_status_lists_its_attempts(documents, intake):
    acme, _ = tokens(documents)
    ledger = documents.ledger
    with client(intake, acme) as http:
        document_id = upload(http, pdf_bytes()).json()["document_id"]
        job_id = submit(http, "inspect", {"operation": "inspect", "inputs": [document_id]}).json()["job_id"]
        documents.pages.assign_pages(10)
        ledger.acquire_lease(job_id, "doomed", 0.05)  # a run that died holding the lease: one spent attempt
        time.sleep(0.1)
        [lost] = dispatch(documents, "run-1")
        assert (lost.job_id, lost.state, lost.reason) == (job_id, "dead", "WORKER_LOST")
        [dead] = http.get(f"/v1/jobs/{job_id}").json()["job_attempts"]
        assert (dead["attempt_id"], dead["state"], dead["reason"]) == (job_id, "dead", "WORKER_LOST")
        replayed = _replay(ledger, job_id, "operator", "the node was replaced")
        waiting = http.get(f"/v1/jobs/{job_id}").json()
        assert (waiting["state"], waiting["finished_at"], waiting["reason"]) == ("accepted", None, None)
        [outcome] = dispatch(documents, "run-2")  # what the dispatch sensor does: the job's page again
        assert (outcome.job_id, outcome.state) == (job_id, "succeeded")
        status = http.get(f"/v1/jobs/{job_id}").json()
    assert status["state"] == "succeeded" and status["outputs"]
    first, second = status["job_attempts"]
    assert first == dead  # the dead attempt is listed as it ended
    assert (second["attempt_id"], second["replay_of"], second["state"], second["tries"]) == (
        replayed.attempt_id,
        job_id,
        "succeeded",
        1,
    ) and second["ended_at"]
    assert ledger.verify_chain()


def _dead_letters(backend, *args: str):
    env = intake_environment(backend) | INTAKE_OVERRIDES
    return CliRunner().invoke(main, ["dead-letter", "list", *args], env=env)


def _listed(backend, *args: str) -> list[str]:
    result = _dead_letters(backend, "--json", *args)
    assert result.exit_code == 0, result.output
    return [letter["job_id"] for letter in json.loads(result.output)]


def test_dead_letters_are_failures_only_filtered_with_the_next_step_for_each_kind(documents, intake, backend, tmp_path):
    acme, globex = tokens(documents)
    ledger = documents.ledger
    with client(intake, acme) as http:
        xfa = upload(http, HOSTILE["xfa_form"][0]).json()["document_id"]
        refused = submit(http, "xfa", {"operation": "inspect", "inputs": [xfa]}).json()["job_id"]
    with client(intake, globex) as http:
        document_id = upload(http, pdf_bytes()).json()["document_id"]
        died = submit(http, "died", {"operation": "inspect", "inputs": [document_id]}).json()["job_id"]
    documents.pages.assign_pages(10)
    ledger.acquire_lease(died, "doomed", 0.05)
    time.sleep(0.1)
    outcomes = {o.job_id: (o.state, o.reason) for o in dispatch(documents)}
    assert outcomes == {refused: ("rejected", "DOCUMENT_XFA"), died: ("dead", "WORKER_LOST")}
    dead_month, failed_month = (JobKey("acme", "2026-01", sha * 64, "renderer/1", "policy/1") for sha in "bc")
    for key in (dead_month, failed_month):
        ledger.accept_job(key, "pin")
    assert fail(ledger, dead_month) == "dead"
    assert fail(ledger, failed_month, "STORE_READ_ONLY", retryable=False) == "rejected"  # terminal: a failure
    with ledger.writing() as conn:  # the failed month ended two days ago
        conn.execute(
            ledger.jobs.update()
            .where(ledger.jobs.c.job_id == failed_month.job_id)
            .values(updated_at=time.time() - 2 * 86400)
        )

    everything = _listed(backend)
    assert everything == [failed_month.job_id, died, dead_month.job_id]  # oldest ending first
    assert refused not in everything  # the gate's decision is the job's outcome, not a dead letter
    assert _listed(backend, "--kind", "document") == [died]
    assert _listed(backend, "--kind", "tenant-month") == [failed_month.job_id, dead_month.job_id]
    assert _listed(backend, "--kind", "evidence-request") == []
    assert _listed(backend, "--tenant", "globex") == [died]
    assert _listed(backend, "--code", "WORKER_LOST", "--code", "STORE_READ_ONLY") == [failed_month.job_id, died]
    assert _listed(backend, "--older-than", "1d") == [failed_month.job_id]
    assert _listed(backend, "--since", time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 86400))) == [
        died,
        dead_month.job_id,
    ]

    letters = {letter["job_id"]: letter for letter in json.loads(_dead_letters(backend, "--json").output)}
    document, month = letters[died], letters[dead_month.job_id]
    assert (document["kind"], document["tenant"], document["state"], document["reason"], document["attempt_id"]) == (
        "document",
        "globex",
        "dead",
        "WORKER_LOST",
        died,
    )
    assert "document_dispatch_sensor" in document["next_step"] and "materialize" not in document["next_step"]
    assert f"evidence replay {died} --reason TEXT --key FILE" in document["next_step"]  # a signed action
    assert month["kind"] == "tenant-month" and "partition 2026-01-01|acme" in month["next_step"]
    text = _dead_letters(backend)
    assert text.exit_code == 0 and f"{died}  dead" in text.output and "3 job(s)" in text.output
    assert _dead_letters(backend, "--older-than", "soon").exit_code == 2  # not a duration

    operator_key = Signers(ledger, tmp_path / "actors").key_file("olga")
    replayed = CliRunner().invoke(
        main,
        ["replay", died, "--reason", "node replaced", "--key", operator_key],
        env=intake_environment(backend) | INTAKE_OVERRIDES,
    )
    attempt = ledger.job(died).attempt_id
    assert replayed.exit_code == 0 and f"attempt {attempt} replays {died}" in replayed.output
    assert "document_dispatch_sensor requests a run of its page" in replayed.output
    assert _listed(backend, "--kind", "document") == []  # a replayed job is no longer a dead letter
