"""One tenant-month end to end, then what an auditor's `evidence verify` catches."""

import base64
import dataclasses
import hashlib
import json
import os
import shutil
import subprocess

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from securesystemslib.dsse import Envelope
from securesystemslib.signer import SSlibKey

from evidence_pipeline.audit.verify import verify_bundle
from evidence_pipeline.cli import main
from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.monthly.bundle import (
    MANIFEST,
    REPORT,
    STATEMENT,
    bundle_identity,
    bundle_prefix,
    identity_fields,
)
from evidence_pipeline.monthly.pipeline import pin_source, publish_stage, render_stage, run_tenant_month
from evidence_pipeline.monthly.render import RENDERER_VERSION
from evidence_pipeline.runtime import RunInfo
from evidence_pipeline.signing import dsse
from evidence_pipeline.signing.keys import load_keyring, public_key_id
from evidence_pipeline.signing.pades import sign_pdf
from evidence_pipeline_tests.support.fixture_sources import FIXTURE_EVENTS, SMALL
from evidence_pipeline_tests.support.tampering import overwrite
from evidence_pipeline_tests.support.tools import require_tool

RUN = RunInfo("test-run")


@pytest.fixture
def published(runtime):
    return run_tenant_month(runtime, SMALL, RUN)


def _codes(runtime, publication) -> list[str]:
    return verify_bundle(runtime.archive, publication.bundle_key).codes


def test_bundle_is_published_once_and_verifies(runtime, published):
    assert published.created
    assert verify_bundle(runtime.archive, published.bundle_key).ok
    again = run_tenant_month(runtime, SMALL, RunInfo("second-run"))
    assert not again.created and again.bundle_key == published.bundle_key
    assert again.report_sha256 == published.report_sha256 and again.manifest_sha256 == published.manifest_sha256
    assert runtime.archive.list(f"bundles/{SMALL.tenant}") == [
        f"{published.bundle_key}/{n}" for n in (MANIFEST, REPORT, STATEMENT)
    ]
    # the fixture sources' events; documents closed, pinned, accepted, rendered, validated, running, published,
    # timed; + 4 again (pinned, rendered, validated, timed)
    assert runtime.ledger.verify_chain() == FIXTURE_EVENTS + 12
    keys = runtime.keyring
    assert runtime.archive.list("keys") == sorted(
        f"keys/{name}"
        for name in (
            f"{keys.statement_key_id}.pem",
            f"{keys.signer_certificate_id}.pem",
            f"{keys.root_id}.pem",
            "keyring-000001.json",
        )
    )


def test_generic_dsse_implementation_verifies_with_the_published_key(runtime, published):
    pem = runtime.archive.get(f"keys/{published.key_id}.pem")
    key = SSlibKey.from_crypto(serialization.load_pem_public_key(pem), keyid=published.key_id)
    envelope = Envelope.from_dict(json.loads(runtime.archive.get(f"{published.bundle_key}/{STATEMENT}")))
    assert list(envelope.verify([key], 1)) == [published.key_id]
    assert envelope.payload_type == "application/vnd.in-toto+json"


def test_independent_tools_accept_the_bundle(runtime, published, tmp_path):
    report = tmp_path / REPORT
    report.write_bytes(runtime.archive.get(f"{published.bundle_key}/{REPORT}"))
    pdfsig = subprocess.run([require_tool("pdfsig"), str(report)], capture_output=True, text=True)
    assert "Signature is Valid" in pdfsig.stdout and "Total document signed" in pdfsig.stdout
    assert subprocess.run([require_tool("qpdf"), "--check", str(report)], capture_output=True).returncode == 0


