"""Key rotation: `evidence keys rotate|revoke`, the keyring document signed by the trust root, the signing path that
picks up a rotation at its next bundle, and what `evidence verify` and `evidence ledger verify` make of it."""

import base64
import json
import multiprocessing
import stat
import time
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import NameOID
from dagster import instance_for_test, materialize

from evidence_pipeline.audit.checkpoints import publish_checkpoint, verify_ledger
from evidence_pipeline.audit.verify import verify_bundle
from evidence_pipeline.cli import main
from evidence_pipeline.config import Settings
from evidence_pipeline.defs.assets import evidence_bundle, monthly_report, source_revision
from evidence_pipeline.defs.partitions import range_tags, tenant_partitions
from evidence_pipeline.defs.resources import EvidenceResource
from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.models import TenantMonth
from evidence_pipeline.monthly import pipeline
from evidence_pipeline.monthly.bundle import MANIFEST, STATEMENT
from evidence_pipeline.monthly.pipeline import run_tenant_month
from evidence_pipeline.runtime import RunInfo, runtime_for
from evidence_pipeline.signing import dsse, rotation
from evidence_pipeline.signing.keyring_document import (
    PAYLOAD_TYPE,
    KeyringDocument,
    SignatureTimes,
    check_key_at,
    keyring_key,
    open_keyring,
    parse_time,
)
from evidence_pipeline.signing.keys import certificate_id, public_key_id
from evidence_pipeline.signing.rotation import KeyDirectory, now
from evidence_pipeline.synthetic.demo_data import demo_transactions
from evidence_pipeline_tests.support.fixture_sources import LARGE, SMALL, publish_revision, with_fixture_sources
from evidence_pipeline_tests.support.local_pki import LocalPki
from evidence_pipeline_tests.support.signers import admin_key_file
from evidence_pipeline_tests.support.tampering import overwrite

OTHER = TenantMonth("acme-books", "2026-09")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def local(tmp_path, monkeypatch):
    """A runtime on the embedded default (development keys, which keep the trust root's private key)."""
    monkeypatch.setenv("EVIDENCE_HOME", str(tmp_path / "home"))
    return with_fixture_sources(runtime_for(Settings.from_env({"EVIDENCE_HOME": str(tmp_path / "home")})))


def _cli(*args: str):
    """A command as the admin `root` of the environment's ledger (rotation and revocation are signed actions)."""
    return CliRunner().invoke(main, list(args), env={"EVIDENCE_ACTOR_KEY": admin_key_file()})


def _keyring(runtime, sequence: int) -> KeyringDocument:
    envelope = json.loads(runtime.archive.get(keyring_key(sequence)))
    return KeyringDocument.from_payload(base64.b64decode(envelope["payload"]))


def _predicate(runtime, publication) -> dict:
    envelope = json.loads(runtime.archive.get(f"{publication.bundle_key}/{STATEMENT}"))
    return json.loads(base64.b64decode(envelope["payload"]))["predicate"]


def _codes(runtime, publication, **pins) -> list[str]:
    return verify_bundle(runtime.archive, publication.bundle_key, **pins).codes


def test_rotate_then_new_bundles_use_the_new_key_and_old_ones_still_verify(runtime):
    first_keys = runtime.keyring
    old = run_tenant_month(runtime, SMALL, RunInfo("before"))
    assert old.key_id == first_keys.statement_key_id

    rotated = _cli("keys", "rotate", "--json")
    assert rotated.exit_code == 0, rotated.output
    document = json.loads(rotated.output)
    assert document["sequence"] == 2 and document["published_as"] == "keys/keyring-000002.json"
    retired, active = document["generations"]
    assert (retired["status"], active["status"]) == ("retired", "active")
    assert retired["not_after"] == active["not_before"] and retired["statement_key_id"] == old.key_id

    new = run_tenant_month(runtime, LARGE, RunInfo("after"))  # the same (cached) runtime: it sees the rotation
    assert new.key_id == active["statement_key_id"] != old.key_id
    assert runtime.keyring.signer_certificate_id == active["signer_certificate_id"]
    for publication in (old, new):
        result = verify_bundle(
            runtime.archive, publication.bundle_key, expected_root_ids=frozenset({first_keys.root_id})
        )
        assert result.ok, result.checks
        assert result.keyring_sequence == 2 and result.statement_key_id == publication.key_id
    predicate = _predicate(runtime, new)
    assert parse_time(active["not_before"]) <= parse_time(predicate["signed_at"])
    manifest = json.loads(runtime.archive.get(f"{new.bundle_key}/{MANIFEST}"))
    assert manifest["keys"]["signed_at"] == predicate["signed_at"]
    # retired public keys stay published, and so does every keyring document
    published = set(runtime.archive.list("keys"))
    assert {f"keys/{old.key_id}.pem", f"keys/{new.key_id}.pem", keyring_key(1), keyring_key(2)} <= published
    assert f"keys/{retired['signer_certificate_id']}.pem" in published
    assert _keyring(runtime, 2).previous_sha256 is not None

    folder = runtime.archive.uri(new.bundle_key)
    if folder.startswith("archive://"):
        folder = str(runtime.archive.root / new.bundle_key)
    shown = _cli("verify", folder, "--root-id", first_keys.root_id)
    assert shown.exit_code == 0 and "listed in the keyring" in shown.output and "not pinned" not in shown.output


