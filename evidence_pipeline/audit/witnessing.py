"""Checkpoints as C2SP signed notes, co-signed by outside witnesses (c2sp.org/tlog-witness), and the witness policy
an auditor verifies a package against.

Beside each checkpoint's DSSE envelope (``ledger/checkpoints/<size>.json``: statement key, issue time, keyring
checks), the log publishes its C2SP checkpoint, put-once: ``ledger/checkpoints/<size>.note``, signed by the same
statement key under the key name EVIDENCE_LOG_ORIGIN (the vkey `evidence ledger vkey` prints). Each witness's
cosignature is put-once apart, ``ledger/cosignatures/<size>/<sha256(witness vkey)[:32]>.sig`` (one signature line),
since a witness that was down co-signs later and the note itself is never rewritten. An audit package holds the
note with every cosignature appended: a complete C2SP cosigned checkpoint, verifiable with any signed-note tool.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cryptography.hazmat.primitives.asymmetric import ed25519

from evidence_pipeline.audit.checkpoints import checkpoint_key, publish_checkpoint
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.ledger import merkle
from evidence_pipeline.store import ArtifactStore
from evidence_pipeline.witness.note import (
    ED25519,
    MAX_NOTE_BYTES,
    Checkpoint,
    Note,
    NoteError,
    Verifier,
    parse_checkpoint,
    parse_note,
    parse_signature_lines,
    sign_note,
    verifies,
)

if TYPE_CHECKING:
    from evidence_pipeline.runtime import Runtime
    from evidence_pipeline.witness.client import Endpoint

COSIGNATURES = "ledger/cosignatures"


def note_key(size: int) -> str:
    return checkpoint_key(size).removesuffix(".json") + ".note"


def cosignature_key(size: int, witness: Verifier) -> str:
    return f"{COSIGNATURES}/{size:012d}/{hashlib.sha256(witness.vkey().encode()).hexdigest()[:32]}.sig"


def log_verifier(origin: str, statement_key: ed25519.Ed25519PublicKey) -> Verifier:
    """The log's note key: the statement key, named by the origin (witnesses are configured with its vkey)."""
    return Verifier(origin, ED25519, statement_key)


def publish_note(archive: ArtifactStore, origin: str, statement_key: ed25519.Ed25519PrivateKey,
                 checkpoint: dict) -> Note:
    """The checkpoint's C2SP note (put-once; a note already there, of the same size and root, is returned)."""
    key = note_key(checkpoint["size"])
    body = Checkpoint(origin, checkpoint["size"], bytes.fromhex(checkpoint["root_sha256"]))
    if not archive.exists(key):
        try:
            archive.put_once(key, sign_note(body.text(), origin, statement_key).encode())
        except EvidenceError as error:
            if error.code != ReasonCode.STORE_CONFLICT:  # a concurrent checkpointer wrote it first: read theirs
                raise
    note = _read_note(archive, key)
    if parse_checkpoint(note.text) != body:
        raise EvidenceError(ReasonCode.LEDGER_INVALID, f"{key} does not describe the checkpoint of its size")
    return note


def checkpoint_witnessed(runtime: Runtime) -> tuple[dict, dict[str, str]]:
    """Publish the current tree head (checkpoints.publish_checkpoint), its note, and submit it to the configured
    witnesses (EVIDENCE_WITNESSES): (the checkpoint, each witness's outcome). A checkpoint signed by a statement
    key since rotated out gets no note: the next one does, and the witnesses catch up with it."""
    from evidence_pipeline.witness.client import endpoints  # the HTTP client: not for `evidence verify`

    ledger, archive, keyring, settings = runtime.ledger, runtime.archive, runtime.keyring, runtime.settings
    checkpoint = publish_checkpoint(ledger, archive, keyring, runtime.witness_key)
    if not settings.witnesses or checkpoint["key_id"] != keyring.statement_key_id:
        return checkpoint, {}
    note = publish_note(archive, settings.log_origin, keyring.statement_key, checkpoint)
    tree = merkle.Tree([leaf for _, leaf in ledger.leaves()])
    return checkpoint, witness_checkpoint(archive, note, tree, endpoints(settings.witnesses))


def _read_note(store: ArtifactStore, key: str) -> Note:
    try:
        return parse_note(store.get(key, max_bytes=MAX_NOTE_BYTES))
    except NoteError as error:
        raise EvidenceError(ReasonCode.CHECKPOINT_INVALID, f"{key} is not a signed checkpoint note ({error})") from None


