"""`evidence export`: a tenant's bundles and document artifacts, with everything needed to check them offline, as
one audit package.

The ledger is the authority on what was published: every `bundle.published` event of the tenant in the range
names a bundle, whose files are copied from the archive only if they are the ones the event committed. The
package also carries who authorized what: every event of the tenant that stores a signed request, and every
actor and signing-key event (tenant "") that the offline re-check folds the actor registry from, whatever the
range, up to the newest checkpoint (package.py; later ones cannot be proved yet and are left out, counted). Each
event is proved against the earliest checkpoint that covers it (the earliest signed "it was in the log by
then"), preferring one co-signed by a witness whose public key the archive has under ledger/witness/; the newest
checkpoint is always included, and consecutive checkpoints of the package get a consistency proof. Every proof
is verified before it is written. The tenant's document jobs of the range are walked back to their uploads and
what the walks read is packed with them (export_documents.py; the uploads' bytes only ``with_uploads``). Last, the
index is signed with the statement key, its subjects every file written (package_index.py). The package is built
in a hidden temporary folder beside OUT and renamed into place only when it is complete (renameat2 with
RENAME_NOREPLACE: an OUT that appears meanwhile is never replaced); a failed export leaves nothing behind. The
format is described in `package.py`.

Over 400 lines because the export is one sequence over one package folder (collect, copy, prove, verify, assess,
sign, rename into place), each step a function of this module.
"""

from __future__ import annotations

import bisect
import ctypes
import errno
import json
import os
import shutil
import uuid
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, cast

from cryptography.hazmat.primitives.asymmetric import ed25519

from evidence_pipeline import jsonread
from evidence_pipeline.actors.registry import ACTOR_EVENTS
from evidence_pipeline.actors.roles import RECORDED_AS
from evidence_pipeline.audit.bundle_proof import export_policy, proved_to
from evidence_pipeline.audit.checkpoints import WITNESS_PREFIX, checkpoint_keys, commits_bundle, read_checkpoint
from evidence_pipeline.audit.export_documents import DocumentContents, collect_documents
from evidence_pipeline.audit.locations import Location
from evidence_pipeline.audit.oscal import DEFAULT_CONTROLS, package_assessment_results
from evidence_pipeline.audit.package import (
    INDEX,
    PACKAGE_ASSESSMENT,
    WITNESS,
    Index,
    assessment_path,
    authorization_proof_path,
    check_in_log,
    checkpoint_size,
    consistency_path,
    event_path,
    inclusion_path,
    open_package_store,
    tlog_proof_path,
)
from evidence_pipeline.audit.package_documents import document_proof_path, upload_path
from evidence_pipeline.audit.package_index import package_files, sign_index
from evidence_pipeline.audit.reports import assessment_document
from evidence_pipeline.audit.verify import MAX_REPORT_BYTES, SIGNATURE_ALLOWANCE, Verification
from evidence_pipeline.audit.verify_many import verify_all
from evidence_pipeline.audit.witnessing import POLICY, archive_note, log_verifier, note_key
from evidence_pipeline.canonical import utc_iso
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.ledger import Ledger, merkle
from evidence_pipeline.models import EventType, LedgerEvent, TenantMonth, validate_period, validate_tenant_id
from evidence_pipeline.monthly.bundle import MANIFEST, RENEWALS, REPORT, STATEMENT, bundle_prefix
from evidence_pipeline.paths import make_dirs
from evidence_pipeline.runtime import Runtime
from evidence_pipeline.signed_note import Note, Verifier, parse_checkpoint, parse_vkey
from evidence_pipeline.signing import dsse
from evidence_pipeline.signing.keys import MAX_KEY_BYTES, Keyring, published_ed25519_keys, published_statement_keys
from evidence_pipeline.store import DISCARD, ArtifactStore
from evidence_pipeline.store.local import LocalStore
from evidence_pipeline.witness.policy import TlogPolicy

