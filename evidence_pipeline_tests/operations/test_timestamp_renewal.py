"""`evidence timestamps renew`: a new document time stamp for B-LTA bundles whose TSA certificate expires soon, as a
new file beside the published report, recorded in the ledger; with the real TSA, CRLs and OCSP of local_pki.py."""

import datetime as dt
import json

import pytest
from click.testing import CliRunner

from evidence_pipeline.audit.checkpoints import publish_checkpoint
from evidence_pipeline.cli import main
from evidence_pipeline.config import Settings
from evidence_pipeline.models import EventType, TenantMonth
from evidence_pipeline.monthly.bundle import REPORT, renewal_key
from evidence_pipeline.monthly.pipeline import run_tenant_month
from evidence_pipeline.runtime import RunInfo, runtime_for
from evidence_pipeline.store import sha256_hex
from evidence_pipeline_tests.support.fixture_sources import SMALL, with_fixture_sources
from evidence_pipeline_tests.support.local_pki import LocalPki

EARLIER = TenantMonth("acme-books", "2026-09")
TSA_DAYS = 60  # the first TSA certificate: renewed well inside a year's horizon


@pytest.fixture
def published(tmp_path):
    """Two B-LTA bundles of acme-books: SMALL stamped under a TSA certificate that expires in 60 days, EARLIER
    under the 10-year certificate the TSA rotated to afterwards."""
    with LocalPki(signer_days=30, tsa_days=TSA_DAYS) as pki:
        env = {
            "EVIDENCE_HOME": str(tmp_path / "home"),
            "EVIDENCE_KEYS_DIR": str(pki.provision(tmp_path / "keys")),
            "EVIDENCE_GENERATE_DEV_KEYS": "0",
            "EVIDENCE_PADES_LEVEL": "B-LTA",
            "EVIDENCE_TSA_URL": pki.tsa_url,
        }
        runtime = with_fixture_sources(runtime_for(Settings.from_env(env)))
        expiring = run_tenant_month(runtime, SMALL, RunInfo("lta-run")).bundle_key
        first_tsa_not_after = pki.tsa_not_after
        yield pki, env, runtime, expiring, first_tsa_not_after


