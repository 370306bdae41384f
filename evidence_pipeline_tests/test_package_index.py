"""The signed index's size: package.json lists every file of a package, so it grows with the package, past the 1 MiB
that bounds the other JSON documents (a 1,200-bundle package's index is ~1.5 MiB: `bench/package_verify.py` found
it refused, as PACKAGE_INVALID when parsed, then as PACKAGE_INDEX_SIGNATURE_INVALID when its signature was
checked)."""

from __future__ import annotations

import hashlib

import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519

from evidence_pipeline import jsonread
from evidence_pipeline.audit import package_index
from evidence_pipeline.audit.checkpoints import CheckpointKeys
from evidence_pipeline.audit.package_index import check_signature, parse_signed_index, sign_index
from evidence_pipeline.errors import EvidenceError

KEY = ed25519.Ed25519PrivateKey.generate()


def _files(count: int) -> dict[str, str]:
    """``count`` bundle files, as a package of count / 3 bundles lists them."""
    return {f"bundles/acme-books/{n // 3:06d}/{hashlib.sha256(b'%d' % (n // 3)).hexdigest()}/{n % 3}.pdf":
            hashlib.sha256(b"%d" % n).hexdigest() for n in range(count)}


def test_an_index_larger_than_a_json_document_is_read_and_its_signature_checked_whole():
    files = _files(6_000)  # 2,000 bundles
    envelope = sign_index({"format": "x"}, files, KEY, "k")
    assert len(envelope) > jsonread.MAX_BYTES
    signed = parse_signed_index(envelope)
    assert signed.subjects == files and signed.document == {"format": "x"}
    check_signature(None, signed, "2026-12-05T00:00:00+00:00", CheckpointKeys({"k": KEY.public_key()}, None))
    other = ed25519.Ed25519PrivateKey.generate().public_key()
    with pytest.raises(EvidenceError) as refused:  # the check that passed is one that can fail
        check_signature(None, signed, "2026-12-05T00:00:00+00:00", CheckpointKeys({"k": other}, None))
    assert refused.value.code == "PACKAGE_INDEX_SIGNATURE_INVALID"


def test_export_refuses_an_index_its_verifier_would_not_read(monkeypatch):
    files = _files(3_000)
    monkeypatch.setattr(package_index, "INDEX_MAX_BYTES", len(sign_index({}, files, KEY, "k")) - 1)
    with pytest.raises(EvidenceError) as refused:
        sign_index({}, files, KEY, "k")
    assert refused.value.code == "PACKAGE_TOO_LARGE" and "3000 files" in refused.value.message
    with pytest.raises(EvidenceError) as unread:  # and past the bound a reader refuses what it is handed
        parse_signed_index(b" " * (package_index.INDEX_MAX_BYTES + 1))
    assert unread.value.code == "PACKAGE_INVALID"