MAX_KEYS_OBJECT_BYTES = 16 << 20  # anything under keys/ (PEMs, a keyring document) is far smaller


@dataclass(frozen=True)
class Exported:
    index: Index
    witnessed: int  # checkpoints of the package that carry a signature by a witness key of the archive
    unproved: int  # authorization events after the newest checkpoint, left out


@dataclass(frozen=True)
class _Stored:
    """An event to export, as the ledger stores it, and where its inclusion proof goes."""

    event: LedgerEvent
    prev_hash: str
    body: bytes
    proof_path: str
    leaf_index: int  # the event's position in the tree, which is not seq - 1: a database sequence may skip numbers


@dataclass(frozen=True)
class _Publication(_Stored):
    prefix: str = ""


def export_package(
    rt: Runtime,
    tenant: str,
    *,
    first: str | None,
    last: str | None,
    out: Path,
    action_max_age_seconds: float,
    with_uploads: bool = False,
    controls: dict[str, Any] = DEFAULT_CONTROLS,
) -> Exported:
    """Write the audit package of ``tenant``'s bundles published for periods ``first``..``last`` (inclusive; None is
    unbounded), of its document jobs of those periods (``with_uploads``: the uploads' bytes too) and of its
    authorization events to the folder ``out``, which must not exist (PACKAGE_EXISTS).
    ``action_max_age_seconds``: the deployment's EVIDENCE_ACTION_MAX_AGE_SECONDS, which the re-check uses;
    ``controls``: the OSCAL controls mapping of its assessment results."""
    ledger, archive = rt.ledger, rt.archive
    validate_tenant_id(tenant)
    for period in (first, last):
        if period is not None:
            validate_period(period)
    if first and last and first > last:
        raise EvidenceError(ReasonCode.PERIOD_INVALID, "--from is after --to")
    if os.path.lexists(out):
        raise EvidenceError(ReasonCode.PACKAGE_EXISTS, f"{out.name} already exists: export never replaces anything")
    found = _published(ledger, tenant, first, last)
    document_contents = collect_documents(rt, tenant, first, last)
    if not found and not document_contents.artifacts:
        raise EvidenceError(
            ReasonCode.BUNDLE_NOT_FOUND,
            f"the ledger records no bundle and no document job of "
            f"{tenant} in {first or 'the first period'}..{last or 'the last period'}",
        )
    authorizing = _authorization_events(ledger, tenant)
    numbered = ledger.leaves()  # read after the events: every event found has its leaf
    position = {seq: index for index, (seq, _) in enumerate(numbered)}
    publications = sorted(
        (
            _Publication(event, prev_hash, body, inclusion_path(prefix), position[event.seq], prefix)
            for event, prev_hash, body, prefix in found
        ),
        key=lambda p: (p.event.body["period"], p.leaf_index),
    )  # the index lists them by period
    covered = max(map(checkpoint_size, checkpoint_keys(archive)), default=0)  # what the newest checkpoint signs
    authorizations = [
        _Stored(event, prev_hash, body, authorization_proof_path(event.seq), position[event.seq])
        for event, prev_hash, body in authorizing
        if position[event.seq] < covered
    ]
    proved = {stored.event.seq for stored in authorizations}  # an authorization event keeps its own proof
    document_events = [
        _Stored(
            LedgerEvent(seq, e.parsed["event_type"], e.event_hash, e.parsed),
            e.prev_hash,
            e.body.encode("utf-8"),
            document_proof_path(seq),
            position[seq],
        )
        for seq, e in sorted(document_contents.events.items())
        if seq not in proved
    ]
    tree = merkle.Tree([leaf for _, leaf in numbered])
    witnessed = _Witnessed(archive)
    chosen = _checkpoints(archive, [*publications, *authorizations, *document_events], witnessed)
    parent = out.absolute().parent
    make_dirs(parent, 0o755)
    staging = parent / f".{out.name}.partial-{uuid.uuid4().hex}"
    staging.mkdir(mode=0o700)
    try:
        package = LocalStore(staging, scheme="package")
        index = _write(
            archive,
            package,
            contents=_Contents(
                tenant,
                first,
                last,
                publications,
                authorizations,
                action_max_age_seconds,
                document_events,
                document_contents,
                with_uploads,
                controls,
            ),
            chosen=chosen,
            tree=tree,
            keyring=rt.keyring,
            witnesses=tuple(parse_vkey(vkey) for _, vkey in rt.settings.witnesses),
            workers=rt.settings.worker_processes(),
        )
        os.chmod(staging, 0o755)
        _fsync_dir(staging)
        _rename_noreplace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _fsync_dir(parent)
    return Exported(
        index, sum(1 for key in index.checkpoints if witnessed(key)), len(authorizing) - len(authorizations)
    )