def test_key_files_are_private_and_the_layout_keeps_generation_one_where_it_was(local):
    home = local.settings.keys_dir
    local.keyring  # development keys, and their first keyring document
    assert _cli("keys", "rotate").exit_code == 0
    generation = home / "generations" / "000002"
    assert (home / "statement-ed25519.key").exists() and (generation / "statement-ed25519.key").exists()
    for folder in (home, home / "generations", generation):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for path in (
        home / "pades-root.key",
        home / "keyring.json",
        home / "keyring.lock",
        generation / "statement-ed25519.key",
        generation / "pades-signer.key",
    ):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert (home / "keyring.json").read_bytes() == local.archive.get(keyring_key(2))
    listed = _cli("keys", "list")
    assert listed.exit_code == 0
    assert "generation 2  active" in listed.output and "generation 1  retired" in listed.output


def test_a_range_run_across_a_rotation_signs_each_bundle_with_the_key_active_then(local, tmp_path, monkeypatch):
    """One Dagster run over three months of a tenant; the keys rotate after its first bundle is published."""
    monkeypatch.setenv("EVIDENCE_WORKERS", "1")  # the range's bundles one after the other, in the run's process
    months = [TenantMonth("delta-foods", f"2026-{m:02d}") for m in (7, 8, 9)]
    for tenant_month in months:
        publish_revision(local, tenant_month, demo_transactions(tenant_month))
    published = []
    publish = pipeline.publish_and_time

    def publish_then_rotate_once(rt, item, run):
        publication = publish(rt, item, run)
        if not published:
            assert _cli("keys", "rotate").exit_code == 0  # another process would do the same: keyring.json changes
        published.append(publication)
        return publication

    monkeypatch.setattr(pipeline, "publish_and_time", publish_then_rotate_once)
    with instance_for_test(
        overrides=yaml.safe_load((REPO / "dagster.yaml").read_text()), temp_dir=str(tmp_path)
    ) as instance:
        instance.add_dynamic_partitions(tenant_partitions.name, ["delta-foods"])
        result = materialize(
            [source_revision, monthly_report, evidence_bundle],
            instance=instance,
            resources={"evidence": EvidenceResource(home=str(local.settings.home))},
            tags=range_tags(months[0], months[-1]),
        )
    assert result.success and len(published) == 3
    document = _keyring(local, 2)
    first, second = (g.statement_key_id for g in document.generations)
    assert [p.key_id for p in published] == [first, second, second]
    events = {e["period"]: e["details"] for e in local.ledger.events_of_type("bundle.published")}
    metadata = {
        e.partition.split("|")[0][:7]: e.materialization.metadata["key_id"].value
        for e in result.get_asset_materialization_events()
        if e.asset_key.to_user_string() == "evidence_bundle"
    }
    for publication in published:
        period = publication.tenant_month.period
        assert events[period]["key_id"] == metadata[period] == publication.key_id  # recorded in the ledger and Dagster
        assert verify_bundle(local.archive, publication.bundle_key).ok


def test_a_stale_signer_outside_its_keys_validity_window_fails(local, monkeypatch):
    """What a process that cached its keys would do after a rotation: sign with the retired generation."""
    stale = local.keyring
    assert _cli("keys", "rotate").exit_code == 0
    monkeypatch.setattr(type(local.keys), "select", lambda self: (stale, now()))
    publication = run_tenant_month(local, SMALL, RunInfo("stale"))
    assert publication.key_id == stale.statement_key_id
    result = verify_bundle(local.archive, publication.bundle_key)
    assert result.codes == ["KEY_NOT_VALID_AT_SIGNING_TIME"]
    [failed] = [check for check in result.checks if not check.passed]
    assert failed.name == "signing_keys" and "generation 1" in failed.detail


