"""The signed request: what an actor's client sends for a privileged action, and what the ledger stores with it.

A request is one JSON object, serialized canonically (keys sorted, no whitespace, UTF-8, strings unescaped; what
``json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`` writes):

    {"action": "job.replay", "actor": "alice", "args": {...}, "key_id": "<64 hex>", "nonce": "<16-64 of
     A-Z a-z 0-9 _ ->", "time": "2026-05-01T12:00:00Z", "tenant": "acme-books"}

``tenant`` only for an action on one tenant; ``key_id`` is the SHA-256 of the raw 32-byte Ed25519 public key, in
full (64 hex digits); ``time`` is UTC to the second. The client sends it in a DSSE envelope:

    {"payloadType": ACTION_PAYLOAD_TYPE, "payload": <base64 of that text>,
     "signatures": [{"keyid": <the key_id>, "sig": <base64 Ed25519 signature>}]}

The signature is over the DSSE pre-authentication encoding of the text with the payload type ACTION_PAYLOAD_TYPE, so
no signature made for anything else (a statement, a checkpoint) can pass for a request. The key is named outside
the signed bytes: the service selects the registered key by ``keyid`` and verifies the signature over the payload
bytes before it parses them (``Sealed``); the text's own key_id must then be the same. The text is kept as sent: the
ledger stores exactly the bytes that were signed.

Before this form, the envelope was ``{"request": <that text>, "signature": <base64>}`` (the same signature bytes):
the key id sat inside the signed text, which had to be parsed to find the key. Ledgers are append-only and keep the
events recorded then, so their re-check (offline.py) still reads that form (``legacy``); no door accepts it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timezone

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from evidence_pipeline import jsonread
from evidence_pipeline.canonical import canonical_json, legacy_ascii_json_for_ids
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.models import TENANT_ID
from evidence_pipeline.signing.dsse import pae

ACTION_PAYLOAD_TYPE = "application/vnd.evidence-pipeline.action.v1+json"
MAX_ENVELOPE_BYTES = 64 << 10  # a request is a few hundred bytes; its args name ids, never documents
ACTOR_NAME = TENANT_ID  # actor names are slugs, like tenant ids: they reach ledger columns and key file names
_FIELDS = frozenset({"action", "actor", "args", "key_id", "nonce", "time"})
_ENVELOPE_FIELDS = frozenset({"payloadType", "payload", "signatures"})
_LEGACY_FIELDS = frozenset({"request", "signature"})
_KEY_ID = re.compile(r"^[0-9a-f]{64}$")
_NONCE = re.compile(r"^[A-Za-z0-9_-]{16,64}$")
_TIME = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$")
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def key_id(public_key: ed25519.Ed25519PublicKey) -> str:
    return hashlib.sha256(raw_public_key(public_key)).hexdigest()


def raw_public_key(public_key: ed25519.Ed25519PublicKey) -> bytes:
    return public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def public_key_from_hex(text: object) -> ed25519.Ed25519PublicKey:
    """The Ed25519 public key written as 64 hex digits (how args and events carry keys)."""
    try:
        if not isinstance(text, str) or len(text) != 64:
            raise ValueError
        return ed25519.Ed25519PublicKey.from_public_bytes(bytes.fromhex(text))
    except ValueError:
        raise EvidenceError(
            ReasonCode.ACTION_REQUEST_INVALID, "a public key is the raw Ed25519 key in 64 hex digits"
        ) from None


def request_time(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime(_TIME_FORMAT)


def parse_time(text: str) -> datetime:
    """A request's time, or an event's `recorded_at` / a key's `valid_from` (ISO 8601 with an offset)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(timezone.utc)


def digest(raw: object) -> str:
    """What a refusal records of a request it could not authenticate: the SHA-256 of the bytes as received (of
    their ASCII-escaped canonical JSON when they arrived parsed), never the content."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogatepass")
    if not isinstance(raw, bytes):
        try:
            raw = legacy_ascii_json_for_ids(raw)
        except (TypeError, ValueError):
            raw = repr(type(raw)).encode()  # not JSON at all: nothing of it is worth a digest
    return hashlib.sha256(raw).hexdigest()


@dataclass(frozen=True)
class SignedRequest:
    """A request whose signature verified (``Sealed.opened``), or one read back from the ledger (``recorded``)."""

    text: str  # the request as signed
    signature: bytes
    body: dict  # the request's fields

    @property
    def action(self) -> str:
        return self.body["action"]

    @property
    def actor(self) -> str:
        return self.body["actor"]

    @property
    def key_id(self) -> str:
        return self.body["key_id"]

    @property
    def args(self) -> dict:
        return self.body["args"]

    @property
    def nonce(self) -> str:
        return self.body["nonce"]

    @property
    def tenant(self) -> str | None:
        return self.body.get("tenant")

    @property
    def time(self) -> datetime:
        return parse_time(self.body["time"])

    @property
    def envelope(self) -> dict:
        """The envelope as the ledger stores it with the action's event (always the DSSE form)."""
        return envelope_of(self.text, self.key_id, self.signature)