def _published(
    ledger: Ledger, tenant: str, first: str | None, last: str | None
) -> list[tuple[LedgerEvent, str, bytes, str]]:
    """(event, prev_hash, body bytes, bundle prefix) of each `bundle.published` event of the tenant in the range."""
    found = []
    for event, prev_hash, body in ledger.stored_events(EventType.BUNDLE_PUBLISHED, tenant):
        period = event.body["period"]
        if (first or period) <= period <= (last or period):
            prefix = bundle_prefix(TenantMonth(tenant, period), event.body["details"]["identity"])
            found.append((event, prev_hash, body, prefix))
    return found


def _authorization_events(ledger: Ledger, tenant: str) -> list[tuple[LedgerEvent, str, bytes]]:
    """(event, prev_hash, body bytes) in ledger order of every event of ``tenant`` or of none (an actor's or the
    signing keys') that stores a signed request, and of every actor event, which the re-check needs whatever it
    stores. Refusals are not authorizations: `action.refused` records no action of RECORDED_AS."""
    found = [
        entry
        for kind in RECORDED_AS.values()
        for owner in (tenant, "")
        for entry in ledger.stored_events(kind, owner)
        if "authorization" in entry[0].body["details"] or kind in ACTOR_EVENTS
    ]
    return sorted(found, key=lambda entry: entry[0].seq)


class _Witnessed:
    """Whether a checkpoint carries a valid signature by a witness key the archive publishes (read once each)."""

    def __init__(self, archive: ArtifactStore):
        self.archive = archive
        self.keys = published_ed25519_keys(archive, WITNESS_PREFIX)
        self.known: dict[str, bool] = {}

    def __call__(self, key: str) -> bool:
        if self.keys and key not in self.known:
            data = self.archive.get(key, max_bytes=jsonread.MAX_BYTES)
            envelope = dsse.parse_envelope(data, ReasonCode.LEDGER_INVALID)
            self.known[key] = any(envelope.verifies(key_id, public) for key_id, public in self.keys.items())
        return self.known.get(key, False)


def _checkpoints(archive: ArtifactStore, events: list[_Stored], witnessed: _Witnessed) -> dict[int, str]:
    """For each event (by leaf index), the key of the checkpoint its proof is against: the earliest covering
    checkpoint co-signed by a witness of the archive, else the earliest covering one."""
    keys = checkpoint_keys(archive)
    sizes = [checkpoint_size(key) for key in keys]
    chosen = {}
    for stored in events:
        start = bisect.bisect_right(sizes, stored.leaf_index)  # the first checkpoint with size > leaf index
        if start == len(keys):
            what = (
                f"the publication of {stored.prefix}"
                if isinstance(stored, _Publication)
                else f"{stored.event.event_type} event {stored.event.seq}"
            )
            raise EvidenceError(
                ReasonCode.LEDGER_NOT_CHECKPOINTED,
                f"no published checkpoint covers {what} yet: run `evidence ledger checkpoint` first",
            )
        chosen[stored.leaf_index] = next((key for key in keys[start:] if witnessed(key)), keys[start])
    return chosen