def test_revocation_fails_bundles_signed_after_it_and_keeps_those_before(local):
    before = run_tenant_month(local, SMALL, RunInfo("before"))
    time.sleep(0.01)
    compromised_since = now()
    time.sleep(0.01)
    after = run_tenant_month(local, LARGE, RunInfo("after"))
    assert before.key_id == after.key_id
    assert _cli("keys", "rotate").exit_code == 0
    revoked = _cli(
        "keys",
        "revoke",
        before.key_id,
        "--reason",
        "key file copied to a laptop",
        "--at",
        compromised_since.isoformat(),
    )
    assert revoked.exit_code == 0, revoked.output
    document = _keyring(local, 3)
    generation = document.find(before.key_id)
    assert (generation.status, generation.revoked_at, generation.revocation_reason) == (
        "revoked",
        compromised_since,
        "key file copied to a laptop",
    )
    assert verify_bundle(local.archive, before.bundle_key).ok
    assert _codes(local, after) == ["KEY_REVOKED"]
    shown = _cli("verify", str(local.archive.root / after.bundle_key))
    assert shown.exit_code == 1 and "KEY_REVOKED" in shown.output and "key file copied to a laptop" in shown.output
    # the revoked generation's signer certificate is revoked with it
    assert document.find(generation.signer_certificate_id) == generation


def test_revoking_the_active_generation_rotates_it_out(local):
    active = local.keyring.statement_key_id
    revoked = _cli("keys", "revoke", active, "--reason", "compromised", "--json")
    assert revoked.exit_code == 0, revoked.output
    old, new = json.loads(revoked.output)["generations"]
    assert (old["status"], new["status"]) == ("revoked", "active") and old["revoked_at"] == old["not_after"]
    assert local.keyring.statement_key_id == new["statement_key_id"]
    assert verify_bundle(local.archive, run_tenant_month(local, SMALL, RunInfo("r")).bundle_key).ok


def test_keys_command_errors(local, tmp_path):
    local.keyring
    unknown = _cli("keys", "revoke", "ed25519-0000000000000000", "--reason", "x", "--json")
    assert unknown.exit_code == 1 and json.loads(unknown.output)["error"]["code"] == "KEY_UNKNOWN"
    future = _cli("keys", "revoke", local.keyring.statement_key_id, "--reason", "x", "--at", "2999-01-01")
    assert future.exit_code == 2 and "CONFIG_INVALID" in future.output
    blank = _cli("keys", "revoke", local.keyring.statement_key_id, "--reason", " ")
    assert blank.exit_code == 2 and "CONFIG_INVALID" in blank.output
    other = tmp_path / "other.key"
    other.write_bytes(
        ec.generate_private_key(ec.SECP384R1()).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    wrong = _cli("keys", "rotate", "--root-key", str(other))
    assert wrong.exit_code == 1 and "KEY_MATERIAL_INVALID" in wrong.output and "Traceback" not in wrong.output
    assert _cli("keys", "list", "--json").exit_code == 0 and len(local.keys.document.generations) == 1
    # a generation folder the keyring does not list (a rotation that stopped half-way) is never overwritten
    (local.settings.keys_dir / "generations" / "000002").mkdir(parents=True)
    leftover = _cli("keys", "rotate")
    assert leftover.exit_code == 1 and "KEY_MATERIAL_INVALID" in leftover.output and "move it away" in leftover.output


def _forge(runtime, signing_key, key_id: str, sequence: int) -> None:
    """An archive writer publishes a keyring document that lists a key of their own."""
    document = _keyring(runtime, 1)
    payload = json.loads(document.payload())
    attacker = ed25519.Ed25519PrivateKey.generate().public_key()
    raw = attacker.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    payload.update(sequence=sequence, trust_root_id=key_id)
    payload["generations"][0].update(statement_key_id=public_key_id(attacker), statement_public_key=raw.hex())
    envelope = dsse.sign_envelope(dsse.canonical_json(payload), _EcSigner(signing_key), key_id, PAYLOAD_TYPE)
    runtime.archive.put_once(keyring_key(sequence), envelope)


class _EcSigner:
    def __init__(self, key):
        self.key = key

    def sign(self, data):
        return self.key.sign(data, ec.ECDSA(hashes.SHA384()))


def test_a_keyring_not_signed_by_the_trust_root_is_refused(runtime):
    publication = run_tenant_month(runtime, SMALL, RunInfo("r"))
    root_id = runtime.keyring.root_id
    _forge(runtime, ec.generate_private_key(ec.SECP384R1()), root_id, 2)  # claims to be by our root
    assert _codes(runtime, publication) == ["KEYRING_INVALID"]
    assert verify_ledger_code(runtime) == "KEYRING_INVALID"


def test_a_keyring_of_another_root_is_refused_when_the_root_is_pinned(local):
    publication = run_tenant_month(local, SMALL, RunInfo("r"))
    key = ec.generate_private_key(ec.SECP384R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "someone else's root")])
    moment = now()
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(moment - timedelta(days=1))
        .not_valid_after(moment + timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    pem = certificate.public_bytes(serialization.Encoding.PEM)
    local.archive.put_once(f"keys/{certificate_id(certificate)}.pem", pem)
    _forge(local, key, certificate_id(certificate), 2)
    ours = frozenset({local.keyring.root_id})
    assert _codes(local, publication, expected_root_ids=ours) == ["KEYRING_INVALID"]
    assert _codes(local, publication) == ["KEY_UNKNOWN"]  # unpinned: it vouches for nothing of this bundle's root


def test_an_older_keyring_replayed_under_a_newer_name_is_refused(local):
    """Hiding a revocation by republishing the keyring from before it as the newest."""
    publication = run_tenant_month(local, SMALL, RunInfo("r"))
    assert _cli("keys", "rotate").exit_code == 0
    local.archive.put_once(keyring_key(3), local.archive.get(keyring_key(1)))
    assert _codes(local, publication) == ["KEYRING_INVALID"]


def test_a_statement_signed_by_a_key_not_in_the_keyring_fails(local):
    publication = run_tenant_month(local, SMALL, RunInfo("r"))
    outsider = ed25519.Ed25519PrivateKey.generate()  # published under keys/, never listed in a keyring
    outsider_id = public_key_id(outsider.public_key())
    local.archive.put_once(
        f"keys/{outsider_id}.pem",
        outsider.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo),
    )
    key = f"{publication.bundle_key}/{STATEMENT}"
    payload = base64.b64decode(json.loads(local.archive.get(key))["payload"])
    overwrite(local, key, dsse.sign_envelope(payload, outsider, outsider_id))
    assert _codes(local, publication) == ["KEY_UNKNOWN"]


