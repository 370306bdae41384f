"""A bundle's place in the log, carried in its downloadable bundle file (``GET /v1/evidence/{period}/bundle``) and
checked when `evidence verify FILE` reads one: the bundle's `bundle.published` event, verbatim, its
c2sp.org/tlog-proof@v1 to the newest co-signed checkpoint note that covers it, that checkpoint's signed envelope
(its statement key and issue time) and the tlog-policy the note was co-signed under, at the paths an audit package
uses:

    events/<seq:012d>.json                                the event's bytes, as the ledger hashed them
    ledger/checkpoints/<size:012d>.json                   the checkpoint the proof reaches
    proofs/tlog/<tenant>/<YYYY-MM>/<identity>.tlog-proof  the C2SP proof (its note, cosignatures included)
    witness-policy.tlog-policy                            the log's vkey and the configured witnesses

A bundle published after the newest checkpoint with a note has none of them yet: the next download has them.
"""

from __future__ import annotations

import threading
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, cast

from evidence_pipeline import jsonread
from evidence_pipeline.audit.checkpoints import CheckpointKeys, checkpoint_key, checkpoint_keys, commits_bundle
from evidence_pipeline.audit.package import checkpoint_size, event_path, tlog_proof_path
from evidence_pipeline.audit.verify import Check
from evidence_pipeline.audit.witnessing import (
    POLICY,
    NotePins,
    archive_note,
    check_note,
    log_verifier,
    package_policy,
    pinned_origin,
)
from evidence_pipeline.errors import UNAVAILABLE_CODES, EvidenceError, ReasonCode
from evidence_pipeline.ledger import merkle
from evidence_pipeline.models import EventType, LedgerEvent
from evidence_pipeline.monthly.bundle import MANIFEST, REPORT, STATEMENT
from evidence_pipeline.signed_note import Note, NoteError, Verifier, cosigned_at, parse_checkpoint
from evidence_pipeline.store import DISCARD, ArtifactStore
from evidence_pipeline.witness.policy import TlogPolicy
from evidence_pipeline.witness.proof import MAX_PROOF_BYTES, TlogProof, parse_tlog_proof

if TYPE_CHECKING:
    from evidence_pipeline.ledger import Ledger
    from evidence_pipeline.runtime import Runtime

TLOG_PROOF = "tlog_proof"  # the check's name


def proved_to(tree: merkle.Tree, index: int, note: Note, seq: int) -> TlogProof:
    """Leaf ``index``'s c2sp.org/tlog-proof@v1 to the checkpoint ``note``, verified before it is returned."""
    proof = TlogProof(index, tuple(tree.inclusion_proof(index, parse_checkpoint(note.text).size)), note)
    try:
        proof.reaches(tree.leaves[index])
    except NoteError as error:
        raise EvidenceError(ReasonCode.LEDGER_INVALID, f"event {seq}: {error}") from None
    return proof


def export_policy(witnesses: tuple[Verifier, ...], logs: tuple[Verifier, ...]) -> bytes:
    """The tlog-policy a note is co-signed under: every configured witness, as `evidence ledger checkpoint`
    requires by default."""
    return TlogPolicy.of_count(witnesses, len(witnesses), logs).encode()


def bundle_log_files(
    runtime: Runtime, event: LedgerEvent, prefix: str, witnesses: tuple[Verifier, ...]
) -> dict[str, bytes]:
    """The log's files (by path, see above) for the bundle at ``prefix`` published by ``event``; none before a
    checkpoint with a note covers it."""
    ledger, archive = runtime.ledger, runtime.archive
    index = ledger.leaf_index(event.seq)
    for key in reversed(checkpoint_keys(archive)):
        size = checkpoint_size(key)
        if size <= index:
            return {}
        note = archive_note(archive, size)
        if note is None:
            continue
        proof = proved_to(_tree(ledger, size), index, note, event.seq)
        keys = CheckpointKeys.of(archive)
        checkpoint = keys.read(archive, key)
        published = ledger.stored_events(EventType.BUNDLE_PUBLISHED, event.body["tenant"])
        body = next(stored for found, _, stored in published if found.seq == event.seq)
        log = log_verifier(parse_checkpoint(note.text).origin, keys.keys[checkpoint["key_id"]])
        return {
            event_path(event.seq): body,
            key: archive.get(key, max_bytes=jsonread.MAX_BYTES),
            tlog_proof_path(prefix): proof.encode(),
            POLICY: export_policy(witnesses, (log,)),
        }
    return {}


_TREES: dict[tuple[str, int], merkle.Tree] = {}  # (ledger, size): a checkpointed prefix never changes
_KEEP_TREES = 2  # the newest checkpoints' (leaves and the subtree hashes proofs cached: ~150 bytes a leaf)
_TREES_LOCK = threading.Lock()  # downloads run in a thread pool


def _tree(ledger: Ledger, size: int) -> merkle.Tree:
    """The tree of the ledger's first ``size`` events, read once per process and checkpoint, not per download."""
    key = (ledger.engine.url.render_as_string(hide_password=True), size)
    with _TREES_LOCK:
        tree = _TREES.get(key)
    if tree is None:
        tree = merkle.Tree([leaf for _, leaf in ledger.leaves(size)])
        with _TREES_LOCK:
            _TREES[key] = tree
            for stale in sorted(_TREES, key=lambda k: k[1])[:-_KEEP_TREES]:
                del _TREES[stale]
    return tree


