"""The signed index's size: package.json lists every file of a package, so it grows with the package, past the 1 MiB
that bounds the other JSON documents (a 1,200-bundle package's index is ~1.5 MiB: `bench/package_verify.py` found
it refused, as PACKAGE_INVALID when parsed, then as PACKAGE_INDEX_SIGNATURE_INVALID when its signature was
checked)."""

from __future__ import annotations

import hashlib
import json

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from evidence_pipeline import jsonread
from evidence_pipeline.audit import package_index
from evidence_pipeline.audit.checkpoints import CheckpointKeys
from evidence_pipeline.audit.package import parse_index
from evidence_pipeline.audit.package_index import open_signed_index, sign_index
from evidence_pipeline.cli import main
from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.signing import dsse
from evidence_pipeline.signing.keys import public_key_id

KEY = ed25519.Ed25519PrivateKey.generate()


def _files(count: int) -> dict[str, str]:
    """``count`` bundle files, as a package of count / 3 bundles lists them."""
    return {
        f"bundles/acme-books/{n // 3:06d}/{hashlib.sha256(b'%d' % (n // 3)).hexdigest()}/{n % 3}.pdf": hashlib.sha256(
            b"%d" % n
        ).hexdigest()
        for n in range(count)
    }


def test_an_index_larger_than_a_json_document_is_read_and_its_signature_checked_whole():
    files = _files(6_000)  # 2,000 bundles
    envelope = sign_index({"format": "x"}, files, KEY, "k")
    assert len(envelope) > jsonread.MAX_BYTES
    signed = open_signed_index(json.loads(envelope), CheckpointKeys({"k": KEY.public_key()}, None))
    assert signed.subjects == files and signed.document == {"format": "x"} and signed.key_ids == ("k",)
    other = ed25519.Ed25519PrivateKey.generate().public_key()
    with pytest.raises(EvidenceError) as refused:  # the check that passed is one that can fail
        open_signed_index(json.loads(envelope), CheckpointKeys({"k": other}, None))
    assert refused.value.code == "PACKAGE_INDEX_SIGNATURE_INVALID"


def test_export_refuses_an_index_its_verifier_would_not_read(monkeypatch):
    files = _files(3_000)
    monkeypatch.setattr(package_index, "INDEX_MAX_BYTES", len(sign_index({}, files, KEY, "k")) - 1)
    with pytest.raises(EvidenceError) as refused:
        sign_index({}, files, KEY, "k")
    assert refused.value.code == "PACKAGE_TOO_LARGE" and "3000 files" in refused.value.message
    with pytest.raises(EvidenceError) as unread:  # and past the bound a reader refuses what it is handed
        parse_index(b" " * (package_index.INDEX_MAX_BYTES + 1), CheckpointKeys({"k": KEY.public_key()}, None))
    assert unread.value.code == "PACKAGE_INVALID"


def test_an_index_is_verified_before_its_statement_is_parsed(tmp_path, monkeypatch):
    """`evidence verify --package` of a package.json whose payload is too deep to read: signed by a key the package
    does not hold, or not by its key, it is refused for its signature and its payload is never handed to the JSON
    reader; signed by the package's key, the same payload is the index's problem (PACKAGE_INVALID)."""
    deep = b"[" * 100_000 + b"]" * 100_000
    read = []
    loads = jsonread.loads
    monkeypatch.setattr(
        jsonread, "loads", lambda data, *rest, **named: read.append(data) or loads(data, *rest, **named)
    )
    package = tmp_path / "package"
    (package / "keys").mkdir(parents=True)
    key_id = public_key_id(KEY.public_key())
    (package / "keys" / f"{key_id}.pem").write_bytes(
        KEY.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    stranger = ed25519.Ed25519PrivateKey.generate()

    def verified(envelope: bytes) -> str:
        (package / "package.json").write_bytes(envelope)
        result = CliRunner().invoke(main, ["verify", "--package", str(package), "--json"])
        assert result.exit_code != 0 and "Traceback" not in result.output
        return json.loads(result.output)["error"]["code"]

    for signer, named in ((stranger, key_id), (stranger, public_key_id(stranger.public_key()))):
        assert verified(dsse.sign_envelope(deep, signer, named)) == "PACKAGE_INDEX_SIGNATURE_INVALID"
    assert read and deep not in read
    assert verified(dsse.sign_envelope(deep, KEY, key_id)) == "PACKAGE_INVALID"
    assert deep in read  # authenticated: now read, and refused
