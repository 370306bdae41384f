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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cryptography.hazmat.primitives.asymmetric import ed25519

from evidence_pipeline.audit.checkpoints import checkpoint_key, publish_checkpoint
from evidence_pipeline.errors import UNAVAILABLE_CODES, EvidenceError, ReasonCode
from evidence_pipeline.ledger import merkle
from evidence_pipeline.signed_note import (
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
from evidence_pipeline.store import ArtifactStore
from evidence_pipeline.witness.policy import MAX_POLICY_BYTES, TlogPolicy, parse_policy

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


def publish_note(
    archive: ArtifactStore, origin: str, statement_key: ed25519.Ed25519PrivateKey, checkpoint: dict[str, Any]
) -> Note:
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


def checkpoint_witnessed(runtime: Runtime) -> tuple[dict[str, Any], dict[str, str]]:
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


def witness_checkpoint(
    archive: ArtifactStore, note: Note, tree: merkle.Tree, witnesses: tuple[Endpoint, ...]
) -> dict[str, str]:
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
            line = submit(
                endpoint,
                note,
                size=size,
                old=_last_cosigned(archive, endpoint.key, size),
                proof=lambda old: tree.consistency_proof(old, size),
            )
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
    sizes = [
        int(key.split("/")[-2])
        for key in archive.list(COSIGNATURES)
        if key.endswith(f"/{name}") and re.fullmatch(r"[0-9]{12}", key.split("/")[-2])
    ]
    return max((size for size in sizes if size < below), default=0)


def cosigned_note(archive: ArtifactStore, size: int) -> bytes | None:
    """The checkpoint's note with every recorded cosignature appended (for a package), or None without a note."""
    note = archive_note(archive, size)
    return None if note is None else note.encode()


def archive_note(archive: ArtifactStore, size: int) -> Note | None:
    """The archive's note of the checkpoint of ``size`` with every recorded cosignature, None when it has none."""
    key = note_key(size)
    if not archive.exists(key):
        return None
    note = _read_note(archive, key)
    extra: list[tuple[str, bytes]] = []  # (key name, signature) of each recorded cosignature
    for sig_key in archive.list(f"{COSIGNATURES}/{size:012d}"):
        try:
            extra.extend(parse_signature_lines(archive.get(sig_key, max_bytes=4096).decode()))
        except (NoteError, UnicodeDecodeError):
            continue  # not a signature line: it vouches for nothing, and the policy check counts only valid ones
    return Note(note.text, note.signatures + tuple(extra))


@dataclass(frozen=True)
class NotePins:
    """What every checkpoint note is checked against: the log's origin (``origin``: the auditor's pin, or the one
    origin of a policy's `log` lines; None: nothing pins it, and a note is refused) and the witness policy;
    ``newest``: the size whose note must meet the policy's quorum (every other note's cosignatures by pinned
    witnesses must verify, but an older checkpoint may lack some: a witness that was down co-signs a later one, to
    which the older ones are consistent)."""

    origin: str | None
    policy: TlogPolicy | None
    newest: int
    stated: bool = True  # the auditor named the origin (--origin): the newest checkpoint must have a note of it


def package_note(store: ArtifactStore, size: int) -> Note | None:
    """A package's note of the checkpoint of ``size`` (its cosignatures appended), None when it has none."""
    key = note_key(size)
    return _read_note(store, key) if store.exists(key) else None


POLICY = "witness-policy.tlog-policy"  # a package's c2sp.org/tlog-policy: the logs, witnesses and quorum it meets


def package_policy(store: ArtifactStore) -> TlogPolicy | None:
    """The package's policy file, None when it has none (exported before witnesses were configured)."""
    if not store.exists(POLICY):
        return None
    try:
        return parse_policy(store.get(POLICY, max_bytes=MAX_POLICY_BYTES))
    except NoteError as error:
        raise EvidenceError(ReasonCode.PACKAGE_INVALID, f"{POLICY}: {error}") from None


def pinned_origin(origin: str | None, *policies: TlogPolicy | None) -> str | None:
    """The log origin the notes must state: ``origin`` (--origin), else the one origin the first policy that names
    any states (the auditor's --policy before the package's own); None when nothing pins one."""
    if origin is not None:
        return origin
    for policy in policies:
        if policy is not None and policy.origins:
            return policy.origins[0] if len(policy.origins) == 1 else None
    return None


def check_notes(
    checkpoints: list[dict[str, Any]],
    read: Callable[[int], Note | None],
    statement_keys: dict[str, ed25519.Ed25519PublicKey],
    pins: NotePins,
) -> Iterator[tuple[int, EvidenceError | None]]:
    """Each checkpoint's note checked (``checkpoints``: verified envelope bodies, oldest first; ``read``: a size's
    note): (size, None or the EvidenceError of its note). Every note must be of the pinned origin."""
    for checkpoint in checkpoints:
        try:
            check_note(read(checkpoint["size"]), checkpoint, statement_keys.get(checkpoint["key_id"]), pins)
            yield checkpoint["size"], None
        except EvidenceError as error:
            if error.code in UNAVAILABLE_CODES:  # the store did not answer: no verdict on the note
                raise
            yield checkpoint["size"], error


def check_note(
    note: Note | None, checkpoint: dict[str, Any], statement_key: ed25519.Ed25519PublicKey | None, pins: NotePins
) -> Checkpoint | None:
    """The checkpoint's note (beside its envelope), if it has one: of the pinned origin (LOG_ORIGIN_MISMATCH,
    LOG_ORIGIN_NOT_PINNED), signed by the statement key under that name (CHECKPOINT_INVALID), of the envelope's
    root (a second signed root for the size: CHECKPOINT_CONFLICT, naming both), every pinned witness's cosignature valid
    (WITNESS_SIGNATURE_INVALID), and, for the newest, the policy's quorum (WITNESS_POLICY_NOT_MET)."""
    size = checkpoint["size"]
    key = note_key(size)
    newest = size == pins.newest
    if note is None:
        if newest and pins.policy is not None:
            raise EvidenceError(
                ReasonCode.WITNESS_POLICY_NOT_MET, f"checkpoint {size} has no C2SP note: no witness co-signed it"
            )
        if newest and pins.origin is not None and pins.stated:
            raise EvidenceError(
                ReasonCode.LOG_ORIGIN_MISMATCH,
                f"checkpoint {size} has no C2SP note: nothing states that it is of the log {pins.origin}",
            )
        return None
    try:
        body = parse_checkpoint(note.text)
    except NoteError as error:
        raise EvidenceError(ReasonCode.CHECKPOINT_INVALID, f"{key}: {error}") from None
    origin = pins.origin
    if origin is None:  # the first note's origin would be the operator's word for it
        raise EvidenceError(
            ReasonCode.LOG_ORIGIN_NOT_PINNED,
            f"{key}: nothing pins the log's origin: pass --origin "
            "(the name `evidence ledger vkey` prints) or a --policy FILE with its `log` line",
        )
    if body.origin != origin:
        raise EvidenceError(
            ReasonCode.LOG_ORIGIN_MISMATCH, f"{key} is of the log {body.origin!r}, not of the pinned {origin!r}"
        )
    logs = pins.policy.logs if pins.policy is not None else ()
    if logs and body.origin not in {log.name for log in logs}:
        raise EvidenceError(
            ReasonCode.LOG_ORIGIN_MISMATCH, f"{key} is of the log {body.origin!r}, which the policy does not list"
        )
    if (
        body.size != size
        or statement_key is None
        or verifies(note, log_verifier(body.origin, statement_key)) is not True
        or (logs and not any(verifies(note, log) for log in logs))
    ):
        raise EvidenceError(
            ReasonCode.CHECKPOINT_INVALID,
            f"{key} is not the statement key's note of checkpoint "
            f"{size}" + (", signed by a log key of the policy" if logs else ""),
        )
    if body.root.hex() != checkpoint["root_sha256"]:
        raise EvidenceError(
            ReasonCode.CHECKPOINT_CONFLICT,
            f"two signed roots for size {size}: "
            f"{checkpoint['root_sha256']} ({checkpoint_key(size)}) and {body.root.hex()} ({key})",
        )
    if pins.policy is not None:
        _check_cosignatures(note, size, pins.policy, newest)
    return body


def _check_cosignatures(note: Note, size: int, policy: TlogPolicy, newest: bool) -> None:
    valid = set()
    for name, witness in policy.witnesses.items():
        verified = verifies(note, witness)
        if verified is False:
            raise EvidenceError(
                ReasonCode.WITNESS_SIGNATURE_INVALID,
                f"the cosignature of witness {witness.name} on checkpoint {size} does not verify",
            )
        if verified:
            valid.add(name)
    if newest and not policy.met(valid):
        raise EvidenceError(
            ReasonCode.WITNESS_POLICY_NOT_MET,
            f"checkpoint {size} is co-signed by {len(valid)} of "
            f"the {len(policy.witnesses)} pinned witnesses; the policy: {policy.describe()}",
        )
