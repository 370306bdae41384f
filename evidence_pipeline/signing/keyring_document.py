"""The keyring document: which signing keys the trust root vouches for, when, and in which state.

Published put-once as ``keys/keyring-<sequence:06d>.json`` in the archive, a DSSE envelope (payload type
``application/vnd.evidence-pipeline.keyring+json``) signed with the trust root's private key, the root whose
certificate is published as ``keys/x509-root-<id>.pem`` and whose id the verifier pins (``--root-id``). Every
rotation or revocation publishes the next sequence; the newest one is the whole truth, older ones stay as history.

Payload (canonical JSON)::

    {"schema": "evidence-keyring/v1", "sequence": 2, "issued_at": "…", "trust_root_id": "x509-root-…",
     "previous_sha256": "<sha256 of keyring-000001.json>" | null,
     "generations": [{"generation": 1, "statement_key_id": "ed25519-…", "statement_public_key": "<32 bytes hex>",
                      "signer_certificate_id": "x509-signer-…", "not_before": "…", "not_after": "…" | null,
                      "status": "active" | "retired" | "revoked", "revoked_at": "…" | null,
                      "revocation_reason": "…" | null}, …]}

Times are UTC, ISO 8601 with milliseconds. A generation's window is [not_before, not_after] (not_after null while it
is active); exactly one generation is active. This module is what an auditor needs and nothing else: it imports
neither the ledger nor the pipeline (`evidence verify` loads it).

Over 400 lines because an auditor loads this one module: the format, its signing and its verification
travel together."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPrivateKeyTypes, CertificatePublicKeyTypes

from evidence_pipeline import jsonread
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.signing import dsse
from evidence_pipeline.signing.keys import MAX_KEY_BYTES, certificate_id, public_key_id
from evidence_pipeline.store import ArtifactStore

PAYLOAD_TYPE = "application/vnd.evidence-pipeline.keyring+json"
SCHEMA = "evidence-keyring/v1"
ACTIVE, RETIRED, REVOKED = "active", "retired", "revoked"
_NAME = re.compile(r"keys/keyring-([0-9]{6,})\.json")
# A time stamp is taken after the signature it stamps: a signature made just before its key was retired gets a time
# stamp a little later. Retirement (not revocation) tolerates that much between the two.
RETIREMENT_GRACE = timedelta(minutes=10)
_SECOND = timedelta(seconds=1)
_GENERATION_FIELDS = {
    "generation",
    "statement_key_id",
    "statement_public_key",
    "signer_certificate_id",
    "not_before",
    "not_after",
    "status",
    "revoked_at",
    "revocation_reason",
}
_FIELDS = {"schema", "sequence", "issued_at", "trust_root_id", "previous_sha256", "generations"}


def keyring_key(sequence: int) -> str:
    return f"keys/keyring-{sequence:06d}.json"


def timestamp(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat(timespec="milliseconds")


def parse_time(value: object, what: str = "a time") -> datetime:
    if not isinstance(value, str):
        raise ValueError(f"{what} is not a time")
    moment = datetime.fromisoformat(value)
    if moment.tzinfo is None:
        raise ValueError(f"{what} names no UTC offset")
    return moment


@dataclass(frozen=True)
class Generation:
    """One generation of signing keys: a statement key and a PAdES signer certificate that live and die together."""

    generation: int
    statement_key_id: str
    statement_public_key: str  # raw Ed25519 public key, hex
    signer_certificate_id: str
    not_before: datetime
    not_after: datetime | None = None
    status: str = ACTIVE
    revoked_at: datetime | None = None
    revocation_reason: str | None = None

    @property
    def key_ids(self) -> tuple[str, str]:
        return self.statement_key_id, self.signer_certificate_id

    def public_key(self) -> ed25519.Ed25519PublicKey:
        return ed25519.Ed25519PublicKey.from_public_bytes(bytes.fromhex(self.statement_public_key))

    def as_dict(self) -> dict[str, Any]:
        return {
            "generation": self.generation,
            "statement_key_id": self.statement_key_id,
            "statement_public_key": self.statement_public_key,
            "signer_certificate_id": self.signer_certificate_id,
            "not_before": timestamp(self.not_before),
            "not_after": timestamp(self.not_after) if self.not_after else None,
            "status": self.status,
            "revoked_at": timestamp(self.revoked_at) if self.revoked_at else None,
            "revocation_reason": self.revocation_reason,
        }

    @classmethod
    def from_dict(cls, entry: object) -> Generation:
        if not isinstance(entry, dict) or entry.keys() != _GENERATION_FIELDS:
            raise ValueError("a generation has other fields than the schema's")
        generation = cls(
            generation=entry["generation"],
            statement_key_id=entry["statement_key_id"],
            statement_public_key=entry["statement_public_key"],
            signer_certificate_id=entry["signer_certificate_id"],
            not_before=parse_time(entry["not_before"]),
            not_after=None if entry["not_after"] is None else parse_time(entry["not_after"]),
            status=entry["status"],
            revoked_at=None if entry["revoked_at"] is None else parse_time(entry["revoked_at"]),
            revocation_reason=entry["revocation_reason"],
        )
        public = bytes.fromhex(generation.statement_public_key)
        checks = (
            type(generation.generation) is int and generation.generation >= 1,
            len(public) == 32 and public_key_id(generation.public_key()) == generation.statement_key_id,
            re.fullmatch(r"x509-signer-[0-9a-f]{16}", str(generation.signer_certificate_id)) is not None,
            generation.status in (ACTIVE, RETIRED, REVOKED),
            (generation.not_after is None) == (generation.status == ACTIVE),
            generation.not_after is None or generation.not_after >= generation.not_before,
            (generation.status == REVOKED)
            == (generation.revoked_at is not None)
            == isinstance(generation.revocation_reason, str),
        )
        if not all(checks):
            raise ValueError(f"generation {entry['generation']} is not consistent")
        return generation


@dataclass(frozen=True)
class KeyringDocument:
    sequence: int
    issued_at: datetime
    trust_root_id: str
    previous_sha256: str | None
    generations: tuple[Generation, ...]

    @property
    def active(self) -> Generation:
        return next(g for g in self.generations if g.status == ACTIVE)

    def generation(self, number: int) -> Generation | None:
        return next((g for g in self.generations if g.generation == number), None)

    def find(self, key_id: str) -> Generation | None:
        """The generation that holds ``key_id`` (a statement key id or a signer certificate id)."""
        return next((g for g in self.generations if key_id in g.key_ids), None)

    def statement_keys(self, expected: frozenset[str] = frozenset()) -> dict[str, ed25519.Ed25519PublicKey]:
        """Every statement key the keyring lists (revoked ones too: the window check decides), by id."""
        return {
            g.statement_key_id: g.public_key()
            for g in self.generations
            if not expected or g.statement_key_id in expected
        }

    def payload(self) -> bytes:
        return dsse.canonical_json(
            {
                "schema": SCHEMA,
                "sequence": self.sequence,
                "issued_at": timestamp(self.issued_at),
                "trust_root_id": self.trust_root_id,
                "previous_sha256": self.previous_sha256,
                "generations": [g.as_dict() for g in self.generations],
            }
        )

    def sign(self, root_key: CertificateIssuerPrivateKeyTypes) -> bytes:
        """The DSSE envelope of this document, signed with the trust root's private key."""
        return dsse.sign_envelope(self.payload(), _RootKey(root_key), self.trust_root_id, PAYLOAD_TYPE)

    def next(self, issued_at: datetime, previous_envelope: bytes, generations: list[Generation]) -> KeyringDocument:
        return replace(
            self,
            sequence=self.sequence + 1,
            issued_at=issued_at,
            previous_sha256=hashlib.sha256(previous_envelope).hexdigest(),
            generations=tuple(generations),
        )

    @classmethod
    def from_payload(cls, payload: bytes) -> KeyringDocument:
        body = jsonread.loads(payload, ReasonCode.KEYRING_INVALID, "the keyring document")
        try:
            if not isinstance(body, dict) or body.keys() != _FIELDS or body["schema"] != SCHEMA:
                raise ValueError(f"not a {SCHEMA} document")
            document = cls(
                sequence=body["sequence"],
                issued_at=parse_time(body["issued_at"]),
                trust_root_id=body["trust_root_id"],
                previous_sha256=body["previous_sha256"],
                generations=tuple(Generation.from_dict(entry) for entry in body["generations"]),
            )
            numbers = [g.generation for g in document.generations]
            if (
                type(document.sequence) is not int
                or document.sequence < 1
                or numbers != list(range(1, len(numbers) + 1))
                or [g.status for g in document.generations].count(ACTIVE) != 1
                or not isinstance(document.trust_root_id, str)
                or not (document.previous_sha256 is None or re.fullmatch(r"[0-9a-f]{64}", document.previous_sha256))
            ):
                raise ValueError("its sequence, generations or active generation are not consistent")
        except (KeyError, TypeError, ValueError) as error:
            raise EvidenceError(ReasonCode.KEYRING_INVALID, f"the keyring document is malformed: {error}") from None
        return document


