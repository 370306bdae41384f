"""Who acts, through the command line (issue 30): `evidence actor …` manages signed identities, and every privileged
command signs its request with the actor's key and passes the action gate: each role's allowed and refused
actions, four-eyes between identities (two names on one key are one identity), a request that acts once, and
`ledger verify` re-checking every stored authorization."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from evidence_pipeline.actors.roles import Action, Role
from evidence_pipeline.actors.verify import ActionRefused
from evidence_pipeline.audit.authorizations import recheck_ledger
from evidence_pipeline.cli import main
from evidence_pipeline.cli.actor import ROLES
from evidence_pipeline.config import Settings
from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.ledger import Ledger
from evidence_pipeline.ledger.jobs import JobKey, RetryBudget
from evidence_pipeline.models import EventType, TenantMonth
from evidence_pipeline.synthetic.rental_applications import organization_template, program_template
from evidence_pipeline_tests.support.signers import Signers, request_text, with_text

CANDIDATE = "lease-review/2026.2"
JOB = JobKey("acme", "2026-10", "a" * 64, "renderer/1", "policy/1")


class World:
    """A home on the embedded default with the test actors (root, olga, bob, audrey) and a rejected job."""

    def __init__(self, tmp_path: Path):
        self.env = {"EVIDENCE_HOME": str(tmp_path / "home")}
        self.ledger = Ledger(Settings.from_env(self.env).ledger_url)
        self.signers = Signers(self.ledger, tmp_path / "actors")
        self.ledger.accept_job(JOB, "pin")
        assert self.ledger.record_failure(
            JOB.job_id, "STORE_CONFLICT", retryable=False, actor="test", budget=RetryBudget(3, 60), attempt=1
        ) == ("rejected")
        self.files = tmp_path

    def run(self, *args: str, actor: str | None = None, name: str | None = None):
        signer = ["--key", self.signers.key_file(actor)] if actor else []
        result = CliRunner().invoke(main, [*args, *signer, *(["--actor", name] if name else [])], env=self.env)
        assert "Traceback" not in result.output, result.output
        return result

    def refusals(self) -> list[tuple[str, str, str]]:
        return [
            (e["actor"], e["details"]["action"], e["details"]["code"])
            for e in self.ledger.events_of_type(EventType.ACTION_REFUSED, tenant="")
        ]

    def template_files(self) -> list[str]:
        (self.files / "org.json").write_bytes(organization_template())
        (self.files / "program.json").write_bytes(program_template())
        return ["--organization", str(self.files / "org.json"), "--program", str(self.files / "program.json")]


@pytest.fixture
def world(tmp_path) -> World:
    return World(tmp_path)


def _refused(result, code: str) -> None:
    assert result.exit_code != 0 and code in result.output, result.output


def test_the_actor_commands_keygen_bootstrap_register_change_and_list(tmp_path):
    env = {"EVIDENCE_HOME": str(tmp_path / "home")}

    def run(*args: str):
        result = CliRunner().invoke(main, list(args), env=env)
        assert "Traceback" not in result.output, result.output
        return result

    keys = tmp_path / "actors"
    made = {
        name: json.loads(run("actor", "keygen", str(keys / f"{name}.pem"), "--json").output)
        for name in ("ada", "olga", "olga-new")
    }
    assert stat.S_IMODE((keys / "ada.pem").stat().st_mode) == 0o600
    _refused(run("actor", "keygen", str(keys / "ada.pem")), "KEY_MATERIAL_INVALID")  # never overwritten
    ada, olga = ["--key", str(keys / "ada.pem")], ["--key", str(keys / "olga.pem")]
    assert run("actor", "bootstrap", "ada", *ada).exit_code == 0
    _refused(run("actor", "bootstrap", "olga", *olga), "ACTOR_ALREADY_BOOTSTRAPPED")
    assert (
        run(
            "actor", "register", "olga", "--role", "operator", "--public-key", made["olga"]["public_key"], *ada
        ).exit_code
        == 0
    )
    _refused(
        run("actor", "register", "eve", "--role", "admin", "--public-key", made["olga-new"]["public_key"], *olga),
        "ACTION_FORBIDDEN",
    )
    assert run("actor", "roles", "olga", "--role", "operator", "--role", "auditor", *ada).exit_code == 0
    # rotating an actor's key: add the new one, then revoke the old
    assert run("actor", "key", "add", "olga", "--public-key", made["olga-new"]["public_key"], *ada).exit_code == 0
    assert run("actor", "key", "revoke", "olga", made["olga"]["key_id"], *ada).exit_code == 0
    _refused(run("actor", "roles", "ada", "--role", "operator", *ada), "ACTOR_LAST_ADMIN")
    listed = json.loads(run("actor", "list", "--json").output)
    assert listed["olga"]["roles"] == ["auditor", "operator"] and listed["ada"]["roles"] == ["admin"]
    assert listed["olga"]["keys"][made["olga"]["key_id"]]["revoked_at"] is not None
    assert listed["olga"]["keys"][made["olga-new"]["key_id"]]["revoked_at"] is None
    verified = run("ledger", "verify")
    assert verified.exit_code == 0 and "5 signed actions authorized" in verified.output, verified.output


def test_the_cli_roles_are_the_domain_roles():
    assert set(ROLES) == set(Role)


def test_each_role_may_do_what_the_table_says_and_nothing_else(world):
    replay = ("replay", JOB.job_id, "--reason", "S3 outage over")
    for actor in ("bob", "audrey", "root"):
        _refused(world.run(*replay, actor=actor), "ACTION_FORBIDDEN")
    assert world.run(*replay, actor="olga").exit_code == 0
    assert world.ledger.job(JOB.job_id).state == "accepted"

    canary = ("ruleset", "canary", CANDIDATE, "--tenant", "acme")
    _refused(world.run(*canary, actor="bob"), "ACTION_FORBIDDEN")
    assert world.run(*canary, "--json", actor="olga").exit_code == 0
    _refused(world.run("ruleset", "rollback", actor="audrey"), "ACTION_FORBIDDEN")
    assert world.run("ruleset", "rollback", actor="olga").exit_code == 0

    _refused(world.run("template", "submit", "acme", *world.template_files(), actor="bob"), "ACTION_FORBIDDEN")
    submitted = world.run("template", "submit", "acme", *world.template_files(), "--json", actor="olga")
    version = json.loads(submitted.output)["version_id"]
    _refused(world.run("template", "approve", "acme", version, actor="olga"), "ACTION_FORBIDDEN")
    approved = world.run("template", "approve", "acme", version, "--json", actor="bob")
    assert approved.exit_code == 0 and json.loads(approved.output)["approved_by"] == "bob"

    _refused(world.run("tenant", "offboard", "acme", "--reason", "left", actor="bob"), "ACTION_FORBIDDEN")
    _refused(world.run("tenant", "offboard", "acme", "--approve", actor="bob"), "OFFBOARDING_NOT_REQUESTED")
    assert world.run("tenant", "offboard", "acme", "--reason", "left", actor="olga").exit_code == 0
    _refused(world.run("tenant", "offboard", "acme", "--approve", actor="olga"), "ACTION_FORBIDDEN")
    assert world.run("tenant", "offboard", "acme", "--approve", actor="bob").exit_code == 0

    _refused(world.run("keys", "rotate", actor="olga"), "ACTION_FORBIDDEN")
    assert world.run("keys", "rotate", actor="root").exit_code == 0
    _refused(world.run("keys", "rotate"), "ACTION_UNSIGNED")  # no key at all

    assert world.refusals() == [
        ("bob", "job.replay", "ACTION_FORBIDDEN"),
        ("audrey", "job.replay", "ACTION_FORBIDDEN"),
        ("root", "job.replay", "ACTION_FORBIDDEN"),
        ("bob", "ruleset.canary", "ACTION_FORBIDDEN"),
        ("audrey", "ruleset.rollback", "ACTION_FORBIDDEN"),
        ("bob", "template.submit", "ACTION_FORBIDDEN"),
        ("olga", "template.approve", "ACTION_FORBIDDEN"),
        ("bob", "tenant.offboard", "ACTION_FORBIDDEN"),
        ("olga", "tenant.offboard.approve", "ACTION_FORBIDDEN"),
        ("olga", "keys.rotate", "ACTION_FORBIDDEN"),
    ]
    who = {(e["event_type"], e["actor"]) for e in world.ledger.events_of_type(EventType.JOB_REPLAYED, "acme")}
    assert who == {("job.replayed", "olga")}
    verified = world.run("ledger", "verify")
    assert verified.exit_code == 0, verified.output
    # the bootstrap and 3 registrations, replay, canary, rollback, submit, approve, offboard asked and approved,
    # the rotation
    assert "12 signed actions authorized" in verified.output, verified.output


def test_four_eyes_is_between_identities_not_names(world):
    world.signers.register("bob-ops", ["operator"], key=world.signers.keys["bob"])  # bob's key, a second name
    submitted = world.run("template", "submit", "acme", *world.template_files(), "--json", actor="bob", name="bob-ops")
    assert submitted.exit_code == 0, submitted.output
    version = json.loads(submitted.output)["version_id"]
    _refused(world.run("template", "approve", "acme", version, actor="bob"), "TEMPLATE_SELF_APPROVAL")
    assert world.run("tenant", "offboard", "acme", "--reason", "left", actor="bob", name="bob-ops").exit_code == 0
    _refused(world.run("tenant", "offboard", "acme", "--approve", actor="bob"), "FOUR_EYES_REQUIRED")
    assert world.refusals() == [
        ("bob", "template.approve", "TEMPLATE_SELF_APPROVAL"),
        ("bob", "tenant.offboard.approve", "FOUR_EYES_REQUIRED"),
    ]
    world.signers.register("carla", ["approver"])
    assert world.run("template", "approve", "acme", version, actor="carla").exit_code == 0
    assert world.run("tenant", "offboard", "acme", "--approve", actor="carla").exit_code == 0


def test_a_signed_request_acts_once(world):
    from evidence_pipeline.operations.replay import replay_job

    envelope = world.signers.sign("olga", Action.JOB_REPLAY, {"job_id": JOB.job_id, "reason": "once"})
    assert replay_job(world.signers.gate, envelope).state == "accepted"
    world.ledger.record_failure(
        JOB.job_id, "STORE_CONFLICT", retryable=False, actor="test", budget=RetryBudget(3, 60), attempt=1
    )
    with pytest.raises(ActionRefused) as refused:
        replay_job(world.signers.gate, envelope)
    assert refused.value.code == "ACTION_REPLAYED" and world.ledger.job(JOB.job_id).state == "rejected"
    assert world.refusals() == [("olga", "job.replay", "ACTION_REPLAYED")]


def test_ledger_verify_fails_on_a_tampered_authorization(world):
    """Someone with write access appends a `job.replayed` event, chained properly, that carries a stored request
    with its reason changed: the chain holds, the authorization does not."""
    assert world.run("replay", JOB.job_id, "--reason", "S3 outage over", actor="olga").exit_code == 0
    assert world.run("ledger", "verify").exit_code == 0
    [replayed] = world.ledger.events_of_type(EventType.JOB_REPLAYED, "acme")
    authorization = dict(replayed["details"]["authorization"])
    authorization = with_text(authorization, request_text(authorization).replace("S3 outage over", "nothing was wrong"))
    forged = replayed["details"] | {"authorization": authorization}
    with pytest.raises(EvidenceError, match="UNEXPECTED_ERROR"):  # the ledger's own API appends no such event
        world.ledger.record(TenantMonth("acme", "2026-10"), EventType.JOB_REPLAYED, "a" * 64, "olga", **forged)
    with world.ledger.writing() as conn:  # write access past it
        world.ledger.check_appends(conn, lambda _body: None)
        world.ledger._append(
            conn, TenantMonth("acme", "2026-10"), EventType.JOB_REPLAYED, "a" * 64, actor="olga", details=forged
        )
    verified = world.run("ledger", "verify")
    assert verified.exit_code == 1 and "LEDGER_INVALID" in verified.output
    # The forged replay also has no ended-attempt row, which the mirror check reports first; the re-check of the
    # stored requests, on its own, names the signature.
    with pytest.raises(EvidenceError, match="ACTION_SIGNATURE_INVALID"):
        recheck_ledger(world.ledger, 300)
