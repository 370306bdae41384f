"""An actor's own key file: generated once (0600, in an owner-only folder), loaded to sign with, never a service key.

The private key is an unencrypted PKCS#8 PEM that only its owner can read (production mounts it from a secret
store); the CLI takes it from ``--key FILE`` or EVIDENCE_ACTOR_KEY. The service's own Ed25519 keys (the statement
keys of every generation in EVIDENCE_KEYS_DIR, the witness key) are refused by their public key, wherever the file
lies; the service's PAdES keys are ECDSA, which no actor key can be. Where the keys directory is not on the machine
that signs, the service refuses them again when a key is registered (ActorAdmin's ``service_key_ids``).
"""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from evidence_pipeline.actors.requests import key_id, raw_public_key
from evidence_pipeline.config import Settings
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.paths import private_dirs
from evidence_pipeline.signing.keys import GENERATIONS, STATEMENT_KEY, load_private_ed25519
from evidence_pipeline.tempfiles import write_private


def generate_actor_key(path: Path, what: str = "an actor key") -> ed25519.Ed25519PrivateKey:
    """A new key written to ``path`` (created exclusively, 0600; its missing folders 0700); never overwrites one.
    ``what`` names the key in the message (a witness's key is made the same way)."""
    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    private_dirs(path.parent)
    try:
        write_private(path, pem)
    except FileExistsError:
        raise EvidenceError(ReasonCode.KEY_MATERIAL_INVALID, f"{what} file exists there already") from None
    return key


def load_actor_key(path: Path | None, settings: Settings) -> ed25519.Ed25519PrivateKey:
    """The actor's private key from ``path`` (``--key``), else EVIDENCE_ACTOR_KEY; a service key is refused."""
    path = path or settings.actor_key
    if path is None:
        raise EvidenceError(
            ReasonCode.ACTION_UNSIGNED, "a privileged action is signed: pass --key FILE or set EVIDENCE_ACTOR_KEY"
        )
    key = load_private_ed25519(path, "the actor key")
    if key_id(key.public_key()) in service_key_ids(settings):
        raise EvidenceError(ReasonCode.KEY_MATERIAL_INVALID, "the actor key is one of the service's own keys")
    return key


def service_key_ids(settings: Settings) -> frozenset[str]:
    """The actor-style key ids (keyfiles' and requests.key_id's) of the service's Ed25519 keys that this machine
    holds: the statement key of every generation and the witness key. Files it cannot read are passed over."""
    paths = [settings.keys_dir / STATEMENT_KEY, *sorted((settings.keys_dir / GENERATIONS).glob(f"*/{STATEMENT_KEY}"))]
    if settings.witness_key is not None:
        paths.append(settings.witness_key)
    ids = set()
    for path in paths:
        try:
            key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        except (OSError, ValueError, TypeError):
            continue
        if isinstance(key, ed25519.Ed25519PrivateKey):
            ids.add(key_id(key.public_key()))
    return frozenset(ids)


def public_hex(key: ed25519.Ed25519PrivateKey) -> str:
    """The public key as requests carry it (64 hex digits)."""
    return raw_public_key(key.public_key()).hex()