class _RootKey:
    """The trust root's private or public key behind the one-method interface dsse.py uses for Ed25519 keys: EC
    (ECDSA with SHA-256, or SHA-384 on curves of 384 bits and more), RSA (PKCS#1 v1.5, SHA-256) or Ed25519."""

    def __init__(self, key: CertificateIssuerPrivateKeyTypes | CertificatePublicKeyTypes):
        self._key = key

    def sign(self, data: bytes) -> bytes:
        key = self._key
        if isinstance(key, ec.EllipticCurvePrivateKey):
            return key.sign(data, _ecdsa(key.curve))
        if isinstance(key, rsa.RSAPrivateKey):
            return key.sign(data, padding.PKCS1v15(), hashes.SHA256())
        if isinstance(key, ed25519.Ed25519PrivateKey):
            return key.sign(data)
        raise _unsupported()

    def verify(self, signature: bytes, data: bytes) -> None:
        key = self._key
        if isinstance(key, ec.EllipticCurvePublicKey):
            key.verify(signature, data, _ecdsa(key.curve))
        elif isinstance(key, rsa.RSAPublicKey):
            key.verify(signature, data, padding.PKCS1v15(), hashes.SHA256())
        elif isinstance(key, ed25519.Ed25519PublicKey):
            key.verify(signature, data)
        else:
            raise _unsupported()