def verify_ledger_code(runtime) -> str:
    with pytest.raises(EvidenceError) as error:
        verify_ledger(runtime.ledger, runtime.archive)
    return error.value.code


def test_checkpoints_signed_before_a_rotation_still_verify(local):
    run_tenant_month(local, SMALL, RunInfo("one"))
    first = publish_checkpoint(local.ledger, local.archive, local.keyring)
    assert _cli("keys", "rotate").exit_code == 0
    run_tenant_month(local, LARGE, RunInfo("two"))
    second = publish_checkpoint(local.ledger, local.archive, local.keyring)
    assert first["key_id"] != second["key_id"] == local.keyring.statement_key_id
    verified = _cli("ledger", "verify")
    assert verified.exit_code == 0 and "2 checkpoints consistent" in verified.output
    # a checkpoint signed with a key after its revocation does not verify
    revoked_at = parse_time(first["issued_at"]) - timedelta(seconds=1)
    assert _cli("keys", "revoke", first["key_id"], "--reason", "r", "--at", revoked_at.isoformat()).exit_code == 0
    failed = _cli("ledger", "verify")
    assert failed.exit_code == 1 and "LEDGER_INVALID" in failed.output and "KEY_REVOKED" in failed.output


def _select_until_generation_3(home: str, out) -> None:
    """In another process: select keys as fast as possible until generation 3 is active (at most 60 s)."""
    keys = KeyDirectory(Path(home))
    picks, deadline = [], time.monotonic() + 60
    while time.monotonic() < deadline:
        keyring, signed_at = keys.select()
        picks.append((keyring.statement_key_id, signed_at.isoformat()))
        if keyring.generation == 3:
            break
    out.put(picks)


def test_concurrent_signers_never_use_a_generation_outside_its_window(local):
    """Another process selects keys as fast as it can while this one rotates twice: every (key, signing time) it
    got lies inside that key's window in the final keyring, with no grace."""
    home = local.settings.keys_dir
    local.keyring
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_select_until_generation_3, args=(str(home), queue))
    child.start()
    for _ in range(2):
        time.sleep(0.05)
        assert _cli("keys", "rotate").exit_code == 0
    picks = queue.get(timeout=120)
    child.join(timeout=60)
    document = local.keys.document
    assert document.sequence == 3
    used = [key_id for key_id, _ in picks]
    assert used[-1] == document.active.statement_key_id and len(picks) > 100
    for key_id, signed_at in picks:
        check_key_at(document, key_id, SignatureTimes(selected=parse_time(signed_at)), "statement key")


