"""Signed checkpoints of the ledger's Merkle tree, published put-once outside the database.

A checkpoint is (size, root) of the RFC 9162 tree over every audit event's canonical bytes, in a DSSE envelope
signed with the statement key. Rewriting, deleting, reordering or re-chaining any event below a published
checkpoint changes its root; consecutive checkpoints must be consistent (append-only growth).
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

from cryptography.hazmat.primitives.asymmetric import ed25519

from evidence_pipeline import jsonread
from evidence_pipeline.bundle import MANIFEST, REPORT, STATEMENT, build_manifest
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.ledger import Ledger, merkle
from evidence_pipeline.models import EventType
from evidence_pipeline.signing import dsse
from evidence_pipeline.signing.keyring_document import (
    SignatureTimes,
    check_key_at,
    keyring_documents,
    parse_time,
    read_published_keyring,
)
from evidence_pipeline.signing.keys import Keyring, published_statement_keys
from evidence_pipeline.store import DISCARD, ArtifactStore

PAYLOAD_TYPE = "application/vnd.evidence-pipeline.checkpoint+json"
PREFIX = "ledger/checkpoints"
ORIGIN = "evidence_pipeline audit ledger"


def checkpoint_key(size: int) -> str:
    return f"{PREFIX}/{size:012d}.json"


def publish_checkpoint(ledger: Ledger, archive: ArtifactStore, keyring: Keyring) -> dict:
    """Sign and publish the current tree head; a head that is already checkpointed is returned as it is."""
    leaves = [leaf for _, leaf in ledger.leaves()]
    if not leaves:
        raise EvidenceError(ReasonCode.LEDGER_NOT_CHECKPOINTED, "the ledger is empty")
    key = checkpoint_key(len(leaves))
    if archive.exists(key):
        return read_checkpoint(archive, key, published_statement_keys(archive))
    body = {
        "origin": ORIGIN, "size": len(leaves), "root_sha256": merkle.root(leaves).hex(),
        "issued_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "key_id": keyring.statement_key_id,
    }
    envelope = dsse.sign_envelope(
        dsse.canonical_json(body), keyring.statement_key, keyring.statement_key_id, PAYLOAD_TYPE
    )
    try:
        archive.put_once(key, envelope)
    except EvidenceError as error:
        if error.code != ReasonCode.STORE_CONFLICT:  # a concurrent checkpointer published this size first: use theirs
            raise
    return read_checkpoint(archive, key, published_statement_keys(archive))


def read_checkpoint(archive: ArtifactStore, key: str, keys: dict[str, ed25519.Ed25519PublicKey]) -> dict:
    opened = dsse.verify_envelope(
        archive.get(key, max_bytes=jsonread.MAX_BYTES), keys, PAYLOAD_TYPE, code=ReasonCode.LEDGER_INVALID
    )
    body = jsonread.loads(opened.payload, ReasonCode.LEDGER_INVALID, f"checkpoint {key}")
    try:
        described = (
            isinstance(body, dict)
            and body.get("origin") == ORIGIN
            and (body.get("key_id"),) == opened.key_ids
            and type(body["size"]) is int
            and checkpoint_key(body["size"]) == key
        )
        described = described and len(bytes.fromhex(body["root_sha256"])) == 32
    except (ValueError, KeyError, TypeError):
        described = False
    if not described:
        raise EvidenceError(ReasonCode.LEDGER_INVALID, f"checkpoint {key} does not describe this ledger at its size")
    return body


def verify_ledger(ledger: Ledger, archive: ArtifactStore) -> dict:
    """Recompute the chain, every published checkpoint's root and the consistency between checkpoints."""
    events = ledger.verify_chain()
    leaves = [leaf for _, leaf in ledger.leaves()]
    # Checkpoints signed by a key that was rotated out since still verify: retired keys stay published. Where the
    # archive holds a keyring, each checkpoint's key must be listed in it, valid when it was issued and not revoked.
    keyring = read_published_keyring(archive) if keyring_documents(archive) else None
    keys = keyring.statement_keys() if keyring else published_statement_keys(archive)
    previous = None
    checked = []
    for key in _checkpoint_keys(archive):
        try:
            checkpoint = read_checkpoint(archive, key, keys)
            if keyring is not None:
                issued = SignatureTimes(made=(parse_time(checkpoint.get("issued_at"), "issued_at"),))
                check_key_at(keyring, checkpoint["key_id"], issued, "checkpoint key")
        except (ValueError, TypeError):
            raise EvidenceError(ReasonCode.LEDGER_INVALID, f"checkpoint {key} has no valid issued_at") from None
        except EvidenceError as error:
            raise EvidenceError(ReasonCode.LEDGER_INVALID, f"checkpoint {key} does not verify ({error.code})") from None
        size, signed_root = checkpoint["size"], bytes.fromhex(checkpoint["root_sha256"])
        if size > len(leaves) or merkle.root(leaves[:size]) != signed_root:
            raise EvidenceError(
                ReasonCode.LEDGER_INVALID, f"the ledger's first {size} events differ from signed checkpoint {key}"
            )
        if previous is not None:
            proof = merkle.consistency_proof(previous[0], leaves[:size])
            if not merkle.verify_consistency(previous[0], size, proof, previous[1], signed_root):
                raise EvidenceError(
                    ReasonCode.LEDGER_INVALID, f"checkpoint {key} is not an append-only extension of the last"
                )
        previous = (size, signed_root)
        checked.append(size)
    return {"events": events, "checkpoints": checked, "unchecked_tail": len(leaves) - (checked[-1] if checked else 0)}


