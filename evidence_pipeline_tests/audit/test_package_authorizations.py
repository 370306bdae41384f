"""Who authorized what, in an offline audit package (issue 30): `evidence export` carries the tenant's events that
store a signed request, and the actor events they are checked against, each with its inclusion proof;
`evidence verify --package` proves and re-checks them with nothing but the folder and says who authorized each.
A tampered request, a missing actor event or a failed proof fails the package, naming the event; another
tenant's authorized events are never in it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from evidence_pipeline.actors.roles import Action
from evidence_pipeline.audit.checkpoints import publish_checkpoint
from evidence_pipeline.cli import main
from evidence_pipeline.config import Settings
from evidence_pipeline.ledger.jobs import JobKey
from evidence_pipeline.monthly.pipeline import run_tenant_month
from evidence_pipeline.operations.offboarding import request_offboarding
from evidence_pipeline.runtime import RunInfo, Runtime, runtime_for
from evidence_pipeline.signing.dsse import canonical_json
from evidence_pipeline.synthetic.rental_applications import organization_template, program_template
from evidence_pipeline_tests.support.fixture_sources import FIXTURE_MONTHS, LARGE, SMALL, with_fixture_sources
from evidence_pipeline_tests.support.jobs import fail
from evidence_pipeline_tests.support.packages import index_edited, read_index
from evidence_pipeline_tests.support.signers import request_text, signers_of, with_text

TENANT, OTHER = SMALL.tenant, LARGE.tenant
DEAD_JOB = JobKey(TENANT, "2026-08", "a" * 64, "renderer/1", "policy/1")


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    """A package of acme-books, whose ledger also records evergreen-market's authorized actions: both registered
    and given a token, a template of each submitted by olga and acme-books' approved by bob, a dead job of
    acme-books replayed by olga, then olga asks for acme-books' offboarding; a checkpoint; a new actor; the
    export."""
    folder = tmp_path_factory.mktemp("package-authorizations")
    env = {"EVIDENCE_HOME": str(folder / "home")}
    runtime = Runtime.from_settings(Settings.from_env(env))
    signers = signers_of(runtime.ledger)
    for tenant in (TENANT, OTHER):  # before the fixture sources, which register a tenant the registry lacks
        signers.register_tenants([tenant])
    with_fixture_sources(runtime)
    submitted = {}
    for tenant in (TENANT, OTHER):
        signers.issue_token(tenant)
        submitted[tenant], _ = signers.submit_template(tenant, organization_template(), program_template())
    signers.approve_template(TENANT, submitted[TENANT]["version_id"])
    for tenant_month in FIXTURE_MONTHS:
        run_tenant_month(runtime, tenant_month, RunInfo("run-1"))
    runtime.ledger.accept_job(DEAD_JOB, "pin")
    assert fail(runtime.ledger, DEAD_JOB) == "dead"
    signers.replay(DEAD_JOB.job_id, "S3 outage over")
    request_offboarding(
        runtime_for(Settings.from_env(env)),
        signers.gate,
        signers.sign("olga", Action.TENANT_OFFBOARD, {"reason": "contract ended"}, tenant=TENANT),
    )
    publish_checkpoint(runtime.ledger, runtime.archive, runtime.keyring)
    signers.register("carol", ["reviewer"])  # after the newest checkpoint: not provable yet, left out
    out = folder / "package"
    result = CliRunner().invoke(main, ["export", "--tenant", TENANT, str(out)], env=env)
    assert result.exit_code == 0, result.output
    assert "and 10 authorization event(s)" in result.output
    assert "left out 1 authorization event(s) recorded after the newest checkpoint" in result.output
    return out


@pytest.fixture
def package(exported, tmp_path) -> Path:
    """A copy of the exported package that a test may tamper with."""
    copy = tmp_path / "package"
    shutil.copytree(exported, copy)
    for path in copy.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return copy


def _verify(package: Path, *args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(main, ["verify", "--package", str(package), "--json", "--workers", "1", *args])
    assert "Traceback" not in result.output, result.output
    return result.exit_code, json.loads(result.output)


def _events(package: Path) -> dict[int, dict]:
    index = read_index(package)
    return {
        int(entry["event"][7:19]): json.loads((package / entry["event"]).read_bytes())
        for entry in index["authorizations"]
    }


def _seq_of(package: Path, event_type: str, name: str | None = None) -> int:
    [seq] = [
        seq
        for seq, body in _events(package).items()
        if body["event_type"] == event_type and name in (None, body["details"].get("name"))
    ]
    return seq


def test_a_package_lists_who_authorized_each_action_of_its_tenant(exported):
    code, report = _verify(exported)
    assert code == 0 and report["ok"] and report["codes"] == [], report["codes"]
    assert [(a["action"], a["actor"]) for a in report["authorizations"]] == [
        ("actor.bootstrap", "root"),
        *[("actor.register", "root")] * 3,
        ("tenant.register", "olga"),
        ("token.issue", "olga"),
        ("template.submit", "olga"),
        ("template.approve", "bob"),
        ("job.replay", "olga"),
        ("tenant.offboard", "olga"),
    ]
    submission, approval = report["authorizations"][6:8]
    assert approval["event_type"] == "template.approved" and approval["key_id"] != submission["key_id"]  # four eyes
    assert [a["seq"] for a in report["authorizations"]] == sorted(_events(exported))
    checks = {c["name"]: c for c in report["checks"]}
    assert all(checks[f"event {seq}"]["passed"] for seq in _events(exported)) and checks["authorizations"]["passed"]
    text = CliRunner().invoke(main, ["verify", "--package", str(exported), "--workers", "1"])
    assert text.exit_code == 0 and "VERIFIED" in text.output
    assert f"template.approved: template.approve by bob (key {approval['key_id']})" in text.output


def test_another_tenants_authorized_events_are_not_in_the_package(exported):
    bodies = _events(exported).values()
    assert {body["tenant"] for body in bodies} == {TENANT, ""}
    assert not any(OTHER in path.read_text() for path in exported.rglob("*.json"))  # not even its name


def test_a_tampered_request_fails_naming_its_event(package):
    seq = _seq_of(package, "template.approved")
    path = package / f"events/{seq:012d}.json"
    body = json.loads(path.read_bytes())
    authorization = body["details"]["authorization"]
    request = json.loads(request_text(authorization))
    request["args"]["version_id"] = "0" * 64  # another template, under bob's signature
    body["details"]["authorization"] = with_text(authorization, canonical_json(request).decode())
    path.write_bytes(canonical_json(body))
    code, report = _verify(package)
    assert code == 1 and not report["ok"] and report["authorizations"] == []
    failed = {c["name"]: c for c in report["checks"] if not c["passed"]}
    assert set(failed) == {"files", f"event {seq}", "authorizations"}
    assert failed["files"]["code"] == "PACKAGE_FILE_MISMATCH"  # not the bytes the signed index lists
    assert failed[f"event {seq}"]["code"] == "PROOF_INVALID"  # its bytes are not the ledger's
    assert failed["authorizations"]["code"] == "AUTHORIZATION_INVALID"
    assert body["event_id"] in failed["authorizations"]["detail"]
    assert "ACTION_SIGNATURE_INVALID" in failed["authorizations"]["detail"]
    text = CliRunner().invoke(main, ["verify", "--package", str(package), "--workers", "1"])
    assert text.exit_code == 1 and "AUTHORIZATION_INVALID" in text.output and "Traceback" not in text.output


def test_a_package_missing_an_actor_event_fails(package):
    seq = _seq_of(package, "actor.registered", "bob")
    (package / f"events/{seq:012d}.json").unlink()
    code, report = _verify(package)
    failed = {c["name"]: c for c in report["checks"] if not c["passed"]}
    assert code == 1 and set(failed) == {"files", "contents", f"event {seq}", "authorizations"}
    assert failed["files"]["code"] == "PACKAGE_FILE_MISSING" and f"events/{seq:012d}.json" in failed["files"]["detail"]
    assert failed["contents"]["code"] == failed[f"event {seq}"]["code"] == "PACKAGE_INCOMPLETE"
    assert f"events/{seq:012d}.json" in failed[f"event {seq}"]["detail"]
    assert failed["authorizations"]["code"] == "AUTHORIZATION_INVALID"  # bob approved: nobody gave him a key
    assert "ACTOR_UNKNOWN" in failed["authorizations"]["detail"]
    # dropped from the index as well: its signature no longer holds, and nothing of it is read
    index_edited(
        package / "package.json",
        lambda index: index.update(
            authorizations=[e for e in index["authorizations"] if e["event"] != f"events/{seq:012d}.json"]
        ),
    )
    code, report = _verify(package)
    assert code == 1 and report["error"]["code"] == "PACKAGE_INDEX_SIGNATURE_INVALID"


def test_an_authorization_event_whose_proof_fails_fails_the_package(package):
    seq = _seq_of(package, "job.replayed")
    path = package / f"proofs/authorizations/{seq:012d}.json"
    proof = json.loads(path.read_text())
    proof["proof"][0] = ("0" if proof["proof"][0][0] != "0" else "1") + proof["proof"][0][1:]
    path.write_text(json.dumps(proof))
    code, report = _verify(package)
    failed = {c["name"]: c for c in report["checks"] if not c["passed"]}
    assert code == 1 and report["codes"] == ["PACKAGE_FILE_MISMATCH", "PROOF_INVALID"]
    assert set(failed) == {"files", f"event {seq}"}
    assert report["authorizations"] == []  # nothing is vouched for while a check fails


def test_a_package_exported_before_authorizations_were_carried_still_verifies(package):
    """A version 1 index (unsigned) with neither field (nor their files): its bundles verify as they did, and it
    lists no one; only with --allow-unsigned-index."""
    index = read_index(package) | {"version": 1}
    del index["documents"]  # this package holds no document job
    for entry in index.pop("authorizations"):
        (package / entry["inclusion"]).unlink()
    del index["action_max_age_seconds"]
    (package / "package.json").write_text(json.dumps(index))
    code, report = _verify(package, "--allow-unsigned-index")
    assert code == 0 and report["ok"] and report["authorizations"] == [], report["codes"]
    assert (report["format_version"], report["index_signed"]) == (1, False)
    code, report = _verify(package)  # not allowed: refused, with a code that says why
    assert code == 1 and report["codes"] == ["PACKAGE_INDEX_UNSIGNED"]
    text = CliRunner().invoke(main, ["verify", "--package", str(package), "--workers", "1"])
    assert text.exit_code == 1 and "NOTICE: package.json is an unsigned version 1 index" in text.output
    index["authorizations"] = []  # one field without the other is no index of any version
    (package / "package.json").write_text(json.dumps(index))
    code, report = _verify(package, "--allow-unsigned-index")
    assert code != 0 and "PACKAGE_INVALID" in json.dumps(report)
