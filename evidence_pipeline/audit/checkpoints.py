"""Signed checkpoints of the ledger's Merkle tree, published put-once outside the database.

A checkpoint is (size, root) of the RFC 9162 tree over every audit event's canonical bytes, in a DSSE envelope
signed with the statement key and, when EVIDENCE_WITNESS_KEY is set, co-signed by the witness key in the same
envelope. Rewriting, deleting, reordering or re-chaining any event below a published checkpoint changes its root;
consecutive checkpoints must be consistent (append-only growth).

Nothing here needs the database unless it is handed a Ledger: `evidence verify --package` reads checkpoints with
the same code and loads no SQLAlchemy.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from cryptography.hazmat.primitives.asymmetric import ed25519

from evidence_pipeline import jsonread
from evidence_pipeline.canonical import utc_iso
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.ledger import merkle
from evidence_pipeline.models import EventType, LedgerEvent, TenantMonth
from evidence_pipeline.monthly.bundle import MANIFEST, REPORT, STATEMENT, build_manifest, bundle_prefix
from evidence_pipeline.signing import dsse
from evidence_pipeline.signing.keyring_document import (
    KeyringDocument,
    SignatureTimes,
    check_key_at,
    keyring_documents,
    parse_time,
    read_published_keyring,
)
from evidence_pipeline.signing.keys import Keyring, public_key_id, public_pem, published_statement_keys
from evidence_pipeline.store import DISCARD, ArtifactStore

if TYPE_CHECKING:
    from evidence_pipeline.ledger import Ledger
    from evidence_pipeline.witness.policy import TlogPolicy

PAYLOAD_TYPE = "application/vnd.evidence-pipeline.checkpoint+json"
PREFIX = "ledger/checkpoints"
WITNESS_PREFIX = "ledger/witness"  # the witness's public key, for convenience only: verification never trusts it
ORIGIN = "evidence_pipeline audit ledger"


def checkpoint_key(size: int) -> str:
    return f"{PREFIX}/{size:012d}.json"


def publish_checkpoint(
    ledger: Ledger, archive: ArtifactStore, keyring: Keyring, witness: ed25519.Ed25519PrivateKey | None = None
) -> dict[str, Any]:
    """Sign and publish the current tree head; a head that is already checkpointed is returned as it is (put-once:
    a checkpoint published before a witness was configured never gets its signature).

    With ``witness``, the same envelope carries a second signature by the witness key, which co-signs only a head
    that extends the newest published checkpoint (the previous root is recomputed from the same events)."""
    leaves = [leaf for _, leaf in ledger.leaves()]
    if not leaves:
        raise EvidenceError(ReasonCode.LEDGER_NOT_CHECKPOINTED, "the ledger is empty")
    key = checkpoint_key(len(leaves))
    if archive.exists(key):
        return read_checkpoint(archive, key, published_statement_keys(archive))
    tree = merkle.Tree(leaves)
    body = {
        "origin": ORIGIN,
        "size": len(leaves),
        "root_sha256": tree.root(0, len(leaves)).hex(),
        "issued_at": utc_iso(timespec="seconds"),
        "key_id": keyring.statement_key_id,
    }
    signers = [(keyring.statement_key, keyring.statement_key_id)]
    if witness is not None:
        signers.append((witness, _witness_id(archive, tree, keyring, witness)))
    envelope = dsse.sign_envelope_by(dsse.canonical_json(body), signers, PAYLOAD_TYPE)
    try:
        archive.put_once(key, envelope)
    except EvidenceError as error:
        if error.code != ReasonCode.STORE_CONFLICT:  # a concurrent checkpointer published this size first: use theirs
            raise
    return read_checkpoint(archive, key, published_statement_keys(archive))


def _witness_id(archive: ArtifactStore, tree: merkle.Tree, keyring: Keyring, witness: ed25519.Ed25519PrivateKey) -> str:
    """The witness's key id, once it has checked that the new head extends the newest checkpoint; its public key is
    published under ledger/witness/ (never keys/: it must not be taken for a statement key, nor trusted unasked)."""
    witness_id = public_key_id(witness.public_key())
    if witness_id == keyring.statement_key_id:
        raise EvidenceError(ReasonCode.KEY_MATERIAL_INVALID, "the witness key is the statement key")
    published = checkpoint_keys(archive)
    if published:
        newest = read_checkpoint(archive, published[-1], published_statement_keys(archive))
        size = newest["size"]
        if size > len(tree.leaves) or tree.root(0, size).hex() != newest["root_sha256"]:
            raise EvidenceError(
                ReasonCode.LEDGER_INVALID, f"the witness refuses: the ledger does not extend checkpoint {published[-1]}"
            )
    archive.put_once(f"{WITNESS_PREFIX}/{witness_id}.pem", public_pem(witness))
    return witness_id


def read_checkpoint(archive: ArtifactStore, key: str, keys: dict[str, ed25519.Ed25519PublicKey]) -> dict[str, Any]:
    opened = dsse.verify_envelope(
        archive.get(key, max_bytes=jsonread.MAX_BYTES), keys, PAYLOAD_TYPE, code=ReasonCode.LEDGER_INVALID
    )
    body: Any = jsonread.loads(opened.payload, ReasonCode.LEDGER_INVALID, f"checkpoint {key}")
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
    return cast(dict[str, Any], body)  # described above: a checkpoint's body


@dataclass(frozen=True)
class CheckpointKeys:
    """The statement keys a checkpoint may be signed by. Checkpoints signed by a key that was rotated out since
    still verify: retired keys stay published. Where the archive holds a keyring, each checkpoint's key must be
    listed in it, valid when the checkpoint was issued and not revoked then."""

    keys: dict[str, ed25519.Ed25519PublicKey]
    keyring: KeyringDocument | None

    @classmethod
    def of(
        cls, archive: ArtifactStore, key_ids: frozenset[str] = frozenset(), root_ids: frozenset[str] = frozenset()
    ) -> CheckpointKeys:
        """The archive's (or package's) keys; only the pinned ``key_ids`` and ``root_ids``, when given."""
        documents = keyring_documents(archive)
        if not documents:
            return cls(published_statement_keys(archive, key_ids), None)
        keyring = read_published_keyring(archive, root_ids, documents)
        return cls(keyring.statement_keys(key_ids), keyring)

    def read(self, archive: ArtifactStore, key: str) -> dict[str, Any]:
        """The checkpoint's body, once its signature and (with a keyring) its key's validity are checked."""
        checkpoint = read_checkpoint(archive, key, self.keys)
        if self.keyring is not None:
            try:
                issued = SignatureTimes(made=(parse_time(checkpoint.get("issued_at"), "issued_at"),))
            except ValueError:
                raise EvidenceError(ReasonCode.LEDGER_INVALID, f"checkpoint {key} has no valid issued_at") from None
            check_key_at(self.keyring, checkpoint["key_id"], issued, "checkpoint key")
        return checkpoint


def check_witness(envelope: bytes, witness: ed25519.Ed25519PublicKey, key: str) -> str:
    """The witness's key id, when the checkpoint envelope carries its valid signature (the key is the one the
    caller pinned: it is never read from the archive); WITNESS_SIGNATURE_MISSING or _INVALID otherwise."""
    witness_id = public_key_id(witness)
    verified = dsse.parse_envelope(envelope, ReasonCode.CHECKPOINT_INVALID).verifies(witness_id, witness)
    if verified is None:
        raise EvidenceError(
            ReasonCode.WITNESS_SIGNATURE_MISSING, f"checkpoint {key} carries no signature by witness {witness_id}"
        )
    if not verified:
        raise EvidenceError(
            ReasonCode.WITNESS_SIGNATURE_INVALID,
            f"the signature of witness {witness_id} on checkpoint {key} does not verify",
        )
    return witness_id


def verify_ledger(
    ledger: Ledger,
    archive: ArtifactStore,
    *,
    witness: ed25519.Ed25519PublicKey | None = None,
    origin: str | None = None,
    policy: TlogPolicy | None = None,
    stated: bool = True,
) -> dict[str, Any]:
    """Recompute the chain, every published checkpoint's root and the consistency between checkpoints; with
    ``witness`` (pinned by the caller, never read from the archive), every checkpoint must carry its signature.
    Every checkpoint's note is checked as a package's are (witnessing.check_notes): of the log ``origin`` (None:
    a note is refused, LOG_ORIGIN_NOT_PINNED; ``stated``: the auditor named it, and the newest must have a note),
    of its envelope's root, its cosignatures by ``policy``'s witnesses valid, the policy met by the newest."""
    from evidence_pipeline.audit.witnessing import NotePins, archive_note, check_notes  # it imports this module

    events = ledger.verify_chain()
    leaves = [leaf for _, leaf in ledger.leaves()]
    tree = merkle.Tree(leaves)
    keys = CheckpointKeys.of(archive)
    previous = None
    checked, bodies = [], []
    for key in checkpoint_keys(archive):
        try:
            checkpoint = keys.read(archive, key)
        except EvidenceError as error:
            raise EvidenceError(ReasonCode.LEDGER_INVALID, f"checkpoint {key} does not verify ({error.code})") from None
        if witness is not None:
            check_witness(archive.get(key, max_bytes=jsonread.MAX_BYTES), witness, key)
        size, signed_root = checkpoint["size"], bytes.fromhex(checkpoint["root_sha256"])
        if size > len(leaves) or tree.root(0, size) != signed_root:
            raise EvidenceError(
                ReasonCode.LEDGER_INVALID, f"the ledger's first {size} events differ from signed checkpoint {key}"
            )
        if previous is not None:
            proof = tree.consistency_proof(previous[0], size)
            if not merkle.verify_consistency(previous[0], size, proof, previous[1], signed_root):
                raise EvidenceError(
                    ReasonCode.LEDGER_INVALID, f"checkpoint {key} is not an append-only extension of the last"
                )
        previous = (size, signed_root)
        checked.append(size)
        bodies.append(checkpoint)
    pins = NotePins(origin, policy, checked[-1] if checked else 0, stated)
    for _, failure in check_notes(bodies, partial(archive_note, archive), keys.keys, pins):
        if failure is not None:
            raise failure
    return {"events": events, "checkpoints": checked, "unchecked_tail": len(leaves) - (checked[-1] if checked else 0)}


def prove_bundle(ledger: Ledger, archive: ArtifactStore, prefix: str) -> dict[str, Any]:
    """The inclusion proof of the `bundle.published` event of the bundle at ``prefix``. The ledger vouches for the
    whole manifest: it must be exactly the manifest that event derives, and the files the ones it committed."""
    manifest: Any = jsonread.loads(
        archive.get(f"{prefix}/{MANIFEST}", max_bytes=jsonread.MAX_BYTES), ReasonCode.MANIFEST_INVALID, "manifest.json"
    )
    try:
        seq = manifest["ledger"]["seq"]
    except (KeyError, TypeError):
        raise EvidenceError(ReasonCode.MANIFEST_INVALID, "the manifest does not name a ledger position") from None
    event = ledger.event_or_none(seq) if type(seq) is int else None
    files = {  # the files are hashed as they stream, never held
        "report_sha256": archive.get_file(f"{prefix}/{REPORT}", DISCARD),
        "statement_sha256": archive.get_file(f"{prefix}/{STATEMENT}", DISCARD),
    }
    if event is None or not commits_bundle(event, prefix, manifest, files):
        raise EvidenceError(ReasonCode.LEDGER_INVALID, "the ledger holds no publication event for this bundle's files")
    return prove_inclusion(ledger, archive, seq)


def commits_bundle(event: LedgerEvent, prefix: str, manifest: object, files: Mapping[str, str | None]) -> bool:
    """Whether ``event`` is the `bundle.published` event of the bundle at ``prefix``, committing exactly these files
    (``report_sha256``, ``statement_sha256``) and exactly this manifest (parsed): the ledger vouches for all of it."""
    try:
        body, details = event.body, event.body["details"]
        return (
            event.event_type == EventType.BUNDLE_PUBLISHED == body["event_type"]
            and bundle_prefix(TenantMonth(body["tenant"], body["period"]), details["identity"]) == prefix
            and all(details.get(name) == value for name, value in files.items())
            and jsonread.loads(build_manifest(event), ReasonCode.LEDGER_INVALID, "the derived manifest") == manifest
        )
    except (EvidenceError, KeyError, TypeError, AttributeError):
        return False


def prove_inclusion(ledger: Ledger, archive: ArtifactStore, seq: int) -> dict[str, Any]:
    """The inclusion proof of event ``seq`` in the newest checkpoint that covers it, verified before returning."""
    numbered = ledger.leaves()
    order, leaves = [s for s, _ in numbered], [leaf for _, leaf in numbered]
    if seq not in order:
        raise EvidenceError(ReasonCode.LEDGER_INVALID, f"event {seq} is not in the ledger")
    index = order.index(seq)
    keys = published_statement_keys(archive)
    covering = [k for k in checkpoint_keys(archive) if int(k.rsplit("/", 1)[-1][:12]) > index]
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


def checkpoint_keys(archive: ArtifactStore) -> list[str]:
    """Published checkpoint keys, oldest first; anything else in the folder is not a checkpoint."""
    return [key for key in archive.list(PREFIX) if re.fullmatch(rf"{PREFIX}/[0-9]{{12}}\.json", key)]
