"""Offline audit packages: `evidence export` then `evidence verify --package` with nothing but the folder, on
both backend sets; every kind of tampering fails with its own code; the witness; the docs' auditor script."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from evidence_pipeline.audit.checkpoints import PAYLOAD_TYPE, checkpoint_key, publish_checkpoint, verify_ledger
from evidence_pipeline.audit.package import PackageStore
from evidence_pipeline.audit.verify import verify_bundle
from evidence_pipeline.cli import main
from evidence_pipeline.config import Settings
from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.monthly.pipeline import run_tenant_month
from evidence_pipeline.runtime import RunInfo
from evidence_pipeline.signing import dsse
from evidence_pipeline.signing.keys import load_witness_key, public_key_id
from evidence_pipeline_tests.support.docs_pages import page
from evidence_pipeline_tests.support.fixture_sources import FIXTURE_EVENTS, FIXTURE_MONTHS, SMALL
from evidence_pipeline_tests.support.packages import (
    LOADED,
    edit_json,
    index_edited,
    read_index,
    swapped,
    unreachable,
    writable,
)
from evidence_pipeline_tests.support.signers import admin_key_file
from evidence_pipeline_tests.support.tampering import overwrite

PEM = serialization.Encoding.PEM
FIXTURES = FIXTURE_EVENTS  # the events before a test's own
FIRST, SECOND = FIXTURES + 8, FIXTURES + 24  # the checkpoints of _publish: after one tenant-month, after three


def _write_witness(folder: Path) -> tuple[ed25519.Ed25519PrivateKey, Path, Path]:
    """A witness key in its own 0700 folder, as an operator provisions it: (key, private path, public path)."""
    folder.mkdir(mode=0o700)
    key = ed25519.Ed25519PrivateKey.generate()
    private = folder / "witness.key"
    fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(key.private_bytes(PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    public = folder / "witness.pub.pem"
    public.write_bytes(key.public_key().public_bytes(PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return key, private, public


@pytest.fixture
def witness(tmp_path):
    return _write_witness(tmp_path / "witness")


def _publish(runtime, witness_key=None, witness_from: int = 0) -> None:
    """acme-books 2026-10, a checkpoint, then the other fixture months and a second checkpoint; the witness
    co-signs the checkpoints from number ``witness_from`` on."""
    run_tenant_month(runtime, FIXTURE_MONTHS[0], RunInfo("run-1"))
    publish_checkpoint(runtime.ledger, runtime.archive, runtime.keyring, witness_key if witness_from <= 0 else None)
    for tenant_month in FIXTURE_MONTHS[1:]:
        run_tenant_month(runtime, tenant_month, RunInfo("run-2"))
    publish_checkpoint(runtime.ledger, runtime.archive, runtime.keyring, witness_key if witness_from <= 1 else None)


def _export(backend: dict, out: Path, *args: str):
    result = CliRunner().invoke(main, ["export", "--tenant", SMALL.tenant, *args, str(out)], env=backend)
    assert "Traceback" not in result.output
    return result


def _verify(package: Path, *args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(main, ["verify", "--package", str(package), "--json", "--workers", "2", *args])
    assert "Traceback" not in result.output, result.output
    return result.exit_code, json.loads(result.output)


@pytest.fixture
def package(runtime, backend, witness, tmp_path) -> Path:
    _publish(runtime, witness[0])
    out = tmp_path / "audit" / "acme-books"
    result = _export(backend, out)
    assert result.exit_code == 0, result.output
    assert "2 bundle(s) of acme-books (every month)" in result.output
    assert "checkpoints: 2, witnessed: 2" in result.output
    return out


def test_a_package_verifies_with_the_database_and_the_archive_gone(runtime, backend, package, witness, tmp_path):
    unreachable(runtime, backend, tmp_path)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("EVIDENCE_", "AWS_", "DAGSTER_"))}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            LOADED,
            "verify",
            "--package",
            str(package),
            "--require-witness",
            str(witness[2]),
            "--workers",
            "2",
        ],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        env=clean | {"EVIDENCE_HOME": str(tmp_path / "nothing-here")},
    )
    *lines, last = run.stdout.splitlines()
    result = json.loads(last)
    assert result["exit"] == 0, run.stdout + run.stderr
    assert not {"sqlalchemy", "alembic", "boto3", "botocore", "psycopg2", "dagster"} & set(result["modules"])
    assert "VERIFIED" in lines and "2 bundles: 2 verified, 0 not verified" in lines
    assert not (tmp_path / "nothing-here").exists()  # verify --package creates nothing either
    code, report = _verify(package, "--require-witness", str(witness[2]))
    assert code == 0 and report["ok"] and report["codes"] == []
    assert report["witness_key_id"] == public_key_id(witness[0].public_key())
    assert [c["name"] for c in report["checks"]] == [
        "index_signature",
        "files",
        "contents",
        f"checkpoint {FIRST}",
        f"witness {FIRST}",
        f"checkpoint {SECOND}",
        f"witness {SECOND}",
        f"note {FIRST}",
        f"note {SECOND}",
        f"consistency {FIRST} -> {SECOND}",
        "package_assessment_results",
    ]
    assert [b["bundle"].rsplit("/", 2)[-2] for b in report["bundles"]] == ["2026-09", "2026-10"]
    first = read_index(package)["bundles"][0]["path"]
    archive_checks = [c.name for c in verify_bundle(PackageStore(package), first).checks]
    assert all(
        [c["name"] for c in b["checks"]] == [*archive_checks, "inclusion_proof", "ledger_event", "assessment_results"]
        and all(c["passed"] for c in b["checks"])
        and b["checks"][-3:]
        == [
            {"name": "inclusion_proof", "passed": True, "code": None, "detail": ""},
            {"name": "ledger_event", "passed": True, "code": None, "detail": ""},
            {"name": "assessment_results", "passed": True, "code": None, "detail": ""},
        ]
        for b in report["bundles"]
    )


def test_a_package_spanning_a_key_rotation_verifies_pinned_by_its_trust_root(runtime, backend, tmp_path):
    """Checkpoints and bundles signed before and after `evidence keys rotate` verify with the root alone pinned;
    once the first key is revoked from before its checkpoint, a new package fails on that checkpoint."""
    # before the first bundle's signature however slow the machine; signing times are to the second
    started = datetime.now(timezone.utc).replace(microsecond=0)
    run_tenant_month(runtime, FIXTURE_MONTHS[0], RunInfo("run-1"))
    first = publish_checkpoint(runtime.ledger, runtime.archive, runtime.keyring)
    admin = backend | {"EVIDENCE_ACTOR_KEY": admin_key_file(backend)}
    assert CliRunner().invoke(main, ["keys", "rotate"], env=admin).exit_code == 0
    run_tenant_month(runtime, FIXTURE_MONTHS[2], RunInfo("run-2"))
    second = publish_checkpoint(runtime.ledger, runtime.archive, runtime.keyring)
    assert first["key_id"] != second["key_id"]
    root = ("--root-id", runtime.keyring.root_id)
    assert _export(backend, tmp_path / "rotated").exit_code == 0
    code, report = _verify(tmp_path / "rotated", *root)
    assert code == 0 and report["codes"] == []
    assert report["checkpoint_key_ids"] == sorted([first["key_id"], second["key_id"]])
    assert {b["statement_key_id"] for b in report["bundles"]} == {first["key_id"], second["key_id"]}

    revoked_at = started.isoformat()  # so the first key's bundle and checkpoint were both signed after it
    revoke = ["keys", "revoke", first["key_id"], "--reason", "compromised", "--at", revoked_at]
    assert CliRunner().invoke(main, revoke, env=admin).exit_code == 0
    assert _export(backend, tmp_path / "revoked").exit_code == 0  # export copies; verification judges
    code, report = _verify(tmp_path / "revoked", *root)
    failed = {c["name"]: c for c in report["checks"] if not c["passed"]}
    # the consistency proof from it then has no signed root to start from
    assert code == 1
    assert set(failed) == {f"checkpoint {first['size']}", f"consistency {first['size']} -> {second['size']}"}
    assert failed[f"checkpoint {first['size']}"]["code"] == "CHECKPOINT_INVALID"
    assert "KEY_REVOKED" in failed[f"checkpoint {first['size']}"]["detail"]
    assert "KEY_REVOKED" in report["codes"]  # the bundle signed by that key fails too


def _flip(path: Path, at: int) -> None:
    data = bytearray(writable(path).read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def _only(package: Path, pattern: str) -> Path:
    [match] = sorted(package.glob(pattern))
    return match


def _first_hash_flipped(document: dict) -> None:
    first = document["proof"][0]
    document["proof"][0] = ("0" if first[0] != "0" else "1") + first[1:]


def _checkpoint_root_rewritten(path: Path) -> None:
    """The payload changed, the signatures kept: what an archive writer without the keys can do."""

    def change(envelope):
        body = json.loads(base64.b64decode(envelope["payload"]))
        body["root_sha256"] = "00" * 32
        envelope["payload"] = base64.b64encode(dsse.canonical_json(body)).decode()

    edit_json(path, change)


def _event_edited(path: Path) -> None:
    body = json.loads(writable(path).read_bytes())
    body["actor"] = "someone-else"
    path.write_bytes(dsse.canonical_json(body))


def _manifest_position_moved(path: Path) -> None:
    edit_json(path, lambda m: m["ledger"].update(published_at="2020-01-01T00:00:00+00:00"))


def _bundle_removed(package: Path) -> None:
    folder = _only(package, "bundles/acme-books/2026-09/*")
    for file in folder.iterdir():
        writable(file)
    shutil.rmtree(folder)


def _bundle_added(package: Path) -> None:
    source = _only(package, "bundles/acme-books/2026-09/*")
    shutil.copytree(source, source.parent / ("0" * 64))


# Each change also fails the signed index's file check (package_index.py), with the code that names its kind.
CHANGED, REMOVED, ADDED = "PACKAGE_FILE_MISMATCH", "PACKAGE_FILE_MISSING", "PACKAGE_FILE_UNLISTED"
TAMPERING = {
    "report byte": (
        lambda p: _flip(_only(p, "bundles/*/2026-09/*/report.pdf"), 2000),
        {"LEDGER_EVENT_MISMATCH", "SUBJECT_DIGEST_MISMATCH", CHANGED},
    ),
    "statement": (
        lambda p: edit_json(
            _only(p, "bundles/*/2026-09/*/statement.dsse.json"),
            lambda e: e.update(payload=e["payload"][:-8] + "AAAAAAA="),
        ),
        {"LEDGER_EVENT_MISMATCH", CHANGED},
    ),
    "manifest position": (
        lambda p: _manifest_position_moved(_only(p, "bundles/*/2026-09/*/manifest.json")),
        {"LEDGER_EVENT_MISMATCH", CHANGED},
    ),
    "inclusion proof": (
        lambda p: edit_json(_only(p, "proofs/inclusion/*/2026-09/*.json"), _first_hash_flipped),
        {"PROOF_INVALID", CHANGED},
    ),
    "event": (
        lambda p: _event_edited(_only(p, f"events/{FIXTURES + 23:012d}.json")),
        {"PROOF_INVALID", "LEDGER_EVENT_MISMATCH", CHANGED},
    ),
    "consistency proof": (
        lambda p: edit_json(_only(p, "proofs/consistency/*.json"), _first_hash_flipped),
        {"PROOF_INVALID", CHANGED},
    ),
    "checkpoint": (
        lambda p: _checkpoint_root_rewritten(p / checkpoint_key(SECOND)),
        {"CHECKPOINT_INVALID", "PROOF_INVALID", CHANGED},
    ),
    "bundle removed": (_bundle_removed, {"PACKAGE_INCOMPLETE", REMOVED}),
    "event removed": (
        lambda p: writable(_only(p, f"events/{FIXTURES + 7:012d}.json")).unlink(),
        {"PACKAGE_INCOMPLETE", REMOVED},
    ),
    "bundle added": (_bundle_added, {"PACKAGE_INVALID", ADDED}),
    "reports swapped": (
        lambda p: swapped(*sorted(p.glob("bundles/*/*/*/report.pdf"))),
        {"LEDGER_EVENT_MISMATCH", "SUBJECT_DIGEST_MISMATCH", CHANGED},
    ),
}


@pytest.mark.parametrize("tampering", TAMPERING)
def test_tampering_fails_with_its_code(runtime, backend, package, witness, tampering):
    tamper, codes = TAMPERING[tampering]
    tamper(package)
    code, report = _verify(package)
    assert code == 1 and not report["ok"]
    assert codes <= set(report["codes"]), report["codes"]
    assert set(report["codes"]) <= codes | {  # what else a change can break, never anything unrelated
        "SUBJECT_DIGEST_MISMATCH",
        "PDF_SIGNATURE_INVALID",
        "STATEMENT_INVALID",
        "MANIFEST_STATEMENT_MISMATCH",
        "BUNDLE_INCOMPLETE",
        "STATEMENT_SIGNATURE_INVALID",
        "UNSIGNED_DIGEST_MISMATCH",
    }, report["codes"]
    text = CliRunner().invoke(main, ["verify", "--package", str(package), "--workers", "1"])
    assert text.exit_code == 1 and "NOT VERIFIED: " in text.output and "Traceback" not in text.output


@pytest.mark.parametrize(
    "index, code, exit_code",
    [
        (b"{", "PACKAGE_INVALID", 1),
        (None, "PACKAGE_NOT_FOUND", 2),
        ("version 3", "PACKAGE_INVALID", 1),
        ("version 1, signed", "PACKAGE_INVALID", 1),
        ("another tenant", "PACKAGE_INVALID", 1),
        ("unlisted checkpoint pair", "PACKAGE_INVALID", 1),
        ("edited, its signature kept", "PACKAGE_INDEX_SIGNATURE_INVALID", 1),  # nothing of it is read
    ],
)
def test_a_broken_index_is_refused_before_anything_is_verified(
    local_runtime, witness, tmp_path, index, code, exit_code
):
    _publish(local_runtime)
    out = tmp_path / "package"
    assert _export({"EVIDENCE_HOME": str(tmp_path / "home")}, out).exit_code == 0
    path = writable(out / "package.json")
    if index is None:
        path.unlink()
    elif isinstance(index, bytes):
        path.write_bytes(index)
    else:
        index_edited(
            path,
            {
                "version 3": lambda d: d.update(version=3),
                "version 1, signed": lambda d: d.update(version=1),
                "another tenant": lambda d: d.update(tenant="evergreen-market"),
                "unlisted checkpoint pair": lambda d: d.update(consistency=[]),
                "edited, its signature kept": lambda d: d.update(version=3),
            }[index],
            None if "signature kept" in index else local_runtime,
        )
    result = CliRunner().invoke(main, ["verify", "--package", str(out), "--json"])
    assert result.exit_code == exit_code and json.loads(result.output)["error"]["code"] == code


def test_a_required_witness_must_have_signed_every_checkpoint(runtime, backend, witness, tmp_path):
    _publish(runtime)  # no witness configured: nothing co-signed
    out = tmp_path / "package"
    assert _export(backend, out).exit_code == 0
    code, report = _verify(out, "--require-witness", str(witness[2]))
    assert code == 1 and report["codes"] == ["WITNESS_SIGNATURE_MISSING"]
    assert [c["name"] for c in report["checks"] if not c["passed"]] == [f"witness {FIRST}", f"witness {SECOND}"]
    assert all(b["ok"] for b in report["bundles"])  # the bundles themselves are fine
    assert _verify(out)[0] == 0  # not required: verified, and the output says the witness was not checked
    text = CliRunner().invoke(main, ["verify", "--package", str(out)])
    assert "witness not checked (pass --policy FILE or --witness VKEY --witness-policy N)" in text.output
    # a key id pins the package's copy; this package has none by that id
    code, report = _verify(out, "--require-witness", public_key_id(witness[0].public_key()))
    assert code == 1 and report["codes"] == ["WITNESS_SIGNATURE_MISSING"]


def test_a_forged_or_foreign_witness_signature_fails(runtime, backend, package, witness, tmp_path):
    _, other_private, other_public = _write_witness(tmp_path / "other-witness")
    code, report = _verify(package, "--require-witness", str(other_public))
    assert code == 1 and report["codes"] == ["WITNESS_SIGNATURE_MISSING"]
    witness_id = public_key_id(witness[0].public_key())
    code, report = _verify(package, "--require-witness", witness_id)  # pins the copy in witness/
    assert code == 0 and report["witness_key_id"] == witness_id

    def forge(envelope):  # the witness's key id, someone else's signature
        forged = ed25519.Ed25519PrivateKey.generate().sign(b"anything")
        envelope["signatures"] = [
            s if s["keyid"] != witness_id else {"keyid": witness_id, "sig": base64.b64encode(forged).decode()}
            for s in envelope["signatures"]
        ]

    edit_json(package / checkpoint_key(FIRST), forge)
    code, report = _verify(package, "--require-witness", str(witness[2]))
    # the file is not the one the signed index lists, whatever is changed in it
    assert code == 1 and report["codes"] == [CHANGED, "WITNESS_SIGNATURE_INVALID"]
    # the statement key's signature still verifies: only the witness (and the file's digest) is broken
    assert _verify(package)[1]["codes"] == [CHANGED]
    replaced = writable(package / "witness" / f"{witness_id}.pem")
    replaced.write_bytes(other_public.read_bytes())  # a swapped file cannot borrow the pinned id
    code, report = _verify(package, "--require-witness", witness_id)
    assert code == 1 and set(report["codes"]) == {"WITNESS_SIGNATURE_MISSING", CHANGED}


def test_a_witness_configured_later_still_witnesses_the_older_bundles(local_runtime, witness, tmp_path):
    _publish(local_runtime, witness[0], witness_from=1)  # the first checkpoint unwitnessed, the second witnessed
    out = tmp_path / "package"
    result = _export({"EVIDENCE_HOME": str(tmp_path / "home")}, out)
    assert "checkpoints: 1, witnessed: 1" in result.output  # 2026-10 is proved against the second, not the first
    code, report = _verify(out, "--require-witness", str(witness[2]))
    assert code == 0, report["codes"]


def test_export_never_replaces_and_never_leaves_a_partial_package(runtime, backend, witness, tmp_path):
    run_tenant_month(runtime, SMALL, RunInfo("run-1"))
    parent = tmp_path / "audit"
    out = parent / "package"
    result = _export(backend, out)
    assert result.exit_code == 2 and "LEDGER_NOT_CHECKPOINTED" in result.output
    assert not parent.exists() or list(parent.iterdir()) == []  # nothing, not even the hidden staging folder
    publish_checkpoint(runtime.ledger, runtime.archive, runtime.keyring)
    out.mkdir(parents=True)  # an empty folder is not replaced either
    result = _export(backend, out)
    assert result.exit_code == 2 and "PACKAGE_EXISTS" in result.output and list(out.iterdir()) == []
    out.rmdir()
    ranged = _export(backend, out, "--from", "2026-10", "--to", "2026-10")
    assert ranged.exit_code == 0 and "bundle(s) of acme-books (2026-10 to 2026-10)" in ranged.output
    assert read_index(out)["from"] == "2026-10"
    assert (out / "package.json").stat().st_mode & 0o777 == 0o444 and out.stat().st_mode & 0o777 == 0o755
    again = _export(backend, out)
    assert again.exit_code == 2 and "PACKAGE_EXISTS" in again.output

    publication = runtime.ledger.events_of_type("bundle.published", SMALL.tenant)[0]["details"]
    report_key = f"bundles/{SMALL.tenant}/{SMALL.period}/{publication['identity']}/report.pdf"
    good = runtime.archive.get(report_key)
    overwrite(runtime, report_key, good[:-1] + bytes([good[-1] ^ 1]))  # not what was committed
    second = parent / "second"
    result = _export(backend, second)  # fails after the keys and the checkpoint were copied
    assert result.exit_code == 1 and "STORE_DIGEST_MISMATCH" in result.output
    assert sorted(p.name for p in parent.iterdir()) == ["package"]  # no partial package, no staging folder
    overwrite(runtime, report_key, good)  # the same bytes again: on S3, a version that was never committed
    result = _export(backend, second)
    if "EVIDENCE_LEDGER_URL" in backend:
        assert result.exit_code == 1 and "LEDGER_INVALID" in result.output and not second.exists()
    else:
        assert result.exit_code == 0 and _verify(second)[0] == 0


def test_export_takes_a_range_of_periods(local_runtime, tmp_path):
    _publish(local_runtime)
    env = {"EVIDENCE_HOME": str(tmp_path / "home")}
    assert _export(env, tmp_path / "sept", "--from", "2026-09", "--to", "2026-09").exit_code == 0
    index = read_index(tmp_path / "sept")
    assert [b["path"].split("/")[2] for b in index["bundles"]] == ["2026-09"]
    assert index["checkpoints"] == [checkpoint_key(SECOND)] and index["consistency"] == []
    assert _verify(tmp_path / "sept")[0] == 0
    for args, code in [
        (["--from", "2026-11"], "BUNDLE_NOT_FOUND"),
        (["--from", "2026-10", "--to", "2026-09"], "PERIOD_INVALID"),
    ]:
        result = _export(env, tmp_path / "none", *args)
        assert result.exit_code == 2 and code in result.output and not (tmp_path / "none").exists()
    assert CliRunner().invoke(main, ["export", "--tenant", "Not A Slug", str(tmp_path / "x")], env=env).exit_code == 2


def test_verify_usage(tmp_path):
    for args in (
        ["verify"],
        ["verify", str(tmp_path), "--package", str(tmp_path)],
        ["verify", str(tmp_path), "--require-witness", "x"],
    ):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2 and "Traceback" not in result.output
    (tmp_path / "package.tar").write_bytes(b"not a folder")
    result = CliRunner().invoke(main, ["verify", "--package", str(tmp_path / "package.tar"), "--json"])
    assert result.exit_code == 2 and json.loads(result.output)["error"]["code"] == "PACKAGE_NOT_FOUND"


# The witness itself


def test_the_witness_key_is_checked_before_it_signs(tmp_path, local_runtime):
    key, private, _ = _write_witness(tmp_path / "w")
    assert public_key_id(load_witness_key(private).public_key()) == public_key_id(key.public_key())
    os.chmod(private, 0o640)
    with pytest.raises(EvidenceError) as error:
        load_witness_key(private)
    assert error.value.code == "KEY_MATERIAL_INVALID"
    for inside in (tmp_path / "home" / "keys" / "witness.key", tmp_path / "home" / "archive" / "w.key"):
        with pytest.raises(EvidenceError) as error:
            Settings.from_env({"EVIDENCE_HOME": str(tmp_path / "home"), "EVIDENCE_WITNESS_KEY": str(inside)})
        assert error.value.code == "CONFIG_INVALID"
    run_tenant_month(local_runtime, SMALL, RunInfo("run-1"))
    with pytest.raises(EvidenceError) as error:  # the statement key cannot witness itself
        publish_checkpoint(
            local_runtime.ledger, local_runtime.archive, local_runtime.keyring, local_runtime.keyring.statement_key
        )
    assert error.value.code == "KEY_MATERIAL_INVALID"


def test_the_witness_refuses_a_head_that_does_not_extend_the_last_checkpoint(local_runtime, witness):
    runtime = local_runtime
    run_tenant_month(runtime, SMALL, RunInfo("run-1"))
    publish_checkpoint(runtime.ledger, runtime.archive, runtime.keyring, witness[0])
    forged = {
        "origin": "evidence_pipeline audit ledger",
        "size": FIRST,
        "root_sha256": "00" * 32,
        "issued_at": "2026-11-30T00:00:00+00:00",
        "key_id": runtime.keyring.statement_key_id,
    }
    overwrite(
        runtime,
        checkpoint_key(FIRST),
        dsse.sign_envelope(
            dsse.canonical_json(forged), runtime.keyring.statement_key, runtime.keyring.statement_key_id, PAYLOAD_TYPE
        ),
    )
    run_tenant_month(runtime, FIXTURE_MONTHS[1], RunInfo("run-2"))
    with pytest.raises(EvidenceError) as error:
        publish_checkpoint(runtime.ledger, runtime.archive, runtime.keyring, witness[0])
    assert error.value.code == "LEDGER_INVALID" and "witness refuses" in error.value.message
    assert runtime.archive.list("ledger/checkpoints") == [checkpoint_key(FIRST)]  # nothing was published


def test_the_ledger_commands_co_sign_and_still_verify(tmp_path, witness):
    env = {"EVIDENCE_HOME": str(tmp_path / "home"), "EVIDENCE_WITNESS_KEY": str(witness[1])}
    from evidence_pipeline.runtime import runtime_for
    from evidence_pipeline_tests.support.fixture_sources import with_fixture_sources as _with_fixture_sources

    runtime = _with_fixture_sources(runtime_for(Settings.from_env(env)))
    run_tenant_month(runtime, SMALL, RunInfo("run-1"))
    result = CliRunner().invoke(main, ["ledger", "checkpoint"], env=env)
    witness_id = public_key_id(witness[0].public_key())
    assert result.exit_code == 0 and f"co-signed by witness {witness_id}" in result.output
    envelope = json.loads(runtime.archive.get(checkpoint_key(FIRST)))
    assert [s["keyid"] for s in envelope["signatures"]] == [runtime.keyring.statement_key_id, witness_id]
    assert runtime.archive.list("ledger/witness") == [f"ledger/witness/{witness_id}.pem"]
    assert not any(witness_id in key for key in runtime.archive.list("keys"))  # never taken for a statement key
    assert verify_ledger(runtime.ledger, runtime.archive)["checkpoints"] == [FIRST]  # the existing checks are unchanged
    assert CliRunner().invoke(main, ["ledger", "verify"], env=env).exit_code == 0
    required = CliRunner().invoke(main, ["ledger", "verify", "--require-witness", str(witness[2])], env=env)
    assert required.exit_code == 0, required.output
    _, _, other = _write_witness(tmp_path / "other")
    foreign = CliRunner().invoke(main, ["ledger", "verify", "--require-witness", str(other)], env=env)
    assert foreign.exit_code == 1 and "WITNESS_SIGNATURE_MISSING" in foreign.output
    not_a_key = CliRunner().invoke(main, ["ledger", "verify", "--require-witness", str(witness[1])], env=env)
    assert not_a_key.exit_code == 2 and "CONFIG_INVALID" in not_a_key.output  # a private key is not what it takes


# The docs' verifier (auditors/own-verifier.md), run exactly as printed


def _docs_script() -> str:
    text = page("auditors/own-verifier.md")
    [block] = re.findall(r"```python\n(# check_package\.py .*?)```", text, re.S)
    return block


def test_the_docs_auditor_script_verifies_a_package(runtime, backend, package, witness, tmp_path):
    script = tmp_path / "check_package.py"
    script.write_text(_docs_script())
    statement_keys = [str(p) for p in sorted((package / "keys").glob("ed25519-*.pem"))]

    def run(witness_arg: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(script), str(package), witness_arg, *statement_keys],
            capture_output=True,
            text=True,
            cwd=tmp_path,
        )

    ok = run(str(witness[2]))
    assert ok.returncode == 0 and ok.stdout.strip() == "2 bundles, 2 checkpoints: VERIFIED", ok.stderr
    assert run("none").returncode == 0
    _, _, other = _write_witness(tmp_path / "other")
    assert run(str(other)).returncode == 1  # not co-signed by that witness
    _flip(_only(package, f"events/{FIXTURES + 7:012d}.json"), 40)
    failed = run("none")
    assert failed.returncode == 1 and failed.stderr.startswith("FAIL: ")