def test_flipped_pdf_byte_is_detected(runtime, published):
    key = f"{published.bundle_key}/{REPORT}"
    pdf = bytearray(runtime.archive.get(key))
    pdf[len(pdf) // 3] ^= 0x01
    overwrite(runtime, key, bytes(pdf))
    codes = _codes(runtime, published)
    assert {"SUBJECT_DIGEST_MISMATCH", "PDF_SIGNATURE_INVALID", "MANIFEST_STATEMENT_MISMATCH"} <= set(codes)


def test_edited_statement_is_detected(runtime, published):
    key = f"{published.bundle_key}/{STATEMENT}"
    envelope = json.loads(runtime.archive.get(key))
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"]["period"] = "2026-11"
    envelope["payload"] = base64.b64encode(dsse.canonical_json(statement)).decode()
    overwrite(runtime, key, json.dumps(envelope).encode())
    assert _codes(runtime, published) == ["STATEMENT_SIGNATURE_INVALID"]


@pytest.mark.parametrize("claimed_key_id", ["ours", "foreign"])
def test_statement_by_a_foreign_key_is_detected(runtime, published, claimed_key_id):
    key = f"{published.bundle_key}/{STATEMENT}"
    payload = base64.b64decode(json.loads(runtime.archive.get(key))["payload"])
    key_id = runtime.keyring.statement_key_id if claimed_key_id == "ours" else "ed25519-0123456789abcdef"
    overwrite(runtime, key, dsse.sign_envelope(payload, ed25519.Ed25519PrivateKey.generate(), key_id))
    expected = "STATEMENT_SIGNATURE_INVALID" if claimed_key_id == "ours" else "KEY_UNKNOWN"
    assert _codes(runtime, published)[0] == expected


def test_edited_manifest_and_missing_files_are_detected(runtime, published):
    key = f"{published.bundle_key}/{MANIFEST}"
    manifest = json.loads(runtime.archive.get(key))
    manifest["source"]["sha256"] = "0" * 64
    overwrite(runtime, key, json.dumps(manifest).encode())
    assert _codes(runtime, published) == ["MANIFEST_STATEMENT_MISMATCH"]
    overwrite(runtime, key, None)
    assert _codes(runtime, published) == ["BUNDLE_INCOMPLETE"]
    overwrite(runtime, f"{published.bundle_key}/{REPORT}", None)
    [check] = verify_bundle(runtime.archive, published.bundle_key).checks
    assert (check.name, check.code) == ("bundle_complete", "BUNDLE_INCOMPLETE")
    assert check.detail == f"bundle is missing {REPORT}, {MANIFEST} (never committed?)"


class _Counting:
    """An archive that records each request made of it: (method, key)."""

    def __init__(self, store):
        self.store, self.requests = store, []

    def __getattr__(self, name):
        method = getattr(self.store, name)
        if name == "uri":  # names a location, asks the store nothing
            return method

        def counted(key, *args, **kwargs):
            self.requests.append((name, key))
            return method(key, *args, **kwargs)

        return counted


def test_a_verification_reads_each_object_once_and_asks_nothing_a_read_answers(runtime, published):
    """On S3 each request is a round trip: a verification reads each object once, with its version id where the
    manifest records one, and asks whether a file is there only for the report, which is read later (bounded by the
    statement)."""
    archive = _Counting(runtime.archive)
    assert verify_bundle(archive, published.bundle_key).ok
    reads = [key for method, key in archive.requests if method in ("get", "get_versioned")]
    assert len(reads) == len(set(reads)) and f"keys/{runtime.keyring.root_id}.pem" in reads
    assert [key for method, key in archive.requests if method == "exists"] == [f"{published.bundle_key}/{REPORT}"]
    assert not [key for method, key in archive.requests if method == "version_id"]
    # the report, statement and manifest; the keyring listing, its newest document and its root; the month's listing
    assert len(archive.requests) == 8, archive.requests


def test_pinned_key_ids_reject_other_keys(runtime, published):
    result = verify_bundle(
        runtime.archive, published.bundle_key, frozenset({published.key_id}), frozenset({runtime.keyring.root_id})
    )
    assert result.ok and (result.statement_key_id, result.trust_root_id) == (published.key_id, runtime.keyring.root_id)
    assert verify_bundle(runtime.archive, published.bundle_key, frozenset({"ed25519-other"})).codes == ["KEY_UNKNOWN"]
    other_root = frozenset({"x509-root-0000000000000000"})  # the keyring is signed by our root, not that one
    assert verify_bundle(runtime.archive, published.bundle_key, frozenset(), other_root).codes == ["KEYRING_INVALID"]
    both = verify_bundle(runtime.archive, published.bundle_key, frozenset({published.key_id}), other_root)
    assert both.codes == ["KEYRING_INVALID"]


@pytest.mark.parametrize("keyring", ["keyring", "no-keyring"])
def test_a_swapped_key_file_cannot_borrow_a_pinned_id(runtime, published, keyring):
    """An archive writer replaces keys/<pinned id>.pem with their own key and re-signs the statement. The keyring
    carries the public key itself; an archive from before key rotation has only the file, named by its bytes."""
    key = f"{published.bundle_key}/{STATEMENT}"
    payload = base64.b64decode(json.loads(runtime.archive.get(key))["payload"])
    attacker = ed25519.Ed25519PrivateKey.generate()
    overwrite(
        runtime,
        f"keys/{published.key_id}.pem",
        attacker.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo),
    )
    overwrite(runtime, key, dsse.sign_envelope(payload, attacker, published.key_id))
    if keyring == "no-keyring":
        overwrite(runtime, "keys/keyring-000001.json", None)
    expected = "STATEMENT_SIGNATURE_INVALID" if keyring == "keyring" else "KEY_UNKNOWN"
    assert verify_bundle(runtime.archive, published.bundle_key, frozenset({published.key_id})).codes == [expected]