@dataclass(frozen=True)
class Sealed:
    """An envelope as received: its payload not parsed, its signature not verified. The key that signed it is named
    outside the signed bytes, so the signature is checked before anything of the request is read."""

    payload: bytes
    key_id: str
    signature: bytes

    def verifies(self, public_key: ed25519.Ed25519PublicKey) -> bool:
        try:
            public_key.verify(self.signature, pae(ACTION_PAYLOAD_TYPE, self.payload))
        except InvalidSignature:
            return False
        return True

    def opened(self) -> SignedRequest:
        """The request, parsed: call it once ``verifies`` held. Its key_id is the one the envelope names."""
        try:
            text = self.payload.decode("utf-8")
        except UnicodeDecodeError:
            raise EvidenceError(ReasonCode.ACTION_REQUEST_INVALID, "a request is UTF-8 text") from None
        body = parse_request(text)
        if body["key_id"] != self.key_id:
            raise EvidenceError(ReasonCode.ACTION_REQUEST_INVALID, "the request names another key than its envelope")
        return SignedRequest(text, self.signature, body)


def envelope_of(text: str, key_id_: str, signature: bytes) -> dict:
    return {
        "payloadType": ACTION_PAYLOAD_TYPE,
        "payload": base64.b64encode(text.encode("utf-8")).decode(),
        "signatures": [{"keyid": key_id_, "sig": base64.b64encode(signature).decode()}],
    }


def sign_request(
    key: ed25519.Ed25519PrivateKey,
    actor: str,
    action: str,
    *,
    args: dict,
    tenant: str | None = None,
    now: datetime | None = None,
    nonce: str | None = None,
) -> dict:
    """The envelope of ``action`` with ``args``, by ``actor``, signed with ``key`` (a fresh nonce, the time now)."""
    signer = key_id(key.public_key())
    body = {
        "action": str(action),
        "actor": actor,
        "args": args,
        "key_id": signer,
        "nonce": nonce or secrets.token_urlsafe(24),
        "time": request_time(now or datetime.now(timezone.utc)),
    }
    if tenant is not None:
        body["tenant"] = tenant
    text = canonical_json(body).decode("utf-8")
    parse_request(text)  # a client never signs what the service would refuse to read
    return envelope_of(text, signer, key.sign(pae(ACTION_PAYLOAD_TYPE, text.encode())))


def sealed(raw: object, legacy: bool = False) -> Sealed:
    """The envelope as received (its JSON text or bytes, or the object already parsed), payload unread:
    ACTION_UNSIGNED when there is none or it carries no signature, ACTION_REQUEST_INVALID when it is not an envelope
    of ACTION_PAYLOAD_TYPE with one signature, ACTION_SIGNATURE_INVALID when that is not an Ed25519 signature.
    ``legacy`` also reads the form requests had before (``{"request", "signature"}``, the key id inside the signed
    text, which must be parsed to find it): ledgers keep the events recorded then, and their re-check reads them."""
    if raw is None or raw == "" or raw == b"":
        raise EvidenceError(ReasonCode.ACTION_UNSIGNED, "the action needs a signed request")
    if isinstance(raw, (str, bytes)):
        raw = jsonread.loads(raw, ReasonCode.ACTION_REQUEST_INVALID, "a signed request", MAX_ENVELOPE_BYTES)
    if isinstance(raw, dict) and raw.keys() <= _LEGACY_FIELDS and raw:
        if legacy:
            return _legacy(raw)
        raise EvidenceError(
            ReasonCode.ACTION_REQUEST_INVALID,
            "the {request, signature} form is read only from ledgers: send the DSSE envelope",
        )
    if isinstance(raw, dict) and raw.keys() <= _ENVELOPE_FIELDS and not raw.get("signatures"):
        raise EvidenceError(ReasonCode.ACTION_UNSIGNED, "the request carries no signature")
    if not isinstance(raw, dict) or raw.keys() != _ENVELOPE_FIELDS:
        raise EvidenceError(ReasonCode.ACTION_REQUEST_INVALID, "an envelope is {payloadType, payload, signatures}")
    if raw["payloadType"] != ACTION_PAYLOAD_TYPE:
        raise EvidenceError(ReasonCode.ACTION_REQUEST_INVALID, f"an envelope's payloadType is {ACTION_PAYLOAD_TYPE}")
    signatures = raw["signatures"]
    if (
        not isinstance(signatures, list)
        or len(signatures) != 1
        or not isinstance(signatures[0], dict)
        or signatures[0].keys() != {"keyid", "sig"}
        or not isinstance(signatures[0]["keyid"], str)
        or not _KEY_ID.fullmatch(signatures[0]["keyid"])
    ):
        raise EvidenceError(
            ReasonCode.ACTION_REQUEST_INVALID, "an envelope has one signature {keyid: 64 hex digits, sig}"
        )
    payload = _base64(raw["payload"], ReasonCode.ACTION_REQUEST_INVALID, "the payload")
    return Sealed(payload, signatures[0]["keyid"], _signature(signatures[0]["sig"]))