@dataclass(frozen=True)
class _Contents:
    """What the package holds, besides the keys and the checkpoints."""

    tenant: str
    first: str | None
    last: str | None
    publications: list[_Publication]
    authorizations: list[_Stored]
    action_max_age_seconds: float
    document_events: list[_Stored]  # those that are not authorization events
    documents: DocumentContents
    with_uploads: bool
    controls: dict[str, Any]  # the OSCAL controls mapping (oscal.py)


def _write(
    archive: ArtifactStore,
    package: LocalStore,
    *,
    contents: _Contents,
    chosen: dict[int, str],
    tree: merkle.Tree,
    keyring: Keyring,
    witnesses: tuple[Verifier, ...],
    workers: int,
) -> Index:
    for key in archive.list("keys"):  # verbatim, whatever is there (PEMs, a keyring document)
        _copy(archive, key, package=package, target=key, max_bytes=MAX_KEYS_OBJECT_BYTES)
    for key in archive.list(WITNESS_PREFIX):
        _copy(archive, key, package=package, target=f"{WITNESS}/{key.rsplit('/', 1)[-1]}", max_bytes=MAX_KEY_BYTES)
    statement_keys = published_statement_keys(archive)
    checkpoints = sorted(set(chosen.values()) | {checkpoint_keys(archive)[-1]}, key=checkpoint_size)
    signed = {key: _signed_checkpoint(archive, package, key, statement_keys, tree) for key in checkpoints}
    notes = {key: archive_note(archive, checkpoint_size(key)) for key in checkpoints}
    logs = {}  # the log keys of the notes: their origin, the statement key of their checkpoint
    for key, note in notes.items():  # each checkpoint's C2SP note with every witness's cosignature, where there is one
        if note is not None:
            package.put_once(note_key(checkpoint_size(key)), note.encode())
            log = log_verifier(
                parse_checkpoint(note.text).origin,
                statement_keys[read_checkpoint(archive, key, statement_keys)["key_id"]],
            )
            logs[log.vkey()] = log
    if logs:  # the requirement the notes were co-signed under: every configured witness (`ledger checkpoint`)
        package.put_once(POLICY, export_policy(witnesses, tuple(logs.values())))
    for old, new in zip(checkpoints, checkpoints[1:]):
        (old_size, old_root), (new_size, new_root) = signed[old], signed[new]
        proof = tree.consistency_proof(old_size, new_size)
        if not merkle.verify_consistency(old_size, new_size, proof, old_root, new_root):
            raise EvidenceError(ReasonCode.LEDGER_INVALID, f"checkpoint {new} does not extend {old}")
        package.put_once(consistency_path(old, new), _json({"old": old, "new": new, "proof": [h.hex() for h in proof]}))
    for publication in contents.publications:
        _write_bundle(archive, package, publication)
        _write_proved(package, publication, chosen[publication.leaf_index], signed, tree)
        if notes[checkpoints[-1]] is not None:  # the bundle's C2SP proof, to the newest (co-signed) checkpoint
            _write_tlog_proof(package, publication, cast(Note, notes[checkpoints[-1]]), tree)
    for stored in [*contents.authorizations, *contents.document_events]:
        _write_proved(package, stored, chosen[stored.leaf_index], signed, tree)
    policy = TlogPolicy.of_count(witnesses, len(witnesses))
    here = Location(str(package.root), str(package.root), "bundles", is_archive_root=True)
    verified = verify_all(
        [(here, publication.prefix) for publication in contents.publications],
        open_package_store,
        key_ids=frozenset(),
        root_ids=frozenset(),
        workers=workers,
        also=partial(check_in_log, signed),
    )
    assessments = []
    for publication, outcome in zip(contents.publications, verified):  # its files, proofs and notes are in place
        if outcome.error is not None:
            raise outcome.error  # the package could not be read: no assessment to make
        assessments.append(
            assessment_document(  # as the exporter verified it (no error: a verification)
                package,
                publication.prefix,
                verification=cast(Verification, outcome.verification),
                policy=policy,
                controls=contents.controls,
            )
        )
        package.put_once(assessment_path(publication.prefix), assessments[-1])
    if assessments:
        package.put_once(PACKAGE_ASSESSMENT, package_assessment_results(contents.tenant, assessments))
    found = contents.documents
    for key, sha256 in found.objects.items():
        _copy(archive, key, package=package, target=key, expected_sha256=sha256)
    if contents.with_uploads:
        for store, key, sha256 in {
            sha256: (store, key, sha256) for store, key, sha256 in found.uploads.values()
        }.values():
            _copy(store, key, package=package, target=upload_path(contents.tenant, sha256), expected_sha256=sha256)
    index = Index(
        contents.tenant,
        contents.first,
        contents.last,
        utc_iso(timespec="seconds"),
        checkpoints,
        [consistency_path(old, new) for old, new in zip(checkpoints, checkpoints[1:])],
        [publication.prefix for publication in contents.publications],
        [stored.event.seq for stored in contents.authorizations],
        contents.action_max_age_seconds,
        {
            "artifacts": found.artifacts,
            "events": sorted(found.events),
            "objects": sorted(found.objects),
            "with_uploads": contents.with_uploads,
            "derived_by": found.derived_by,
        },
    )
    files = {path: package.get_file(path, DISCARD) for path in package_files(package.root, INDEX)}
    # last: the index names only what is already there, and signs every file's digest
    package.put_once(INDEX, sign_index(index.document(), files, keyring.statement_key, keyring.statement_key_id))
    return index