def _renew(env: dict, *args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(main, ["timestamps", "renew", "--json", *args], env=env)
    assert "Traceback" not in result.output, result.output
    return result.exit_code, json.loads(result.output)


def _verify(env: dict, bundle: str, at: dt.datetime) -> tuple[int, dict]:
    result = CliRunner().invoke(main, ["verify", "--json", "--at", at.isoformat(), bundle], env=env)
    assert "Traceback" not in result.output, result.output
    return result.exit_code, json.loads(result.output)


def _renewals(runtime) -> list[dict]:
    return runtime.ledger.events_of_type(EventType.BUNDLE_TIMESTAMP_RENEWED)


def test_renewal_keeps_an_expiring_bundle_verifiable_after_its_tsa_certificate(published, tmp_path):
    pki, env, runtime, expiring, first_tsa_not_after = published
    archive, uri = runtime.archive, runtime.settings.archive_uri
    after_first_tsa = first_tsa_not_after + dt.timedelta(days=1)
    code, report = _verify(env, f"{uri}/{expiring}", after_first_tsa)
    assert code == 1 and "PDF_SIGNATURE_UNTRUSTED" in report["codes"]  # not renewed: dead after the TSA's certificate

    # The TSA has not rotated its certificate: a new time stamp would expire as soon; nothing is stored.
    code, result = _renew(env)
    assert code == 1 and [b["outcome"] for b in result["bundles"]] == ["failed"]
    assert result["bundles"][0]["code"] == "RENEWAL_FUTILE"
    assert archive.list(f"{expiring}/renewals") == [] and _renewals(runtime) == []

    pki.rotate_tsa(3650)
    current = run_tenant_month(runtime, EARLIER, RunInfo("lta-run-2")).bundle_key  # stamped under the new certificate
    published_report = archive.get(f"{expiring}/{REPORT}")
    unchanged = {name: archive.get(f"{expiring}/{name}") for name in (REPORT, "statement.dsse.json", "manifest.json")}
    code, result = _renew(env)
    assert code == 0, result
    outcomes = {b["bundle"]: (b["outcome"], b["renewal"]) for b in result["bundles"]}
    assert outcomes == {expiring: ("renewed", 1), current: ("current", 0)}
    renewed = archive.get(renewal_key(expiring, 1))
    assert renewed.startswith(published_report) and len(renewed) > len(published_report)
    assert {name: archive.get(f"{expiring}/{name}") for name in unchanged} == unchanged  # the old one stays
    [event] = _renewals(runtime)
    details = event["details"]
    assert (event["subject_sha256"], event["tenant"], event["period"]) == (sha256_hex(renewed), "acme-books", "2026-10")
    assert details["previous"] == {
        "key": f"{expiring}/{REPORT}",
        "sha256": sha256_hex(published_report),
        "size": len(published_report),
        "tsa_not_after": first_tsa_not_after.isoformat(),
    }
    assert details["renewed"]["key"] == renewal_key(expiring, 1)
    assert dt.datetime.fromisoformat(details["renewed"]["tsa_not_after"]) == pki.tsa_not_after
    assert dt.datetime.fromisoformat(details["stamped_at"]) < first_tsa_not_after

    # Re-running renews nothing twice and records nothing new.
    code, again = _renew(env)
    assert code == 0 and {b["outcome"] for b in again["bundles"]} == {"current"}
    assert archive.list(f"{expiring}/renewals") == [renewal_key(expiring, 1)] and len(_renewals(runtime)) == 1

    # After the first TSA certificate's expiry the renewed bundle verifies (every check, the renewal named); now too.
    for at in (after_first_tsa, dt.datetime.now(dt.timezone.utc)):
        code, report = _verify(env, f"{uri}/{expiring}", at)
        assert code == 0, report
        assert "renewal" in [check["name"] for check in report["checks"] if check["passed"]]
    code, report = _verify(env, f"{uri}/{expiring}", pki.tsa_not_after + dt.timedelta(days=1))
    assert code == 1 and "PDF_SIGNATURE_UNTRUSTED" in report["codes"]  # and no further than the new certificate

    # The audit package holds the bundles as published and their renewals: offline, it verifies after the first TSA
    # certificate's expiry too, and without the renewal it would not.
    publish_checkpoint(runtime.ledger, runtime.archive, runtime.keyring)
    out = tmp_path / "audit"
    exported = CliRunner().invoke(main, ["export", "--tenant", SMALL.tenant, str(out)], env=env)
    assert exported.exit_code == 0, exported.output
    assert (out / renewal_key(expiring, 1)).read_bytes() == renewed
    for at in (dt.datetime.now(dt.timezone.utc), after_first_tsa):
        verified = CliRunner().invoke(
            main, ["verify", "--package", str(out), "--json", "--workers", "1", "--at", at.isoformat()]
        )
        assert verified.exit_code == 0, verified.output
    (out / renewal_key(expiring, 1)).unlink()
    verified = CliRunner().invoke(main, ["verify", "--package", str(out), "--json", "--workers", "1"])
    assert verified.exit_code == 1 and "PACKAGE_FILE_MISSING" in verified.output  # the signed index names it


def _altered(report: bytes) -> bytes:
    altered = bytearray(report)
    altered[len(altered) // 2] ^= 0x01  # one bit of the published report changed
    return bytes(altered)


@pytest.mark.parametrize(
    "forge",
    [
        pytest.param(lambda report: _altered(report) + b"%% not a renewal\n", id="not-beginning-with-the-report"),
        pytest.param(lambda report: report + b"%% not a renewal\n", id="no-new-time-stamp"),
    ],
)
def test_a_renewal_that_does_not_extend_the_published_report_fails_verification(published, forge):
    """A renewal is judged by its bytes: one that does not begin with the published report, or adds no document
    time stamp over the whole file, is RENEWAL_INVALID."""
    pki, env, runtime, expiring, _ = published
    archive = runtime.archive
    archive.put_once(renewal_key(expiring, 1), forge(archive.get(f"{expiring}/{REPORT}")))
    code, report = _verify(env, f"{runtime.settings.archive_uri}/{expiring}", dt.datetime.now(dt.timezone.utc))
    assert code == 1 and report["codes"] == ["RENEWAL_INVALID"]
    code, result = _renew(env)  # and renewal refuses to build on it
    assert code == 1 and result["bundles"][0]["code"] == "RENEWAL_INVALID" and _renewals(runtime) == []