def recorded(raw: object) -> SignedRequest:
    """The request stored with a ledger event, in either form, read without checking its signature: for readers of
    what the re-check (offline.py) verifies."""
    return sealed(raw, legacy=True).opened()


def _legacy(raw: dict) -> Sealed:
    if not raw.get("signature"):
        raise EvidenceError(ReasonCode.ACTION_UNSIGNED, "the request carries no signature")
    text, signature = raw.get("request"), raw["signature"]
    if not isinstance(text, str) or not isinstance(signature, str):
        raise EvidenceError(ReasonCode.ACTION_REQUEST_INVALID, "an envelope's request and signature are strings")
    return Sealed(text.encode("utf-8", "surrogatepass"), parse_request(text)["key_id"], _signature(signature))


def _signature(text: object) -> bytes:
    signature = _base64(text, ReasonCode.ACTION_SIGNATURE_INVALID, "the signature")
    if len(signature) != 64:
        raise EvidenceError(ReasonCode.ACTION_SIGNATURE_INVALID, "the signature is not an Ed25519 signature")
    return signature


def _base64(text: object, code: ReasonCode, what: str) -> bytes:
    try:
        if not isinstance(text, str):
            raise ValueError
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise EvidenceError(code, f"{what} is not base64") from None


def parse_request(text: str) -> dict:
    """The request's fields, checked against the format (module docstring)."""
    body = jsonread.loads(text, ReasonCode.ACTION_REQUEST_INVALID, "a signed request", MAX_ENVELOPE_BYTES)
    if not isinstance(body, dict) or not (_FIELDS <= body.keys() <= _FIELDS | {"tenant"}):
        raise EvidenceError(
            ReasonCode.ACTION_REQUEST_INVALID,
            f"a request has the fields {', '.join(sorted(_FIELDS))} and, optionally, tenant",
        )
    try:
        canonical = canonical_json(body).decode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: not text that can be signed as UTF-8
        canonical = None
    if canonical != text:
        raise EvidenceError(ReasonCode.ACTION_REQUEST_INVALID, "a request is serialized canonically, in UTF-8")
    checks = (
        (isinstance(body["action"], str) and body["action"], "action is a non-empty string"),
        (isinstance(body["actor"], str) and ACTOR_NAME.fullmatch(body["actor"]), "actor is a slug"),
        (isinstance(body["args"], dict), "args is an object"),
        (isinstance(body["key_id"], str) and _KEY_ID.fullmatch(body["key_id"]), "key_id is 64 hex digits"),
        (isinstance(body["nonce"], str) and _NONCE.fullmatch(body["nonce"]), "nonce is 16-64 of A-Z a-z 0-9 _ -"),
        (isinstance(body["time"], str) and _TIME.fullmatch(body["time"]), "time is YYYY-MM-DDTHH:MM:SSZ"),
        (
            "tenant" not in body or (isinstance(body["tenant"], str) and TENANT_ID.fullmatch(body["tenant"])),
            "tenant is a tenant id",
        ),
    )
    for holds, rule in checks:
        if not holds:
            raise EvidenceError(ReasonCode.ACTION_REQUEST_INVALID, f"in a request, {rule}")
    try:
        parse_time(body["time"])
    except ValueError:
        raise EvidenceError(ReasonCode.ACTION_REQUEST_INVALID, "in a request, time is not a date") from None
    return body
