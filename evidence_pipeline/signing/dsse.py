"""DSSE envelopes carrying in-toto Statement v1, signed with Ed25519 (deterministic signatures)."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from cryptography.exceptions import InvalidSignature

from evidence_pipeline import jsonread
from evidence_pipeline.canonical import canonical_json as canonical_json  # what a payload is (callers sign it)
from evidence_pipeline.errors import EvidenceError, ReasonCode

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://evidence-pipeline.dev/monthly-evidence/v1"
_ENVELOPE_FIELDS = {"payload", "payloadType", "signatures"}


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE pre-authentication encoding: what is actually signed."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(payload), payload)


def subject(name: str, sha256: str) -> list[dict[str, Any]]:
    return [{"name": name, "digest": {"sha256": sha256}}]


def statement(
    subject_name: str, subject_sha256: str, predicate: dict[str, Any], predicate_type: str = PREDICATE_TYPE
) -> dict[str, Any]:
    return {
        "_type": STATEMENT_TYPE,
        "subject": subject(subject_name, subject_sha256),
        "predicateType": predicate_type,
        "predicate": predicate,
    }


class SigningKey(Protocol):
    """What signs an envelope: an Ed25519 private key, or another key behind the same method (the trust root's)."""

    def sign(self, data: bytes, /) -> bytes: ...


class VerifyingKey(Protocol):
    """What verifies an envelope's signature: an Ed25519 public key, or another key behind the same method."""

    def verify(self, signature: bytes, data: bytes, /) -> None: ...


def sign_envelope(payload: bytes, key: SigningKey, key_id: str, payload_type: str = PAYLOAD_TYPE) -> bytes:
    return sign_envelope_by(payload, [(key, key_id)], payload_type)


def sign_envelope_by(payload: bytes, signers: Sequence[tuple[SigningKey, str]], payload_type: str) -> bytes:
    """One envelope signed by every (key, key id) of ``signers``, in that order (a checkpoint and its witness)."""
    signed = pae(payload_type, payload)
    envelope = {
        "payload": base64.b64encode(payload).decode(),
        "payloadType": payload_type,
        "signatures": [
            {"keyid": key_id, "sig": base64.b64encode(key.sign(signed)).decode()} for key, key_id in signers
        ],
    }
    return json.dumps(envelope, indent=2, sort_keys=True).encode() + b"\n"


@dataclass(frozen=True)
class Opened:
    """A verified envelope's payload and the ids of the keys whose signatures verified it."""

    payload: bytes
    key_ids: tuple[str, ...]


@dataclass(frozen=True)
class Envelope:
    """A parsed, not yet verified, DSSE envelope."""

    payload_type: str
    payload: bytes
    signatures: list[tuple[str, bytes]]  # (keyid, signature), as the envelope lists them

    def verifies(self, key_id: str, public_key: VerifyingKey) -> bool | None:
        """Whether the signatures that name ``key_id`` verify with ``public_key``: None when none names it."""
        named = [sig for signer, sig in self.signatures if signer == key_id]
        if not named:
            return None
        try:
            for sig in named:
                public_key.verify(sig, pae(self.payload_type, self.payload))
        except InvalidSignature:
            return False
        return True

    def opened(
        self, public_keys: Mapping[str, VerifyingKey], payload_type: str, code: str = ReasonCode.STATEMENT_INVALID
    ) -> Opened:
        """The payload bytes, unparsed, once every signature by a key of ``public_keys`` verified over them
        (verify_envelope)."""
        if self.payload_type != payload_type or not self.signatures:
            raise EvidenceError(code, "DSSE envelope has the wrong payload type or no signature")
        known = sorted({key_id for key_id, _ in self.signatures if key_id in public_keys})
        if not known:
            raise EvidenceError(ReasonCode.KEY_UNKNOWN, "no DSSE signature is by a published key")
        for key_id in known:
            if not self.verifies(key_id, public_keys[key_id]):
                raise EvidenceError(
                    ReasonCode.STATEMENT_SIGNATURE_INVALID, f"DSSE signature by {key_id} does not verify"
                )
        return Opened(self.payload, tuple(known))


def parse_envelope(
    data: bytes, code: str = ReasonCode.STATEMENT_INVALID, max_bytes: int = jsonread.MAX_BYTES
) -> Envelope:
    """The fields of a DSSE envelope of at most ``max_bytes``; a malformed one raises ``code``."""
    return envelope_fields(jsonread.loads(data, code, "the DSSE envelope", max_bytes), code)


def envelope_fields(envelope: object, code: str = ReasonCode.STATEMENT_INVALID) -> Envelope:
    """The fields of an envelope already read as JSON (its payload bytes are not parsed)."""
    try:
        if not isinstance(envelope, dict) or envelope.keys() != _ENVELOPE_FIELDS:
            raise ValueError("not an envelope")
        payload = base64.b64decode(envelope["payload"], validate=True)
        envelope_type = envelope["payloadType"]
        signatures = [
            (_signature_fields(s)["keyid"], base64.b64decode(s["sig"], validate=True)) for s in envelope["signatures"]
        ]
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise EvidenceError(code, "not a DSSE envelope") from None
    if not isinstance(envelope_type, str):
        raise EvidenceError(code, "not a DSSE envelope")
    return Envelope(envelope_type, payload, signatures)


def verify_envelope(
    data: bytes,
    public_keys: Mapping[str, VerifyingKey],
    payload_type: str,
    code: str = ReasonCode.STATEMENT_INVALID,
    max_bytes: int = jsonread.MAX_BYTES,
) -> Opened:
    """Verify a DSSE envelope of ``payload_type`` (at most ``max_bytes``) against known keys; malformed envelopes
    raise ``code``. Signatures by keys that are not in ``public_keys`` (a checkpoint's witness) are left alone."""
    return parse_envelope(data, code, max_bytes).opened(public_keys, payload_type, code)


def _signature_fields(signature: object) -> dict[str, Any]:
    if (
        not isinstance(signature, dict)
        or signature.keys() != {"keyid", "sig"}
        or not isinstance(signature["keyid"], str)
    ):
        raise ValueError("not a DSSE signature")
    return signature


def open_statement(data: bytes, public_keys: Mapping[str, VerifyingKey]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Verify a DSSE envelope against known keys; return its in-toto statement and the ids of the verifying keys."""
    opened = verify_envelope(data, public_keys, PAYLOAD_TYPE)
    body = jsonread.loads(opened.payload, ReasonCode.STATEMENT_INVALID, "the DSSE payload")
    if (
        not isinstance(body, dict)
        or body.get("_type") != STATEMENT_TYPE
        or body.get("predicateType") != PREDICATE_TYPE
        or not isinstance(body.get("predicate"), dict)
    ):
        raise EvidenceError(
            ReasonCode.STATEMENT_INVALID, "payload is not an in-toto Statement v1 of our predicate type"
        )
    return body, opened.key_ids