def _signed_checkpoint(
    archive: ArtifactStore,
    package: LocalStore,
    key: str,
    statement_keys: dict[str, ed25519.Ed25519PublicKey],
    tree: merkle.Tree,
) -> tuple[int, bytes]:
    """Copy a checkpoint verbatim once its signature verifies and its root is the ledger's at its size."""
    checkpoint = read_checkpoint(archive, key, statement_keys)
    size, root = checkpoint["size"], bytes.fromhex(checkpoint["root_sha256"])
    if size > len(tree.leaves) or tree.root(0, size) != root:
        raise EvidenceError(
            ReasonCode.LEDGER_INVALID, f"the ledger's first {size} events differ from signed checkpoint {key}"
        )
    _copy(archive, key, package=package, target=key, max_bytes=jsonread.MAX_BYTES)
    return size, root


def _write_bundle(archive: ArtifactStore, package: LocalStore, publication: _Publication) -> None:
    """The bundle's files, if they are the ones its event committed."""
    prefix, details = publication.prefix, publication.event.body["details"]
    files = {
        "report_sha256": _copy(
            archive,
            f"{prefix}/{REPORT}",
            package=package,
            target=f"{prefix}/{REPORT}",
            expected_sha256=details["report_sha256"],
            max_bytes=MAX_REPORT_BYTES + SIGNATURE_ALLOWANCE,
        ),
        "statement_sha256": _copy(
            archive,
            f"{prefix}/{STATEMENT}",
            package=package,
            target=f"{prefix}/{STATEMENT}",
            expected_sha256=details["statement_sha256"],
            max_bytes=jsonread.MAX_BYTES,
        ),
    }
    versions = [
        (archive.version_id(f"{prefix}/{name}"), details.get(f"{field}_version_id"))
        for name, field in ((REPORT, "report"), (STATEMENT, "statement"))
    ]
    if any(current != committed for current, committed in versions):  # a versioned archive (S3) only
        raise EvidenceError(
            ReasonCode.LEDGER_INVALID, f"the archive's current version of a file of {prefix} is not the committed one"
        )
    manifest = archive.get(f"{prefix}/{MANIFEST}", max_bytes=jsonread.MAX_BYTES)
    if not commits_bundle(
        publication.event, prefix, jsonread.loads(manifest, ReasonCode.MANIFEST_INVALID, MANIFEST), files
    ):
        raise EvidenceError(ReasonCode.LEDGER_INVALID, f"the archive's {prefix} is not what the ledger committed")
    package.put_once(f"{prefix}/{MANIFEST}", manifest)
    # Its renewed reports (`evidence timestamps renew`), verbatim: each is judged by its bytes (it must extend the
    # published report with a document time stamp), so the package verifies after the first TSA certificate's expiry.
    for number, key in enumerate(archive.list(f"{prefix}/{RENEWALS}"), start=1):
        _copy(
            archive, key, package=package, target=key, max_bytes=MAX_REPORT_BYTES + (number + 1) * SIGNATURE_ALLOWANCE
        )