def witness_checkpoint(archive: ArtifactStore, note: Note, tree: merkle.Tree,
                       witnesses: tuple[Endpoint, ...]) -> dict[str, str]:
    """Submit the checkpoint ``note`` to every configured witness that has not co-signed it yet, each from the
    newest size it co-signed (recorded in the archive; the witness corrects a wrong guess with 409). Returns, by
    witness name, "cosigned" or the reason code of its failure: one witness down fails nothing else."""
    from evidence_pipeline.witness.client import submit

    size = parse_checkpoint(note.text).size
    outcome = {}
    for endpoint in witnesses:
        key = cosignature_key(size, endpoint.key)
        if archive.exists(key):
            outcome[endpoint.key.name] = "cosigned"
            continue
        try:
            line = submit(endpoint, note, size, _last_cosigned(archive, endpoint.key, size),
                          lambda old: tree.consistency_proof(old, size))
            archive.put_once(key, line.encode())
            outcome[endpoint.key.name] = "cosigned"
        except EvidenceError as error:
            if error.code == ReasonCode.STORE_CONFLICT:  # a concurrent checkpointer recorded it first
                outcome[endpoint.key.name] = "cosigned"
            else:
                outcome[endpoint.key.name] = error.code
    return outcome


def _last_cosigned(archive: ArtifactStore, witness: Verifier, below: int) -> int:
    name = cosignature_key(0, witness).rsplit("/", 1)[-1]
    sizes = [int(key.split("/")[-2]) for key in archive.list(COSIGNATURES)
             if key.endswith(f"/{name}") and re.fullmatch(r"\d{12}", key.split("/")[-2])]
    return max((size for size in sizes if size < below), default=0)


def cosigned_note(archive: ArtifactStore, size: int) -> bytes | None:
    """The checkpoint's note with every recorded cosignature appended (for a package), or None without a note."""
    key = note_key(size)
    if not archive.exists(key):
        return None
    note = _read_note(archive, key)
    extra = []
    for sig_key in archive.list(f"{COSIGNATURES}/{size:012d}"):
        try:
            extra.extend(parse_signature_lines(archive.get(sig_key, max_bytes=4096).decode()))
        except (NoteError, UnicodeDecodeError):
            continue  # not a signature line: it vouches for nothing, and the policy check counts only valid ones
    return Note(note.text, note.signatures + tuple(extra)).encode()


@dataclass(frozen=True)
class WitnessPolicy:
    """`--witness VKEY ... --witness-policy N`: N of these witnesses must have co-signed."""

    witnesses: tuple[Verifier, ...]
    required: int


def check_policy(store: ArtifactStore, checkpoint: dict, statement_key: ed25519.Ed25519PublicKey | None,
                 policy: WitnessPolicy) -> None:
    """The checkpoint's note (beside its envelope) states the same size and root, carries the statement key's
    note signature, and valid cosignatures by at least ``policy.required`` of the pinned witnesses."""
    size = checkpoint["size"]
    key = note_key(size)
    if not store.exists(key):
        raise EvidenceError(ReasonCode.WITNESS_POLICY_NOT_MET, f"checkpoint {size} has no C2SP note: no witness "
                            "co-signed it")
    note = _read_note(store, key)
    try:
        body = parse_checkpoint(note.text)
    except NoteError as error:
        raise EvidenceError(ReasonCode.CHECKPOINT_INVALID, f"{key}: {error}") from None
    if (body.size, body.root.hex()) != (size, checkpoint["root_sha256"]) or statement_key is None or \
            verifies(note, log_verifier(body.origin, statement_key)) is not True:
        raise EvidenceError(ReasonCode.CHECKPOINT_INVALID, f"{key} is not the statement key's note of checkpoint "
                            f"{size}")
    valid = []
    for witness in policy.witnesses:
        verified = verifies(note, witness)
        if verified is False:
            raise EvidenceError(ReasonCode.WITNESS_SIGNATURE_INVALID, f"the cosignature of witness {witness.name} "
                                f"on checkpoint {size} does not verify")
        if verified:
            valid.append(witness.name)
    if len(valid) < policy.required:
        raise EvidenceError(ReasonCode.WITNESS_POLICY_NOT_MET, f"checkpoint {size} is co-signed by {len(valid)} of "
                            f"the {len(policy.witnesses)} pinned witnesses; the policy needs {policy.required}")