def test_a_swapped_trust_root_file_is_untrusted(runtime, published, tmp_path):
    other_root = load_keyring(tmp_path / "other", generate=True).root_pem
    overwrite(runtime, f"keys/{runtime.keyring.root_id}.pem", other_root)
    assert verify_bundle(runtime.archive, published.bundle_key).codes == ["KEYRING_INVALID"]
    overwrite(runtime, "keys/keyring-000001.json", None)  # an archive from before key rotation
    assert verify_bundle(runtime.archive, published.bundle_key).codes == ["PDF_SIGNATURE_UNTRUSTED"]


def test_cli_verify_exit_codes_and_json(runtime, published):
    folder = runtime.archive.uri(published.bundle_key)
    if folder.startswith("archive://"):
        folder = str(runtime.archive.root / published.bundle_key)
    ok = CliRunner().invoke(main, ["verify", folder, "--json"])
    assert ok.exit_code == 0 and json.loads(ok.output)["ok"] is True
    overwrite(runtime, f"{published.bundle_key}/{MANIFEST}", b"{")
    bad = CliRunner().invoke(main, ["verify", folder])
    assert bad.exit_code == 1 and "MANIFEST_INVALID" in bad.output and "Traceback" not in bad.output
    # <archive>/bundles is a prefix now: it verifies every bundle below it (test_verify_many.py has the details)
    prefix = CliRunner().invoke(main, ["verify", folder.rsplit("/", 3)[0], "--json"])
    assert prefix.exit_code == 1 and json.loads(prefix.output)["codes"] == ["MANIFEST_INVALID"]
    missing = CliRunner().invoke(main, ["verify", folder.rsplit("/", 3)[0] + "/nobody", "--json"])
    assert missing.exit_code == 2 and json.loads(missing.output)["error"]["code"] == "BUNDLE_NOT_FOUND"


def test_retry_after_a_crash_adopts_the_orphaned_signed_report(runtime):
    """An attempt signed and stored report.pdf, then died before the ledger commit: the retry converges on it."""
    pinned = pin_source(runtime, SMALL, RUN)
    revision = pinned.revision
    staged = render_stage(runtime, pinned, RUN)
    with pytest.raises(EvidenceError) as error:
        publish_stage(runtime, pinned, staged.sha256, RUN)  # nothing validated yet: refuses to sign
    assert error.value.code == "REPORT_INVALID"
    identity = bundle_identity(
        identity_fields(SMALL, revision.sha256, staged.sha256, RENDERER_VERSION, runtime.settings.policy_version)
    )
    orphan = sign_pdf(runtime.staging.get(f"reports/{staged.sha256}.pdf"), runtime.keyring).getvalue()
    runtime.archive.put_once(f"{bundle_prefix(SMALL, identity)}/{REPORT}", orphan)
    assert verify_bundle(runtime.archive, bundle_prefix(SMALL, identity)).codes == ["BUNDLE_INCOMPLETE"]

    publication = run_tenant_month(runtime, SMALL, RUN)
    assert publication.identity == identity and publication.created
    assert runtime.archive.get(f"{publication.bundle_key}/{REPORT}") == orphan
    assert verify_bundle(runtime.archive, publication.bundle_key).ok