def _write_proved(
    package: LocalStore, stored: _Stored, checkpoint: str, signed: dict[str, tuple[int, bytes]], tree: merkle.Tree
) -> None:
    """An event's exact bytes and its inclusion proof against ``checkpoint``, verified before it is written."""
    size, root = signed[checkpoint]
    index = stored.leaf_index
    proof = tree.inclusion_proof(index, size)
    if merkle.leaf_hash(stored.body) != tree.leaves[index] or not merkle.verify_inclusion(
        index, size, tree.leaves[index], proof, root
    ):
        raise EvidenceError(
            ReasonCode.LEDGER_INVALID, f"the inclusion proof of event {stored.event.seq} does not reach {checkpoint}"
        )
    seq = stored.event.seq
    package.put_once(event_path(seq), stored.body)
    package.put_once(
        stored.proof_path,
        _json(
            {
                "event": event_path(seq),
                "event_seq": seq,
                "prev_hash": stored.prev_hash,
                "event_hash": stored.event.event_hash,
                "leaf_index": index,
                "tree_size": size,
                "checkpoint": checkpoint,
                "proof": [h.hex() for h in proof],
            }
        ),
    )


def _write_tlog_proof(package: LocalStore, publication: _Publication, note: Note, tree: merkle.Tree) -> None:
    """The publication event's c2sp.org/tlog-proof@v1 to the co-signed ``note``, verified before it is written."""
    proof = proved_to(tree, publication.leaf_index, note, publication.event.seq)
    package.put_once(tlog_proof_path(publication.prefix), proof.encode())


def _copy(
    archive: ArtifactStore,
    key: str,
    *,
    package: LocalStore,
    target: str,
    expected_sha256: str | None = None,
    max_bytes: int | None = None,
) -> str:
    """Stream one object from the archive into the package (hashed once, on the way; digest checked when given)."""
    with package.spool(package.root) as spool:
        sha256 = archive.get_file(key, spool, expected_sha256, max_bytes)
        package.put_spooled(target, spool, sha256, spool.tell())
    return sha256


def _json(document: dict[str, Any]) -> bytes:
    return json.dumps(document, indent=2, sort_keys=True).encode() + b"\n"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_AT_FDCWD, _RENAME_NOREPLACE = -100, 1


def _rename_noreplace(source: Path, target: Path) -> None:
    """Rename a folder into place, never replacing what is there (an empty folder included, which rename(2) would
    silently replace). Where renameat2 is missing, a check just before rename(2) narrows the window."""
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is not None:
        if renameat2(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), _RENAME_NOREPLACE) == 0:
            return
        error = ctypes.get_errno()
        if error == errno.EEXIST:
            raise EvidenceError(ReasonCode.PACKAGE_EXISTS, f"{target.name} appeared during the export: not replaced")
        if error not in (errno.ENOSYS, errno.EINVAL):
            raise OSError(error, os.strerror(error))
    if os.path.lexists(target):
        raise EvidenceError(ReasonCode.PACKAGE_EXISTS, f"{target.name} appeared during the export: not replaced")
    os.rename(source, target)