def _unsupported() -> EvidenceError:
    return EvidenceError(ReasonCode.KEY_MATERIAL_INVALID, "the trust root's key type cannot sign keyrings")


def _ecdsa(curve: ec.EllipticCurve) -> ec.ECDSA:
    return ec.ECDSA(hashes.SHA384() if curve.key_size >= 384 else hashes.SHA256())


def open_keyring(envelope: bytes, root: x509.Certificate, sequence: int | None = None) -> KeyringDocument:
    """The keyring document in ``envelope`` if the trust root ``root`` signed it (and it is the ``sequence`` its file
    name says); KEYRING_INVALID otherwise."""
    root_id = certificate_id(root)
    try:
        opened = dsse.verify_envelope(
            envelope, {root_id: _RootKey(root.public_key())}, PAYLOAD_TYPE, code=ReasonCode.KEYRING_INVALID
        )
    except EvidenceError as error:
        if error.code == ReasonCode.KEYRING_INVALID:
            raise
        raise EvidenceError(
            ReasonCode.KEYRING_INVALID, f"the keyring document is not signed by the trust root {root_id} ({error.code})"
        ) from None
    except InvalidSignature:  # a signature that is not even well-formed for the root's algorithm
        raise EvidenceError(
            ReasonCode.KEYRING_INVALID, f"the keyring document's signature by {root_id} does not verify"
        ) from None
    document = KeyringDocument.from_payload(opened.payload)
    if document.trust_root_id != root_id or (sequence is not None and document.sequence != sequence):
        raise EvidenceError(
            ReasonCode.KEYRING_INVALID,
            "the keyring document names another trust root or sequence than its signature and name",
        )
    return document


def keyring_documents(store: ArtifactStore) -> list[tuple[int, str]]:
    """(sequence, key) of every keyring document published under keys/, oldest first."""
    found = [(int(match[1]), key) for key in store.list("keys") if (match := _NAME.fullmatch(key))]
    return sorted(found)


def published_root(store: ArtifactStore, root_id: str, expected: frozenset[str]) -> x509.Certificate | None:
    """The trust root certificate published as keys/<root_id>.pem, if it is one (pinned, when ``expected``) and its
    bytes are the id's."""
    if not re.fullmatch(r"x509-root-[0-9a-f]{16}", root_id) or (expected and root_id not in expected):
        return None
    try:
        certificate = x509.load_pem_x509_certificate(store.get(f"keys/{root_id}.pem", max_bytes=MAX_KEY_BYTES))
    except (EvidenceError, ValueError) as error:
        if isinstance(error, EvidenceError) and error.code in (
            ReasonCode.STORE_UNAVAILABLE,
            ReasonCode.STORE_ACCESS_DENIED,
        ):
            raise
        return None
    return certificate if certificate_id(certificate) == root_id else None