def test_foreign_object_at_the_bundle_key_is_a_conflict_and_nothing_is_committed(runtime):
    pinned = pin_source(runtime, SMALL, RUN)
    revision = pinned.revision
    staged = render_stage(runtime, pinned, RUN)
    identity = bundle_identity(
        identity_fields(SMALL, revision.sha256, staged.sha256, RENDERER_VERSION, runtime.settings.policy_version)
    )
    runtime.archive.put_once(f"{bundle_prefix(SMALL, identity)}/{REPORT}", b"%PDF-1.7 someone else's %%EOF")
    with pytest.raises(EvidenceError) as error:
        run_tenant_month(runtime, SMALL, RUN)
    assert error.value.code == "STORE_CONFLICT" and not error.value.retryable
    assert runtime.ledger.publication(identity) is None
    assert not runtime.archive.exists(f"{bundle_prefix(SMALL, identity)}/{MANIFEST}")


class _FailingOnce:
    """The same ArtifactStore, except that the first put of one object name fails as an S3 outage would."""

    def __init__(self, store, name: str):
        self._store, self._name, self.failed = store, name, False

    def put_once(self, key, data):
        self._fail_once(key)
        return self._store.put_once(key, data)

    def put_file(self, key, file):
        self._fail_once(key)
        return self._store.put_file(key, file)

    def _fail_once(self, key):
        if key.endswith(self._name) and not self.failed:
            self.failed = True
            raise EvidenceError("STORE_UNAVAILABLE", "injected outage")

    def __getattr__(self, name):
        return getattr(self._store, name)


def test_an_outage_after_the_commit_is_retried_into_a_complete_bundle(runtime):
    flaky = _FailingOnce(runtime.archive, "/manifest.json")
    runtime_with_outage = dataclasses.replace(runtime, archive=flaky)
    with pytest.raises(EvidenceError) as error:
        run_tenant_month(runtime_with_outage, SMALL, RUN)
    assert error.value.retryable and flaky.failed
    [job] = runtime.ledger.jobs_in("succeeded")  # committed: the failure did not move the job
    [prefix] = {key.rsplit("/", 1)[0] for key in runtime.archive.list("bundles")}
    assert verify_bundle(runtime.archive, prefix).codes == ["BUNDLE_INCOMPLETE"]
    retried = run_tenant_month(runtime_with_outage, SMALL, RunInfo("retry", attempt=2))
    assert not retried.created and verify_bundle(runtime.archive, prefix).ok


def _envelope_parts(runtime, publication) -> tuple[str, dict]:
    key = f"{publication.bundle_key}/{STATEMENT}"
    return key, json.loads(runtime.archive.get(key))


def _republish_statement(runtime, publication, envelope: bytes) -> None:
    """Replace the statement and make the manifest's statement digests match it, as an archive writer would."""
    overwrite(runtime, f"{publication.bundle_key}/{STATEMENT}", envelope)
    key = f"{publication.bundle_key}/{MANIFEST}"
    manifest = json.loads(runtime.archive.get(key))
    manifest["artifacts"][STATEMENT].update(sha256=hashlib.sha256(envelope).hexdigest(), size=len(envelope))
    if "version_id" in manifest["artifacts"][STATEMENT]:  # a versioned archive: name the new version
        manifest["artifacts"][STATEMENT]["version_id"] = runtime.archive.version_id(
            f"{publication.bundle_key}/{STATEMENT}"
        )
    manifest["lineage"][-1]["sha256"] = hashlib.sha256(envelope).hexdigest()
    overwrite(runtime, key, json.dumps(manifest, indent=2, sort_keys=True).encode())


@pytest.mark.parametrize("keyring", ["keyring", "no-keyring"])
def test_the_output_names_the_key_that_verified_not_the_claimed_one(runtime, published, keyring):
    """An archive writer publishes a key of their own, signs the unchanged statement with it, fixes the manifest.
    The keyring does not list that key; an archive from before key rotation has no keyring to ask."""
    if keyring == "no-keyring":
        overwrite(runtime, "keys/keyring-000001.json", None)
    key, envelope = _envelope_parts(runtime, published)
    attacker = ed25519.Ed25519PrivateKey.generate()
    attacker_id = public_key_id(attacker.public_key())
    runtime.archive.put_once(
        f"keys/{attacker_id}.pem",
        attacker.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo),
    )
    _republish_statement(
        runtime, published, dsse.sign_envelope(base64.b64decode(envelope["payload"]), attacker, attacker_id)
    )
    result = verify_bundle(runtime.archive, published.bundle_key)
    if keyring == "keyring":
        assert result.statement_key_id is None and result.codes == ["KEY_UNKNOWN"]
    else:
        assert result.statement_key_id == attacker_id and result.codes == ["STATEMENT_KEY_MISMATCH"]


