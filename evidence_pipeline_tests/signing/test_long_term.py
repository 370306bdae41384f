"""PAdES B-T, B-LT and B-LTA with a real RFC 3161 time stamp authority and CRLs served on 127.0.0.1
(local_pki.py): signing, `evidence verify`, pdfsig, and validation after the signer's certificate expired."""

import datetime as dt
import io
import json
import subprocess

import pytest
from click.testing import CliRunner
from pyhanko.pdf_utils.reader import PdfFileReader
from pyhanko.sign.signers.pdf_signer import DSSContentSettings
from pyhanko.sign.validation import SignatureCoverageLevel

from evidence_pipeline.cli import main
from evidence_pipeline.config import Settings
from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.monthly.bundle import REPORT
from evidence_pipeline.monthly.pipeline import run_tenant_month
from evidence_pipeline.runtime import RunInfo, runtime_for
from evidence_pipeline.signing import pades
from evidence_pipeline.signing.etsi_report import validation_reports
from evidence_pipeline.signing.keys import load_keyring
from evidence_pipeline.signing.pades import sign_pdf, verify_pdf_signature
from evidence_pipeline_tests.support.etsi_schema import indications
from evidence_pipeline_tests.support.fixture_sources import SMALL, with_fixture_sources
from evidence_pipeline_tests.support.local_pki import LocalPki
from evidence_pipeline_tests.support.render import render
from evidence_pipeline_tests.support.signed_bundles import modified
from evidence_pipeline_tests.support.tools import require_tool

SIGNER_DAYS = 30  # the signer's certificate expires long before the TSA's (10 years)


@pytest.fixture(scope="module")
def pki():
    with LocalPki(signer_days=SIGNER_DAYS) as pki:
        yield pki


@pytest.fixture
def keyring(pki, tmp_path):
    return load_keyring(pki.provision(tmp_path / "keys"), generate=False)


@pytest.fixture
def report(local_runtime):
    return render(local_runtime, SMALL)[1].pdf


def _verify(signed: bytes, keyring, level: str, at: dt.datetime | None = None) -> None:
    verify_pdf_signature(signed, keyring.root_pem, level=level, tsa_root_pem=keyring.tsa_root_pem, at=at)


