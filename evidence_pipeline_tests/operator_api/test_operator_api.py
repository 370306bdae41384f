"""The operator HTTP API (issue 30), on a real uvicorn server on 127.0.0.1: every role's allowed and refused
actions, the refusals of an unregistered key, a revoked key, a replayed nonce, an expired or tampered request and a
tenant's bearer token, each with its code and recorded; replay as a linked attempt, four-eyes between identities,
the same dead letters as the command line; every answer conforms to the served OpenAPI 3.1 document."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import time
from datetime import datetime, timedelta, timezone

import httpx
import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from openapi_spec_validator import validate

from evidence_pipeline.actors.keyfiles import public_hex
from evidence_pipeline.actors.requests import key_id, sign_request
from evidence_pipeline.actors.roles import Action
from evidence_pipeline.audit.authorizations import recheck_ledger
from evidence_pipeline.cli import main
from evidence_pipeline.errors import ReasonCode
from evidence_pipeline.ledger.jobs import JobKey
from evidence_pipeline.operator_api import contract
from evidence_pipeline.operator_api.app import CONTRACT, STATUS, create_app
from evidence_pipeline.synthetic.rental_applications import organization_template, program_template
from evidence_pipeline_tests.support.contract import conforms
from evidence_pipeline_tests.support.intake_server import EVIDENCE, _free_port, intake_environment, running_app, tokens
from evidence_pipeline_tests.support.jobs import fail
from evidence_pipeline_tests.support.signers import Signers, request_text, with_signature

DEAD = JobKey("acme", "2026-01", "b" * 64, "renderer/1", "policy/1")
OTHER_DEAD = JobKey("globex", "2026-02", "c" * 64, "renderer/1", "policy/1")
PATH = {action: path for path, action in contract.OPERATIONS}


@pytest.fixture
def operator_api(documents):
    """(base URL, the test actors: root admin, olga operator, bob approver, audrey auditor, rita reviewer)."""
    signers = Signers(documents.ledger)
    signers.register("rita", ["reviewer"])
    with running_app(create_app(documents), documents.settings) as url:
        yield url, signers


def _post(url: str, action: Action, envelope: object, **extra) -> httpx.Response:
    """POST the operation of ``action`` with ``envelope`` (None: none) and ``extra`` body fields; checks that the
    answer is one the contract declares, and that a refusal is an error body without a traceback."""
    body = ({} if envelope is None else {"authorization": envelope}) | extra
    response = httpx.post(url + PATH[action], json=body, timeout=30)
    conforms("post", PATH[action], response, CONTRACT)
    if response.status_code >= 400:
        assert set(response.json()) == {"error"} and "Traceback" not in response.text
    return response


def _code(response: httpx.Response) -> str:
    return response.json()["error"]["code"]


def _refusals(ledger) -> list[tuple[str, str, str, bool]]:
    """Each `action.refused` event: (actor, code, action, whether it kept the request)."""
    return [
        (event["actor"], event["details"]["code"], event["details"]["action"], "authorization" in event["details"])
        for event in ledger.events_of_type("action.refused")
    ]


def _templates() -> dict[str, str]:
    return {"organization": organization_template().decode(), "program": program_template().decode()}


def _submission(signers: Signers, actor: str) -> dict:
    from evidence_pipeline.documents import templates

    texts = _templates()
    vid = templates.version_id(
        templates.merge(
            templates.parse(texts["organization"].encode(), "organization"),
            templates.parse(texts["program"].encode(), "program"),
        )
    )
    envelope = signers.sign(
        actor,
        Action.TEMPLATE_SUBMIT,
        {"version_id": vid, "effective_at": datetime.now(timezone.utc).isoformat(timespec="seconds")},
        tenant="acme",
    )
    return {"envelope": envelope, **texts}


def test_the_contract_is_valid_openapi_3_1_served_and_names_every_code(operator_api):
    url, _ = operator_api
    validate(CONTRACT)
    served = httpx.get(f"{url}/openapi.json")
    assert served.status_code == 200 and served.json() == json.loads(json.dumps(CONTRACT))
    named = {code for operation in contract.OPERATIONS.values() for code in operation[3]} | set(contract._ALWAYS)
    routing = {ReasonCode.ROUTE_NOT_FOUND, ReasonCode.METHOD_NOT_ALLOWED}  # no operation answers these
    assert set(STATUS) - routing == named
    assert {operation["post"]["x-action"] for operation in CONTRACT["paths"].values()} == {str(a) for a in PATH}
    missing = httpx.post(f"{url}/v1/nothing", json={})
    assert (missing.status_code, _code(missing)) == (404, "ROUTE_NOT_FOUND")
    assert _code(httpx.get(url + PATH[Action.JOB_REPLAY])) == "METHOD_NOT_ALLOWED"


def test_every_role_is_allowed_and_refused_what_the_roles_table_says(documents, operator_api):
    url, signers = operator_api
    ledger = documents.ledger
    ledger.accept_job(DEAD, "pin")
    fail(ledger, DEAD)
    everyone = ("root", "olga", "bob", "audrey", "rita")
    allowed = {
        Action.JOBS_READ: {"olga", "audrey"},
        Action.JOB_REPLAY: {"olga"},
        Action.TEMPLATE_SUBMIT: {"olga"},
        Action.TEMPLATE_APPROVE: {"bob"},
        Action.PART_DECIDE: {"bob", "rita"},
    }
    # every refused role first: nothing changes, and each refusal is recorded with its signed request
    for action, actors in allowed.items():
        for actor in set(everyone) - actors:
            response = _act(url, signers, actor, action)
            assert (response.status_code, _code(response)) == (403, "ACTION_FORBIDDEN"), (actor, action)
    assert ledger.job(DEAD.job_id).state == "dead" and not ledger.events_of_type("job.replayed")
    assert not ledger.events_of_type("template.submitted")
    assert sorted(_refusals(ledger)) == sorted(
        (actor, "ACTION_FORBIDDEN", str(action), True)
        for action, actors in allowed.items()
        for actor in everyone
        if actor not in actors
    )

    for actor in ("olga", "audrey"):  # reads record nothing
        listed = _act(url, signers, actor, Action.JOBS_READ)
        assert listed.status_code == 200 and [letter["job_id"] for letter in listed.json()["dead_letters"]] == [
            DEAD.job_id
        ]
    replayed = _act(url, signers, "olga", Action.JOB_REPLAY)
    assert replayed.status_code == 201 and replayed.json()["replay_of"] == DEAD.job_id
    submitted = _act(url, signers, "olga", Action.TEMPLATE_SUBMIT)
    assert submitted.status_code == 201 and submitted.json()["author"] == "olga"
    approved = _act(url, signers, "bob", Action.TEMPLATE_APPROVE, submitted.json()["version_id"])
    assert approved.status_code == 201 and approved.json()["approved_by"] == "bob"
    for actor in ("bob", "rita"):  # past the gate's role check: the part is looked up (test_part_decisions decides)
        unknown = _act(url, signers, actor, Action.PART_DECIDE)
        assert (unknown.status_code, _code(unknown)) == (404, "DOCUMENT_NOT_FOUND")
    assert len(_refusals(ledger)) == 18  # the allowed actions recorded no refusal


def _act(url: str, signers: Signers, actor: str, action: Action, version_id: str = "0" * 64) -> httpx.Response:
    """``action`` over HTTP, signed by ``actor``: read every dead letter, replay DEAD, submit the test templates for
    acme, approve ``version_id`` of acme."""
    if action == Action.TEMPLATE_SUBMIT:
        submission = _submission(signers, actor)
        return _post(url, action, submission.pop("envelope"), **submission)
    args = {
        Action.JOBS_READ: {},
        Action.JOB_REPLAY: {"job_id": DEAD.job_id, "reason": "store remounted"},
        Action.TEMPLATE_APPROVE: {"version_id": version_id},
        Action.PART_DECIDE: {
            "artifact_id": "documents/acme/" + "0" * 64 + "/derived/part.pdf",
            "decision": "approved",
            "reason": "read it",
        },
    }[action]
    tenant = "acme" if action in (Action.TEMPLATE_APPROVE, Action.PART_DECIDE) else None
    return _post(url, action, signers.sign(actor, action, args, tenant))


def test_unauthenticated_expired_replayed_and_tenant_requests_are_refused_with_their_codes(documents, operator_api):
    url, signers = operator_api
    ledger = documents.ledger
    ledger.accept_job(DEAD, "pin")
    fail(ledger, DEAD)
    read = Action.JOBS_READ
    stranger = Ed25519PrivateKey.generate()  # a key no admin registered
    assert _code(_post(url, read, sign_request(stranger, "olga", read, args={}))) == "ACTOR_UNKNOWN"
    assert _code(_post(url, read, sign_request(stranger, "mallory", read, args={}))) == "ACTOR_UNKNOWN"

    tampered = with_signature(signers.sign("olga", read, {}), base64.b64encode(bytes(64)).decode())
    assert _code(_post(url, read, tampered)) == "ACTION_SIGNATURE_INVALID"
    late = sign_request(
        signers.keys["olga"], "olga", read, args={}, now=datetime.now(timezone.utc) - timedelta(hours=1)
    )
    assert _post(url, read, late).status_code == 401 and _code(_post(url, read, late)) == "ACTION_EXPIRED"
    wrong = _post(url, read, signers.sign("olga", Action.JOB_REPLAY, {"job_id": DEAD.job_id, "reason": "x"}))
    assert (wrong.status_code, _code(wrong)) == (422, "ACTION_REQUEST_INVALID")  # signed for another action
    bad_filter = _post(url, read, signers.sign("olga", read, {"kinds": ["everything"]}))
    assert (bad_filter.status_code, _code(bad_filter)) == (422, "ACTION_REQUEST_INVALID")

    # a tenant's bearer token is no credential here, with or without a body
    tenant_token, _ = tokens(documents)
    for body in ({}, None):
        response = httpx.post(
            url + PATH[Action.JOB_REPLAY], json=body, timeout=30, headers={"Authorization": f"Bearer {tenant_token}"}
        )
        conforms("post", PATH[Action.JOB_REPLAY], response, CONTRACT)
        assert (response.status_code, _code(response)) == (
            (401, "ACTION_UNSIGNED") if body == {} else (400, "REQUEST_INVALID")
        )
    assert _code(_post(url, read, "not an envelope")) == "ACTION_REQUEST_INVALID"
    # issue 47: a body the old reader took minutes on (an unterminated string of escaped quotes after more brackets
    # than the depth limit) is refused at once
    crafted = httpx.post(
        url + PATH[read],
        content=b'{"a": "' + b"[" * 17 + b'\\"' * 32_000,
        timeout=30,
        headers={"Content-Type": "application/json"},
    )
    assert (crafted.status_code, _code(crafted)) == (400, "REQUEST_INVALID")
    # issue 47: a replay naming another tenant than its job's is refused: `ledger verify` would not accept its event
    elsewhere = _post(
        url,
        Action.JOB_REPLAY,
        signers.sign(
            "olga", Action.JOB_REPLAY, {"job_id": DEAD.job_id, "reason": "store remounted"}, tenant=OTHER_DEAD.tenant
        ),
    )
    assert (elsewhere.status_code, _code(elsewhere)) == (422, "ACTION_REQUEST_INVALID")
    assert not ledger.events_of_type("job.replayed")

    replay = signers.sign("olga", Action.JOB_REPLAY, {"job_id": DEAD.job_id, "reason": "store remounted"})
    assert _post(url, Action.JOB_REPLAY, replay).status_code == 201
    again = _post(url, Action.JOB_REPLAY, replay)  # the same signed request a second time
    assert (again.status_code, _code(again)) == (409, "ACTION_REPLAYED")
    assert len(ledger.events_of_type("job.replayed")) == 1

    old_key = signers.keys["olga"]
    new_key = Ed25519PrivateKey.generate()
    signers.admin.add_key(
        signers.sign("root", Action.ACTOR_KEY_ADD, {"name": "olga", "public_key": public_hex(new_key)})
    )
    signers.admin.revoke_key(
        signers.sign("root", Action.ACTOR_KEY_REVOKE, {"name": "olga", "key_id": key_id(old_key.public_key())})
    )
    revoked = _post(url, read, sign_request(old_key, "olga", read, args={}))
    assert (revoked.status_code, _code(revoked)) == (401, "ACTOR_KEY_REVOKED")
    assert _post(url, read, sign_request(new_key, "olga", read, args={})).status_code == 200

    refusals = _refusals(ledger)
    # unauthenticated: no actor, nothing of the request kept; authenticated: the actor and the signed request
    assert ("", "ACTOR_UNKNOWN", "jobs.read", False) in refusals and ("", "ACTION_UNSIGNED", "job.replay", False) in (
        refusals
    )
    assert ("", "ACTION_SIGNATURE_INVALID", "jobs.read", False) in refusals
    assert {
        ("olga", "ACTION_EXPIRED", "jobs.read", True),
        ("olga", "ACTION_REQUEST_INVALID", "jobs.read", True),
        ("olga", "ACTION_REPLAYED", "job.replay", True),
        ("olga", "ACTOR_KEY_REVOKED", "jobs.read", True),
        ("olga", "ACTION_REQUEST_INVALID", "job.replay", True),
    } <= set(refusals)
    assert ledger.verify_chain()
    recheck_ledger(ledger, 300)  # and what `evidence ledger verify` re-checks holds


def test_replay_over_http_opens_the_linked_attempt_the_command_line_would(documents, operator_api, backend):
    url, signers = operator_api
    ledger = documents.ledger
    for key in (DEAD, OTHER_DEAD):
        ledger.accept_job(key, "pin")
        fail(ledger, key)
    env = intake_environment(backend)
    for filters, options in (
        ({}, []),
        ({"tenant": "globex"}, ["--tenant", "globex"]),
        (
            {"kinds": ["tenant-month"], "codes": ["STORE_UNAVAILABLE"]},
            ["--kind", "tenant-month", "--code", "STORE_UNAVAILABLE"],
        ),
        ({"kinds": ["document"]}, ["--kind", "document"]),
        ({"older_than_seconds": 86400}, ["--older-than", "1d"]),
        ({"since": "2020-01-01T00:00:00+00:00"}, ["--since", "2020-01-01T00:00:00+00:00"]),
    ):
        listed = _post(url, Action.JOBS_READ, signers.sign("audrey", Action.JOBS_READ, filters))
        command = CliRunner().invoke(main, ["dead-letter", "list", "--json", *options], env=env)
        assert listed.status_code == 200 and command.exit_code == 0, command.output
        assert listed.json()["dead_letters"] == json.loads(command.output), filters  # the same data, the same filters
    assert len(listed.json()["dead_letters"]) == 2

    [dead] = ledger.job_attempts(DEAD.job_id)
    envelope = signers.sign(
        "olga", Action.JOB_REPLAY, {"job_id": DEAD.job_id, "reason": "store remounted", "policy_version": "policy/1"}
    )
    replayed = _post(url, Action.JOB_REPLAY, envelope).json()
    ended, current = ledger.job_attempts(DEAD.job_id)
    assert ended == dead  # the dead attempt stays as it ended
    assert (replayed["job_id"], replayed["replay_of"], replayed["attempt_id"], replayed["state"]) == (
        DEAD.job_id,
        DEAD.job_id,
        current.attempt_id,
        "accepted",
    ) and current.replay_of == DEAD.job_id
    assert (
        "tenant_month_retry_sensor requests a monthly_evidence run of partition 2026-01-01|acme"
        in replayed["next_step"]
    )
    [event] = ledger.events_of_type("job.replayed")
    assert event["actor"] == "olga" and event["details"]["authorization"] == envelope  # stored exactly as signed
    assert (event["details"]["attempt_id"], event["details"]["replay_of"]) == (current.attempt_id, DEAD.job_id)
    mismatch = _post(
        url,
        Action.JOB_REPLAY,
        signers.sign(
            "olga", Action.JOB_REPLAY, {"job_id": OTHER_DEAD.job_id, "reason": "x", "policy_version": "policy/2"}
        ),
    )
    assert (mismatch.status_code, _code(mismatch)) == (422, "REPLAY_POLICY_MISMATCH")
    closed = _post(
        url, Action.JOB_REPLAY, signers.sign("olga", Action.JOB_REPLAY, {"job_id": DEAD.job_id, "reason": "again"})
    )
    assert (closed.status_code, _code(closed)) == (409, "JOB_CLOSED")
    unknown = _post(
        url, Action.JOB_REPLAY, signers.sign("olga", Action.JOB_REPLAY, {"job_id": "f" * 64, "reason": "x"})
    )
    assert (unknown.status_code, _code(unknown)) == (404, "JOB_NOT_FOUND")
    after = _post(url, Action.JOBS_READ, signers.sign("olga", Action.JOBS_READ, {}))
    assert [letter["job_id"] for letter in after.json()["dead_letters"]] == [OTHER_DEAD.job_id]
    assert ledger.verify_chain()


def test_template_approval_over_http_is_four_eyes_between_identities(documents, operator_api):
    url, signers = operator_api
    ledger = documents.ledger
    signers.register("olga-approves", ["approver"], key=signers.keys["olga"])  # a second name on olga's key
    submission = _submission(signers, "olga")
    envelope = submission.pop("envelope")
    submitted = _post(url, Action.TEMPLATE_SUBMIT, envelope, **submission)
    assert submitted.status_code == 201
    vid = submitted.json()["version_id"]
    again = _post(
        url,
        Action.TEMPLATE_SUBMIT,
        signers.sign("olga", Action.TEMPLATE_SUBMIT, json.loads(request_text(envelope))["args"], "acme"),
        **submission,
    )
    assert again.status_code == 200 and again.json() == submitted.json()  # the same rules: the same version

    def approve(actor: str) -> httpx.Response:
        return _post(
            url, Action.TEMPLATE_APPROVE, signers.sign(actor, Action.TEMPLATE_APPROVE, {"version_id": vid}, "acme")
        )

    self_approval = approve("olga-approves")
    assert (self_approval.status_code, _code(self_approval)) == (403, "TEMPLATE_SELF_APPROVAL")
    assert ("olga-approves", "TEMPLATE_SELF_APPROVAL", "template.approve", True) in _refusals(ledger)
    approved = approve("bob")
    assert approved.status_code == 201 and approved.json()["approved_by"] == "bob"
    assert approve("bob").status_code == 200  # approved already: nothing more is recorded
    assert len(ledger.events_of_type("template.approved")) == 1
    missing = _post(
        url, Action.TEMPLATE_APPROVE, signers.sign("bob", Action.TEMPLATE_APPROVE, {"version_id": "0" * 64}, "acme")
    )
    assert (missing.status_code, _code(missing)) == (404, "TEMPLATE_NOT_FOUND")
    broken = _post(url, Action.TEMPLATE_SUBMIT, envelope, organization="{}", program=submission["program"])
    assert (broken.status_code, _code(broken)) == (409, "ACTION_REPLAYED")  # the request first, then the texts
    broken = _post(
        url,
        Action.TEMPLATE_SUBMIT,
        signers.sign("olga", Action.TEMPLATE_SUBMIT, json.loads(request_text(envelope))["args"], "acme"),
        organization="{}",
        program=submission["program"],
    )
    assert (broken.status_code, _code(broken)) == (422, "TEMPLATE_INVALID")
    unreadable = {**json.loads(submission["program"]), "languages": ["eng", "klingon"]}
    broken = _post(
        url,
        Action.TEMPLATE_SUBMIT,
        signers.sign("olga", Action.TEMPLATE_SUBMIT, json.loads(request_text(envelope))["args"], "acme"),
        organization=submission["organization"],
        program=json.dumps(unreadable),
    )
    assert (broken.status_code, _code(broken)) == (422, "OCR_LANGUAGE_UNAVAILABLE")
    no_templates = _post(url, Action.TEMPLATE_SUBMIT, envelope)
    assert (no_templates.status_code, _code(no_templates)) == (400, "REQUEST_INVALID")


def test_the_operator_api_is_off_by_default_and_served_on_loopback_when_its_port_is_set(tmp_path):
    env = {"EVIDENCE_HOME": str(tmp_path / "home")}
    off = CliRunner().invoke(main, ["operator-api", "serve"], env=env)
    assert off.exit_code == 2 and "CONFIG_INVALID" in off.output and "EVIDENCE_OPERATOR_API_PORT" in off.output
    assert (
        CliRunner().invoke(main, ["operator-api", "serve"], env=env | {"EVIDENCE_OPERATOR_API_PORT": "70000"}).exit_code
        == 2
    )
    port = _free_port()
    server = subprocess.Popen(
        [EVIDENCE, "operator-api", "serve"],
        env=os.environ | env | {"EVIDENCE_OPERATOR_API_PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.TransportError):
                served = httpx.get(f"http://127.0.0.1:{port}/openapi.json")
                break
            assert time.monotonic() < deadline and server.poll() is None, "operator-api serve did not start"
            time.sleep(0.2)
        assert served.status_code == 200 and served.json()["info"]["title"] == "evidence_pipeline operator API"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)
        server.wait()