def check_bundle_log(
    store: ArtifactStore,
    prefix: str,
    *,
    key_ids: frozenset[str],
    root_ids: frozenset[str],
    origin: str | None,
    policy: TlogPolicy | None,
) -> Check | None:
    """The bundle file's tlog proof, checked (None when the file has none and nothing was pinned): the event is
    this bundle's publication, the proof reaches the root of a checkpoint signed by a statement key, and the note
    is of the pinned origin, signed by that key and co-signed as the policy (``policy``, else the file's) asks."""
    pinned = origin is not None or policy is not None
    if not store.exists(tlog_proof_path(prefix)) and not pinned:
        return None
    try:
        _check_bundle_log(store, prefix, key_ids=key_ids, root_ids=root_ids, origin=origin, policy=policy)
    except EvidenceError as error:
        if error.code in UNAVAILABLE_CODES:
            raise
        return Check(TLOG_PROOF, False, error.code, error.message)
    return Check(TLOG_PROOF, True)


def _check_bundle_log(
    store: ArtifactStore,
    prefix: str,
    *,
    key_ids: frozenset[str],
    root_ids: frozenset[str],
    origin: str | None,
    policy: TlogPolicy | None,
) -> None:
    path = tlog_proof_path(prefix)
    if not store.exists(path):
        raise EvidenceError(
            ReasonCode.LEDGER_NOT_CHECKPOINTED,
            "the file holds no tlog proof: no co-signed "
            "checkpoint covered the bundle when it was downloaded (download it again later)",
        )
    try:
        proof = parse_tlog_proof(store.get(path, max_bytes=MAX_PROOF_BYTES))
        body = parse_checkpoint(proof.checkpoint.text)
    except NoteError as error:
        raise EvidenceError(ReasonCode.PROOF_INVALID, f"{path}: {error}") from None
    manifest: Any = jsonread.loads(
        store.get(f"{prefix}/{MANIFEST}", max_bytes=jsonread.MAX_BYTES), ReasonCode.MANIFEST_INVALID, MANIFEST
    )
    seq = jsonread.at(manifest, "ledger", "seq")
    if type(seq) is not int or not store.exists(event_path(seq)):
        raise EvidenceError(ReasonCode.LEDGER_EVENT_MISMATCH, "the file holds no event at the manifest's ledger seq")
    text = store.get(event_path(seq), max_bytes=jsonread.MAX_BYTES)
    parsed = jsonread.loads(text, ReasonCode.LEDGER_EVENT_MISMATCH, event_path(seq))
    # the chain hash is the manifest's: the Merkle proof, not the hash chain, is what puts the bytes in the log
    event = LedgerEvent(
        seq,
        cast(str, parsed.get("event_type") if isinstance(parsed, dict) else None),
        manifest["ledger"].get("event_hash"),
        cast(dict[str, Any], parsed),
    )  # commits_bundle checks it
    files = {
        "report_sha256": store.get_file(f"{prefix}/{REPORT}", DISCARD),
        "statement_sha256": store.get_file(f"{prefix}/{STATEMENT}", DISCARD),
    }
    if not commits_bundle(event, prefix, manifest, files):
        raise EvidenceError(
            ReasonCode.LEDGER_EVENT_MISMATCH, f"the bundle's files or manifest are not what event {seq} committed"
        )
    try:
        proof.reaches(merkle.leaf_hash(text))
    except NoteError as error:
        raise EvidenceError(ReasonCode.PROOF_INVALID, f"{path}: {error}") from None
    keys = CheckpointKeys.of(store, key_ids, root_ids)
    if not store.exists(checkpoint_key(body.size)):
        raise EvidenceError(ReasonCode.LEDGER_NOT_CHECKPOINTED, f"the file holds no checkpoint of size {body.size}")
    checkpoint = keys.read(store, checkpoint_key(body.size))
    own = package_policy(store)
    pinned = pinned_origin(origin, policy, own)
    policy = policy or own
    check_note(proof.checkpoint, checkpoint, keys.keys.get(checkpoint["key_id"]), NotePins(pinned, policy, body.size))


def witnessed(
    store: ArtifactStore, prefix: str, policy: TlogPolicy | None
) -> tuple[datetime | None, int | None, int | None]:
    """(the earliest valid cosignature time of a witness of ``policy``, else of the store's own policy, on the note
    the bundle's tlog proof reaches; the proof's leaf index; the note's tree size), Nones without a proof. Read
    after its `tlog_proof` check passed: the proof and note are then the verified ones."""
    path = tlog_proof_path(prefix)
    if not store.exists(path):
        return None, None, None
    try:
        proof = parse_tlog_proof(store.get(path, max_bytes=MAX_PROOF_BYTES))
        size = parse_checkpoint(proof.checkpoint.text).size
    except NoteError:
        return None, None, None
    policy = policy or package_policy(store)
    times = [cosigned_at(proof.checkpoint, key) for key in (policy.witnesses.values() if policy else ())]
    earliest = min((time for time in times if time is not None), default=None)
    return (None if earliest is None else datetime.fromtimestamp(earliest, timezone.utc)), proof.index, size
