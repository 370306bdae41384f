"""`evidence verify` of several bundles and of whole archive prefixes, in worker processes; and what it imports."""

import json
import os
import pty
import subprocess
import sys

import pytest
from click.testing import CliRunner

from evidence_pipeline.audit.locations import locate
from evidence_pipeline.audit.verify import Check, Verification
from evidence_pipeline.audit.verify_many import Outcome, overall_exit_code
from evidence_pipeline.cli import main
from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.monthly.bundle import MANIFEST, REPORT
from evidence_pipeline.monthly.pipeline import RunInfo, run_tenant_month
from evidence_pipeline_tests.support.fixture_sources import FIXTURE_MONTHS, SMALL
from evidence_pipeline_tests.support.tampering import overwrite

IDENTITY = "0" * 64


@pytest.fixture
def archive(runtime) -> tuple[str, list[str]]:
    """The archive's location as a user names it (a folder or s3://bucket/prefix) and its bundles' keys."""
    keys = [run_tenant_month(runtime, tm, RunInfo("run-1")).bundle_key for tm in FIXTURE_MONTHS]
    store = runtime.archive
    root = store.uri("keys").removesuffix("/keys") if store.uri("keys").startswith("s3://") else str(store.root)
    return root, sorted(keys)


def _verify(*args: str):
    result = CliRunner().invoke(main, ["verify", *args])
    assert "Traceback" not in result.output and not isinstance(result.exception, (AttributeError, KeyError))
    return result


def _lines(result) -> list[dict]:
    return [json.loads(line) for line in result.output.splitlines()]


def test_a_prefix_and_several_paths_verify_every_bundle_once(runtime, archive):
    root, keys = archive
    whole = _verify(root, "--json", "--workers", "2")
    assert whole.exit_code == 0, whole.output
    lines = _lines(whole)
    assert [line["bundle"] for line in lines] == [f"{root}/{key}" for key in keys]
    assert all(line["ok"] and line["codes"] == [] and len(line["checks"]) == 13 for line in lines)
    assert {line["statement_key_id"] for line in lines} == {runtime.keyring.statement_key_id}

    tenant = f"{root}/bundles/{SMALL.tenant}"
    bundle = f"{root}/{keys[-1]}"  # another tenant's bundle, named on its own
    several = _verify(tenant + "/", bundle, f"{tenant}/{SMALL.period}", "--json", "--workers", "2")
    assert several.exit_code == 0
    assert sorted(line["bundle"] for line in _lines(several)) == sorted(
        [f"{tenant}/{key.split('/', 2)[2]}" for key in keys if key.startswith(f"bundles/{SMALL.tenant}/")] + [bundle]
    )

    text = _verify(f"{root}/bundles", "--workers", "1")
    assert text.exit_code == 0 and text.output.count("\nok   ") + text.output.startswith("ok   ") == len(keys)
    assert f"{len(keys)} bundles: {len(keys)} verified, 0 not verified" in text.output
    assert text.output.rstrip().endswith("VERIFIED") and "verifying" not in text.output  # no progress off a terminal


def test_a_tampered_bundle_in_a_prefix_exits_1_and_its_line_names_the_check(runtime, archive):
    root, keys = archive
    overwrite(runtime, f"{keys[0]}/{MANIFEST}", b"{")
    overwrite(runtime, f"{keys[1]}/{REPORT}", None)
    result = _verify(root, "--json", "--workers", "2")
    assert result.exit_code == 1
    by_bundle = {line["bundle"].removeprefix(root + "/"): line for line in _lines(result)}
    assert by_bundle[keys[0]]["codes"] == ["MANIFEST_INVALID"]
    assert [c["name"] for c in by_bundle[keys[0]]["checks"] if not c["passed"]] == ["manifest_parses"]
    assert by_bundle[keys[1]]["codes"] == ["BUNDLE_INCOMPLETE"]  # a bundle missing a file is still listed
    assert by_bundle[keys[2]]["ok"] is True
    text = _verify(root)
    assert text.exit_code == 1 and f"FAIL {root}/{keys[0]}: MANIFEST_INVALID (manifest_parses: " in text.output
    assert "NOT VERIFIED: BUNDLE_INCOMPLETE, MANIFEST_INVALID" in text.output


def test_a_prefix_without_bundles_is_not_found(runtime, archive):
    root, keys = archive
    for empty in (f"{root}/bundles/nobody", f"{root}/bundles/{SMALL.tenant}/1999-01"):
        if not empty.startswith("s3://"):
            os.makedirs(empty)  # an existing, empty folder
        result = _verify(f"{root}/{keys[0]}", empty, "--json")  # one good location does not make up for it
        assert result.exit_code == 2 and json.loads(result.output)["error"]["code"] == "BUNDLE_NOT_FOUND"


def test_an_unreachable_archive_prefix_is_3(tmp_path):
    env = {
        "EVIDENCE_HOME": str(tmp_path / "home"),
        "EVIDENCE_S3_ENDPOINT_URL": "http://127.0.0.1:9",
        "AWS_ACCESS_KEY_ID": "x",
        "AWS_SECRET_ACCESS_KEY": "x",
        "AWS_REGION": "us-east-1",
        "AWS_MAX_ATTEMPTS": "1",
    }
    result = CliRunner().invoke(main, ["verify", "s3://bucket/archive/bundles/acme-books", "--json"], env=env)
    assert result.exit_code == 3 and json.loads(result.output)["error"]["code"] == "STORE_UNAVAILABLE"