@pytest.mark.parametrize("level", ["B-T", "B-LT", "B-LTA"])
def test_each_level_signs_through_the_local_tsa_and_verifies_now(pki, keyring, report, level):
    served = len(pki.requests)
    signed = sign_pdf(report, keyring, level=level, tsa_url=pki.tsa_url).getvalue()
    assert signed.startswith(report)
    _verify(signed, keyring, level)
    [etsi] = validation_reports(signed, [keyring.root_pem, keyring.tsa_root_pem], level)  # valid at every level
    assert indications(etsi.xml) == ("total-passed", ["OK"])
    fetched = pki.requests[served:]
    assert "POST /tsa 200" in fetched
    assert ("GET /crl/signing.crl 200" in fetched) == (level != "B-T")  # the DSS is filled from the CA's CRL
    with pytest.raises(EvidenceError) as error:  # a time stamp from a TSA that is not the published one
        verify_pdf_signature(signed, keyring.root_pem, level=level, tsa_root_pem=keyring.root_pem)
    assert error.value.code == "PDF_SIGNATURE_UNTRUSTED"
    tampered = bytearray(signed)
    tampered[len(report) // 2] ^= 0x01
    with pytest.raises(EvidenceError) as error:
        _verify(bytes(tampered), keyring, level)
    assert error.value.code in ("PDF_SIGNATURE_INVALID", "PDF_SIGNATURE_UNTRUSTED")


def test_after_the_signer_certificate_expired_only_b_lta_still_validates(pki, keyring, report):
    """B-B is the demo default: `evidence verify --at` after the signer's expiry fails it (PDF_SIGNATURE_UNTRUSTED)."""
    after_expiry = pki.signer_not_after + dt.timedelta(days=1)
    levels = ("B-B", "B-T", "B-LT", "B-LTA")
    signed = {level: sign_pdf(report, keyring, level=level, tsa_url=pki.tsa_url).getvalue() for level in levels}
    for level, pdf in signed.items():
        _verify(pdf, keyring, level)  # everything validates today
    _verify(signed["B-LTA"], keyring, "B-LTA", after_expiry)
    for level in ("B-B", "B-T", "B-LT"):
        with pytest.raises(EvidenceError) as error:
            _verify(signed[level], keyring, level, after_expiry)
        assert error.value.code == "PDF_SIGNATURE_UNTRUSTED", level
    with pytest.raises(EvidenceError) as error:  # and B-LTA is no wildcard: after the TSA's certificate, it fails too
        _verify(signed["B-LTA"], keyring, "B-LTA", pki.signer_not_after + dt.timedelta(days=3700))
    assert error.value.code == "PDF_SIGNATURE_UNTRUSTED"


def _layout(pdf: bytes) -> tuple[int, bool, SignatureCoverageLevel]:
    """(revisions, whether the DSS has VRI entries, what the newest document time stamp covers)."""
    reader = PdfFileReader(io.BytesIO(pdf), strict=True)
    return (
        reader.xrefs.total_revisions,
        "/VRI" in reader.root["/DSS"],
        reader.embedded_signatures[-1].evaluate_signature_coverage(),
    )


@pytest.mark.parametrize("layout", ["current", "old"])
def test_b_lta_in_either_layout_keeps_its_verdicts(pki, keyring, report, monkeypatch, layout):
    """Signed now, the DSS (no VRI entries) is written with the document time stamp, before it: three revisions,
    the last time stamp covering the whole file. Bundles signed before, with pyHanko's default DSS settings (VRI
    entries, so a DSS revision after the time stamp), keep every verdict: valid now and after the signer's
    certificate expired, not after the TSA's, and neither when the document was changed or drawn on later."""
    if layout != "current":
        monkeypatch.setattr(pades, "_DSS_SETTINGS", DSSContentSettings())
    signed = sign_pdf(report, keyring, level="B-LTA", tsa_url=pki.tsa_url).getvalue()
    assert _layout(signed) == (
        (3, False, SignatureCoverageLevel.ENTIRE_FILE)
        if layout == "current"
        else (4, True, SignatureCoverageLevel.ENTIRE_REVISION)
    )
    _verify(signed, keyring, "B-LTA")
    _verify(signed, keyring, "B-LTA", pki.signer_not_after + dt.timedelta(days=1))
    with pytest.raises(EvidenceError) as error:
        _verify(signed, keyring, "B-LTA", pki.signer_not_after + dt.timedelta(days=3700))
    assert error.value.code == "PDF_SIGNATURE_UNTRUSTED"
    tampered = bytearray(signed)
    tampered[len(report) // 2] ^= 0x01
    for changed, code in ((bytes(tampered), "PDF_SIGNATURE_UNTRUSTED"), (modified(signed), "PDF_SIGNATURE_INVALID")):
        with pytest.raises(EvidenceError) as error:  # the signed bytes' digest fails; a later drawing is refused
            _verify(changed, keyring, "B-LTA")
        assert error.value.code == code


def test_ocsp_responses_are_fetched_into_the_dss_beside_crls(report, tmp_path):
    """The signing CA names an OCSP responder only, the TSA's CA a CRL only: the DSS holds the responder's answer
    about the signer beside the CRL about the TSA, and B-LTA validates from them offline, now and after the
    signer's certificate expired."""
    with LocalPki(signer_days=SIGNER_DAYS, revocation={"signing": ("ocsp",), "tsa": ("crl",)}) as pki:
        keyring = load_keyring(pki.provision(tmp_path / "keys"), generate=False)
        signed = sign_pdf(report, keyring, level="B-LTA", tsa_url=pki.tsa_url).getvalue()
    assert {"POST /ocsp/signing 200", "GET /crl/tsa.crl 200"} <= set(pki.requests)
    assert not any(request.startswith(("GET /crl/signing", "POST /ocsp/tsa")) for request in pki.requests)
    dss = PdfFileReader(io.BytesIO(signed), strict=True).root["/DSS"]
    assert (len(dss["/OCSPs"]), len(dss["/CRLs"])) == (1, 1)
    _verify(signed, keyring, "B-LTA")  # the PKI's server is down: everything comes from the DSS
    _verify(signed, keyring, "B-LTA", pki.signer_not_after + dt.timedelta(days=1))


def test_signing_without_the_tsa_or_its_root_has_reason_codes(pki, keyring, report, tmp_path):
    with pytest.raises(EvidenceError) as error:
        sign_pdf(report, keyring, level="B-T", tsa_url=pki.base_url + "/no-tsa-here")
    assert (error.value.code, error.value.retryable) == ("TSA_UNAVAILABLE", True)
    dev = load_keyring(tmp_path / "dev", generate=True)  # dev keys: no TSA root, no revocation information
    with pytest.raises(EvidenceError) as error:
        sign_pdf(report, dev, level="B-LTA", tsa_url=pki.tsa_url)
    assert error.value.code == "KEY_MATERIAL_INVALID"


def test_b_lta_bundle_passes_evidence_verify_and_pdfsig(pki, tmp_path):
    env = {
        "EVIDENCE_HOME": str(tmp_path / "home"),
        "EVIDENCE_KEYS_DIR": str(pki.provision(tmp_path / "keys")),
        "EVIDENCE_GENERATE_DEV_KEYS": "0",
        "EVIDENCE_PADES_LEVEL": "B-LTA",
        "EVIDENCE_TSA_URL": pki.tsa_url,
    }
    runtime = with_fixture_sources(runtime_for(Settings.from_env(env)))
    published = run_tenant_month(runtime, SMALL, RunInfo("lta-run"))
    bundle = f"{runtime.settings.archive_uri}/{published.bundle_key}"
    result = CliRunner().invoke(main, ["verify", "--json", bundle], env=env)
    assert result.exit_code == 0, result.output
    verification = json.loads(result.output)
    assert verification["ok"] and [c["name"] for c in verification["checks"] if c["name"] == "pdf_signature"]
    after_expiry = (pki.signer_not_after + dt.timedelta(days=1)).isoformat()
    assert CliRunner().invoke(main, ["verify", "--at", after_expiry, bundle], env=env).exit_code == 0  # B-LTA
    late = CliRunner().invoke(main, ["verify", "--at", "2200-01-01", bundle], env=env)  # after the TSA's certificate
    assert late.exit_code == 1 and "PDF_SIGNATURE_UNTRUSTED" in late.output and "Traceback" not in late.output
    assert CliRunner().invoke(main, ["verify", "--at", "someday", bundle], env=env).exit_code == 2
    manifest = json.loads(runtime.archive.get(f"{published.bundle_key}/manifest.json"))
    assert manifest["pades_level"] == "B-LTA" and manifest["keys"]["tsa_root_id"].startswith("x509-root-")
    report = tmp_path / REPORT
    report.write_bytes(runtime.archive.get(f"{published.bundle_key}/{REPORT}"))
    pdfsig = subprocess.run([require_tool("pdfsig"), str(report)], capture_output=True, text=True).stdout
    # poppler validates the signature itself; it cannot validate a document time stamp (ETSI.RFC3161) and says so
    assert pdfsig.count("Signature Validation: Signature is Valid.") == 1
    assert "Signer Certificate Common Name: evidence test TSA" in pdfsig