def test_select_parses_the_keyring_only_when_it_changed(local, monkeypatch):
    """The per-bundle re-read of the active generation is a stat and a shared flock: keyring.json is parsed and its
    signature checked only after a rotation changed it. What that costs is measured by bench/keyring_select.py
    (~15 µs a call; a PAdES B-B signature is ~50 ms), not asserted here."""
    keys, parsed = local.keys, []
    monkeypatch.setattr(rotation, "open_keyring", lambda *args: parsed.append(args) or open_keyring(*args))
    for generation in (2, 3):
        assert _cli("keys", "rotate").exit_code == 0
        parsed.clear()  # what the rotation itself read
        for _ in range(1000):
            assert keys.select()[0].generation == generation
        assert len(parsed) == 1


@pytest.fixture(scope="module")
def pki():
    with LocalPki(signer_days=365) as pki:
        yield pki


def test_production_keys_rotate_with_an_offline_root_and_time_stamps_decide(pki, tmp_path, monkeypatch):
    """Keys provisioned before key rotation (no keyring, root key offline), signing at B-T: the first rotation
    publishes the keyring of generation 1 and then generation 2, and old bundles keep verifying. After a revocation,
    the TSA's time decides: a bundle from before it verifies, and one made with the revoked key afterwards fails
    even though its statement claims an earlier signing time."""
    offline = tmp_path / "offline-root.key"
    env = {
        "EVIDENCE_HOME": str(tmp_path / "home"),
        "EVIDENCE_KEYS_DIR": str(pki.provision(tmp_path / "keys", root_key=offline)),
        "EVIDENCE_GENERATE_DEV_KEYS": "0",
        "EVIDENCE_PADES_LEVEL": "B-T",
        "EVIDENCE_TSA_URL": pki.tsa_url,
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    runtime = with_fixture_sources(runtime_for(Settings.from_env(env)))
    legacy = run_tenant_month(runtime, SMALL, RunInfo("legacy"))
    assert runtime.keys.document is None and verify_bundle(runtime.archive, legacy.bundle_key).keyring_sequence is None
    assert _cli("keys", "rotate").exit_code == 1  # the root's key is not in the keys directory

    rotated = _cli("keys", "rotate", "--root-key", str(offline))
    assert rotated.exit_code == 0, rotated.output
    current = run_tenant_month(runtime, LARGE, RunInfo("current"))
    assert current.key_id != legacy.key_id and _predicate(runtime, current)["pades_level"] == "B-T"
    for publication in (legacy, current):
        result = verify_bundle(
            runtime.archive,
            publication.bundle_key,
            expected_root_ids=frozenset({runtime.keyring.root_id, runtime.keyring.tsa_root_id}),
        )
        assert result.ok and result.keyring_sequence == 2, result.checks
    # the rotated signer certificate kept the CRL address, so B-LT finds revocation information for it
    signer = runtime.keyring.signer_certificate
    assert signer.extensions.get_extension_for_class(x509.CRLDistributionPoints).value == (
        pki.signer.extensions.get_extension_for_class(x509.CRLDistributionPoints).value
    )

    revoked_at = now()
    assert _cli("keys", "revoke", current.key_id, "--reason", "HSM lost", "--root-key", str(offline)).exit_code == 0
    assert verify_bundle(runtime.archive, current.bundle_key).ok  # time-stamped before the revocation
    # the revoked generation signs a new bundle, claiming a time inside its window and before the revocation
    thief, claimed = runtime.keys.keyring(2), revoked_at - timedelta(milliseconds=1)
    assert runtime.keys.document.generation(2).not_before <= claimed
    monkeypatch.setattr(type(runtime.keys), "select", lambda self: (thief, claimed))
    forged = run_tenant_month(runtime, OTHER, RunInfo("thief"))
    result = verify_bundle(runtime.archive, forged.bundle_key)
    assert result.codes == ["KEY_REVOKED"]
    [failed] = [check for check in result.checks if not check.passed]
    assert parse_time(_predicate(runtime, forged)["signed_at"]) == claimed  # the claim alone would have passed
    assert f"this signature is from {claimed.isoformat(timespec='milliseconds')}" not in failed.detail


def test_a_keyring_document_round_trips_and_refuses_inconsistent_generations(local):
    document = local.keys.document
    assert KeyringDocument.from_payload(document.payload()) == document
    payload = json.loads(document.payload())
    payload["generations"][0]["status"] = "retired"  # no active generation, and a retired one without its end
    with pytest.raises(EvidenceError) as error:
        KeyringDocument.from_payload(json.dumps(payload).encode())
    assert error.value.code == "KEYRING_INVALID"