def read_published_keyring(
    store: ArtifactStore, expected_roots: frozenset[str] = frozenset(), documents: list[tuple[int, str]] | None = None
) -> KeyringDocument:
    """The newest keyring document in the archive, which must be signed by a published (pinned) trust root.

    Only the newest counts: an older one may list a key as valid that a newer one revoked, so a newest document
    that does not verify is KEYRING_INVALID, never a reason to fall back to an older one."""
    documents = keyring_documents(store) if documents is None else documents
    if not documents:
        raise EvidenceError(
            ReasonCode.KEYRING_INVALID,
            "the archive holds no keyring document (keys/keyring-*.json) "
            "to vouch for its statement keys: pin them with --key-id",
        )
    sequence, key = documents[-1]
    envelope = store.get(key, max_bytes=jsonread.MAX_BYTES)
    for root_id in _signature_key_ids(envelope):
        root = published_root(store, root_id, expected_roots)
        if root is not None:
            return _open_cached(envelope, root, sequence)
    raise EvidenceError(
        ReasonCode.KEYRING_INVALID, f"{key} is not signed by a {'pinned' if expected_roots else 'published'} trust root"
    )


@lru_cache(maxsize=16)
def _open_cached(envelope: bytes, root: x509.Certificate, sequence: int) -> KeyringDocument:
    """Verifying many bundles of one archive opens its newest keyring once per process."""
    return open_keyring(envelope, root, sequence)


def _signature_key_ids(envelope: bytes) -> list[str]:
    """The key ids an envelope's signatures claim (unverified: they only say which root certificate to try)."""
    document = jsonread.loads(envelope, ReasonCode.KEYRING_INVALID, "the keyring document")
    try:
        if not isinstance(document, dict):
            raise TypeError("not an object")
        return [s["keyid"] for s in document["signatures"] if isinstance(s.get("keyid"), str)]
    except (KeyError, TypeError, AttributeError):
        raise EvidenceError(ReasonCode.KEYRING_INVALID, "the keyring document is not a DSSE envelope") from None


@dataclass(frozen=True)
class SignatureTimes:
    """When a signature was made, as far as the verifier can tell.

    ``selected``: the instant the signer chose the key, which it records (the statement's ``signed_at``): exact, so
    it must lie inside the window itself. ``made``: times taken after that choice, when the signature was made or
    already existed (the PDF's /M, its RFC 3161 signature time stamp, an older statement's ``completed_at``).
    ``after``: times the signature is known to have been made after (the statement signs the digest of the
    time-stamped report, so it is younger than the report's time stamp). Times in ``made`` and ``after`` may pass a
    retirement by RETIREMENT_GRACE, never a revocation."""

    selected: datetime | None = None
    made: tuple[datetime, ...] = ()
    after: tuple[datetime, ...] = ()


def check_key_at(document: KeyringDocument, key_id: str, times: SignatureTimes, what: str) -> Generation:
    """Raise unless the keyring lists ``key_id``, ``times`` fall inside its generation's validity window, and the
    signature was made before the generation's revocation, if any."""
    generation = document.find(key_id)
    if generation is None:
        raise EvidenceError(
            ReasonCode.KEY_UNKNOWN,
            f"the {what} {key_id} is not in keyring {document.sequence} of trust root {document.trust_root_id}",
        )
    label = f"the {what} {key_id} (generation {generation.generation})"
    every = ([times.selected] if times.selected else []) + list(times.made) + list(times.after)
    if generation.revoked_at is not None:
        late = [moment for moment in every if moment >= generation.revoked_at]
        if late:
            raise EvidenceError(
                ReasonCode.KEY_REVOKED,
                f"{label} was revoked at {timestamp(generation.revoked_at)} ({generation.revocation_reason}); "
                f"this signature is from {timestamp(max(late))}",
            )
    start, end = generation.not_before, generation.not_after
    outside = [moment for moment in [times.selected] if moment and not (start <= moment <= (end or moment))]
    outside += [moment for moment in times.made if moment < start - _SECOND]  # /M and genTime count whole seconds
    outside += [moment for moment in times.made + times.after if end is not None and moment > end + RETIREMENT_GRACE]
    if outside:
        window = f"{timestamp(start)} .. {timestamp(end) if end else 'now'}"
        raise EvidenceError(
            ReasonCode.KEY_NOT_VALID_AT_SIGNING_TIME,
            f"{label} is valid {window}; this signature is from {', '.join(timestamp(m) for m in outside)}",
        )
    return generation