def prove_bundle(ledger: Ledger, archive: ArtifactStore, prefix: str) -> dict:
    """The inclusion proof of the `bundle.published` event of the bundle at ``prefix``. The ledger vouches for the
    whole manifest: it must be exactly the manifest that event derives, and the files the ones it committed."""
    manifest = jsonread.loads(
        archive.get(f"{prefix}/{MANIFEST}", max_bytes=jsonread.MAX_BYTES), ReasonCode.MANIFEST_INVALID, "manifest.json"
    )
    try:
        seq = manifest["ledger"]["seq"]
    except (KeyError, TypeError):
        raise EvidenceError(ReasonCode.MANIFEST_INVALID, "the manifest does not name a ledger position") from None
    event = ledger.event_or_none(seq) if type(seq) is int else None
    expected = {
        "identity": prefix.rsplit("/", 1)[-1],  # the files are hashed as they stream, never held
        "report_sha256": archive.get_file(f"{prefix}/{REPORT}", DISCARD),
        "statement_sha256": archive.get_file(f"{prefix}/{STATEMENT}", DISCARD),
    }
    if (
        event is None
        or event.event_type != EventType.BUNDLE_PUBLISHED
        or any(event.body["details"].get(name) != value for name, value in expected.items())
        or jsonread.loads(build_manifest(event), ReasonCode.LEDGER_INVALID, "the derived manifest") != manifest
    ):
        raise EvidenceError(ReasonCode.LEDGER_INVALID, "the ledger holds no publication event for this bundle's files")
    return prove_inclusion(ledger, archive, seq)


def prove_inclusion(ledger: Ledger, archive: ArtifactStore, seq: int) -> dict:
    """The inclusion proof of event ``seq`` in the newest checkpoint that covers it, verified before returning."""
    numbered = ledger.leaves()
    order, leaves = [s for s, _ in numbered], [leaf for _, leaf in numbered]
    if seq not in order:
        raise EvidenceError(ReasonCode.LEDGER_INVALID, f"event {seq} is not in the ledger")
    index = order.index(seq)
    keys = published_statement_keys(archive)
    covering = [k for k in _checkpoint_keys(archive) if int(k.rsplit("/", 1)[-1][:12]) > index]
    if not covering:
        raise EvidenceError(ReasonCode.LEDGER_NOT_CHECKPOINTED, "no published checkpoint covers this event yet")
    checkpoint = read_checkpoint(archive, covering[-1], keys)
    size = checkpoint["size"]
    proof = merkle.inclusion_proof(index, leaves[:size])
    if not merkle.verify_inclusion(index, size, leaves[index], proof, bytes.fromhex(checkpoint["root_sha256"])):
        raise EvidenceError(ReasonCode.LEDGER_INVALID, "the inclusion proof does not reach the signed checkpoint root")
    return {
        "leaf_index": index,
        "tree_size": size,
        "leaf_hash": leaves[index].hex(),
        "event_seq": seq,
        "proof": [p.hex() for p in proof],
        "checkpoint": covering[-1],
        "root_sha256": checkpoint["root_sha256"],
    }


def _checkpoint_keys(archive: ArtifactStore) -> list[str]:
    """Published checkpoint keys, oldest first; anything else in the folder is not a checkpoint."""
    return [key for key in archive.list(PREFIX) if re.fullmatch(rf"{PREFIX}/\d{{12}}\.json", key)]