def test_a_finding_is_never_hidden_by_an_outage():
    failed = Outcome("b1", verification=Verification("b1", [Check("subject_digest", False, "SUBJECT_DIGEST_MISMATCH")]))
    verified = Outcome("b2", verification=Verification("b2", [Check("subject_digest", True)]))
    unreadable = Outcome("b3", error=EvidenceError("STORE_UNAVAILABLE", "S3 is unreachable"))
    assert overall_exit_code([verified, verified]) == 0
    assert overall_exit_code([verified, unreadable]) == 3
    assert overall_exit_code([unreadable, failed, verified]) == 1
    assert unreadable.as_dict() == {
        "bundle": "b3",
        "ok": False,
        "error": {"code": "STORE_UNAVAILABLE", "message": "S3 is unreachable"},
    }


@pytest.mark.parametrize(
    "argument, archive, prefix",
    [
        ("s3://b/a/bundles/acme/2026-10/" + IDENTITY, "s3://b/a", "bundles/acme/2026-10/" + IDENTITY),
        ("s3://b/a/bundles/acme/", "s3://b/a", "bundles/acme"),
        ("s3://b/a", "s3://b/a", "bundles"),
        ("s3://b", "s3://b", "bundles"),
        ("s3://b/a/bundles/bundles/2026-10/" + IDENTITY, "s3://b/a", "bundles/bundles/2026-10/" + IDENTITY),
        ("s3://b/bundles/x/bundles", "s3://b/bundles/x", "bundles"),  # an archive below a folder named bundles
        ("s3://b/a/bundles/acme/garbage", "s3://b/a/bundles/acme/garbage", "bundles"),  # not below bundles/
    ],
)
def test_locations_name_an_archive_and_a_prefix(argument, archive, prefix):
    location = locate(argument)
    assert (location.archive, location.prefix) == (archive, prefix)
    assert location.is_bundle == (prefix.count("/") == 3)


def test_a_local_location_is_an_existing_folder(tmp_path):
    archive = tmp_path / "bundles" / "archive"  # the archive itself sits below a folder named bundles
    (archive / "bundles" / "acme" / "2026-10").mkdir(parents=True)
    assert (locate(str(archive)).archive, locate(str(archive)).prefix) == (str(archive), "bundles")
    tenant = locate(str(archive / "bundles" / "acme"))
    assert (tenant.archive, tenant.prefix) == (str(archive), "bundles/acme")
    assert tenant.shown("bundles/acme/2026-10/" + IDENTITY) == f"{archive}/bundles/acme/2026-10/{IDENTITY}"
    for missing in (str(tmp_path / "nowhere"), "ftp://host/archive"):
        with pytest.raises(EvidenceError) as error:
            locate(missing)
        assert error.value.code == "BUNDLE_NOT_FOUND"


HEAVY = {
    "sqlalchemy",
    "alembic",
    "pandas",
    "numpy",
    "reportlab",
    "pypdf",
    "dagster",
    "dagster_aws",
    "boto3",
    "botocore",
    "aiohttp",
}
_IMPORTED = """
import json, sys
from evidence_pipeline.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


def _modules_loaded_by(args: list[str], env: dict[str, str]) -> set[str]:
    run = subprocess.run(
        [sys.executable, "-c", _IMPORTED, *args], capture_output=True, text=True, env=os.environ | env, check=True
    )
    return set(json.loads(run.stdout.splitlines()[-1]))


def test_help_and_verify_import_only_what_they_need(local_runtime, tmp_path):
    """The start-up cost is in the imports: --help loads none of the heavy libraries, verify only pyHanko's."""
    env = {"EVIDENCE_HOME": str(tmp_path / "home")}
    assert not _modules_loaded_by(["--help"], env) & (HEAVY | {"pyhanko", "cryptography"})
    bundle = str(local_runtime.archive.root / run_tenant_month(local_runtime, SMALL, RunInfo("r")).bundle_key)
    loaded = _modules_loaded_by(["verify", bundle], env)
    assert "pyhanko" in loaded and loaded & HEAVY == {"aiohttp"}  # pyHanko's signers import aiohttp, not ours


def test_progress_is_shown_on_a_terminal_only(local_runtime, tmp_path):
    publication = run_tenant_month(local_runtime, SMALL, RunInfo("r"))
    root = str(local_runtime.archive.root)
    controller, terminal = pty.openpty()
    try:
        run = subprocess.run(
            [sys.executable, "-c", _IMPORTED, "verify", root, "--json"],
            stdout=subprocess.PIPE,
            stderr=terminal,
            text=True,
            env=os.environ | {"EVIDENCE_HOME": str(tmp_path / "home")},
        )
        os.close(terminal)
        shown = b""
        while chunk := _read(controller):
            shown += chunk
    finally:
        os.close(controller)
    assert json.loads(run.stdout.splitlines()[0])["bundle"] == f"{root}/{publication.bundle_key}"
    assert b"verifying 1/1 bundles, 0 not verified" in shown


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 1 << 16)
    except OSError:  # EIO: the terminal's other end is closed and everything was read
        return b""


def test_a_fifo_at_bundle_depth_is_a_finding_not_an_outage(local_runtime):
    """Something that is not a folder where a bundle belongs is a fact about the archive (exit 1), not an outage."""
    run_tenant_month(local_runtime, SMALL, RunInfo("run-1"))
    root = local_runtime.archive.root
    os.mkfifo(root / "bundles" / SMALL.tenant / SMALL.period / IDENTITY)
    result = _verify(str(root), "--json", "--workers", "1")
    by_bundle = {line["bundle"].removeprefix(f"{root}/"): line for line in _lines(result)}
    fifo = by_bundle[f"bundles/{SMALL.tenant}/{SMALL.period}/{IDENTITY}"]
    assert result.exit_code == 1 and "error" not in fifo and fifo["codes"] == ["STORE_NOT_REGULAR_FILE"]
    assert sum(line["ok"] for line in by_bundle.values()) == 1  # the real bundle still verifies