def test_an_envelope_with_two_payload_keys_is_refused(runtime, published):
    key, envelope = _envelope_parts(runtime, published)
    text = runtime.archive.get(key).decode()
    doubled = text.replace('"payload": ', f'"payload": "{envelope["payload"]}", "payload": ', 1).encode()
    _republish_statement(runtime, published, doubled)
    assert _codes(runtime, published) == ["STATEMENT_INVALID"]


@pytest.mark.parametrize("edit", ["duplicate-key", "extra-key", "ledger-extra-key", "ledger-hash-not-hex"])
def test_manifest_fields_nothing_vouches_for_are_refused(runtime, published, edit):
    key = f"{published.bundle_key}/{MANIFEST}"
    text = runtime.archive.get(key).decode()
    manifest = json.loads(text)
    if edit == "duplicate-key":
        data = text.replace('"period": ', '"period": "1999-01", "period": ', 1)
    else:
        if edit == "extra-key":
            manifest["approved_by"] = "the auditor"
        elif edit == "ledger-extra-key":
            manifest["ledger"]["note"] = "checked"
        else:
            manifest["ledger"]["event_hash"] = "not a digest"
        data = json.dumps(manifest, indent=2, sort_keys=True)
    overwrite(runtime, key, data.encode())
    expected = "MANIFEST_STATEMENT_MISMATCH" if edit == "extra-key" else "MANIFEST_INVALID"
    assert _codes(runtime, published) == [expected]


# 1 MiB: an unterminated string of escaped quotes after more brackets than the depth limit (issue 47: the old
# string-stripping regex took about an hour on it; the reader's scan is linear)
ESCAPES = (b'["' + b"[" * 17 + b'\\"' * ((1 << 20) // 2 - 10))[: 1 << 20]


@pytest.mark.parametrize(
    "target, crafted",
    [(MANIFEST, "deep"), (STATEMENT, "deep"), ("payload", "deep"), (MANIFEST, "escapes"), (STATEMENT, "escapes")],
)
def test_deeply_nested_or_crafted_json_is_a_reason_code_not_a_traceback_nor_a_stall(
    runtime, published, target, crafted
):
    data = b"[" * 200_000 + b"]" * 200_000 if crafted == "deep" else ESCAPES
    if target == "payload":  # signed by our own key, so the payload itself gets parsed
        data = dsse.sign_envelope(data, runtime.keyring.statement_key, runtime.keyring.statement_key_id)
    overwrite(runtime, f"{published.bundle_key}/{STATEMENT if target == 'payload' else target}", data)
    expected = {MANIFEST: "MANIFEST_INVALID", STATEMENT: "STATEMENT_INVALID", "payload": "STATEMENT_INVALID"}[target]
    assert expected in _codes(runtime, published)


@pytest.mark.parametrize("link", ["report", "bundle-folder"])
def test_symlinks_in_the_archive_are_refused_not_followed(local_runtime, tmp_path, link):
    publication = run_tenant_month(local_runtime, SMALL, RUN)
    root = local_runtime.archive.root
    outside = tmp_path / "outside"
    if link == "report":  # a byte-identical copy outside the archive: following it would verify
        outside.mkdir()
        (outside / REPORT).write_bytes((root / publication.bundle_key / REPORT).read_bytes())
        target = root / publication.bundle_key / REPORT
        os.chmod(target, 0o644)
        target.unlink()
        target.symlink_to(outside / REPORT)
    else:
        folder = root / publication.bundle_key
        shutil.move(folder, outside)
        folder.symlink_to(outside)
    assert _codes(local_runtime, publication) == ["STORE_SYMLINK_REFUSED"]


def test_a_padded_report_is_refused_before_it_is_read(runtime, published):
    key = f"{published.bundle_key}/{REPORT}"
    overwrite(runtime, key, runtime.archive.get(key) + b"\0" * (3 << 20))
    assert _codes(runtime, published) == ["STORE_OBJECT_TOO_LARGE"]
