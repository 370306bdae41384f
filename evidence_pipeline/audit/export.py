"""`evidence export`: a tenant's bundles, with everything needed to check them offline, as one audit package.

The ledger is the authority on what was published: every `bundle.published` event of the tenant in the range
names a bundle, whose files are copied from the archive only if they are the ones the event committed. Each
event is proved against the earliest checkpoint that covers it (the earliest signed "it was in the log by then"),
preferring one co-signed by a witness whose public key the archive has under ledger/witness/; the newest
checkpoint is always included, and consecutive checkpoints of the package get a consistency proof. Every proof
is verified before it is written. The package is built in a hidden temporary folder beside OUT and renamed into
place only when it is complete (renameat2 with RENAME_NOREPLACE: an OUT that appears meanwhile is never
replaced); a failed export leaves nothing behind. The format is described in `package.py`.
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
from datetime import datetime, timezone
from pathlib import Path

from evidence_pipeline import jsonread
from evidence_pipeline.audit.checkpoints import WITNESS_PREFIX, checkpoint_keys, commits_bundle, read_checkpoint
from evidence_pipeline.audit.package import (
    INDEX,
    WITNESS,
    Index,
    consistency_path,
    event_path,
    inclusion_path,
)
from evidence_pipeline.audit.verify import MAX_REPORT_BYTES, SIGNATURE_ALLOWANCE
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.ledger import Ledger, merkle
from evidence_pipeline.models import EventType, LedgerEvent, TenantMonth, validate_period, validate_tenant_id
from evidence_pipeline.monthly.bundle import MANIFEST, REPORT, STATEMENT, bundle_prefix
from evidence_pipeline.paths import make_dirs
from evidence_pipeline.signing import dsse
from evidence_pipeline.signing.keys import MAX_KEY_BYTES, published_ed25519_keys, published_statement_keys
from evidence_pipeline.store import ArtifactStore
from evidence_pipeline.store.local import LocalStore

MAX_KEYS_OBJECT_BYTES = 16 << 20  # anything under keys/ (PEMs, a keyring document) is far smaller


@dataclass(frozen=True)
class Exported:
    index: Index
    witnessed: int  # checkpoints of the package that carry a signature by a witness key of the archive


@dataclass(frozen=True)
class _Publication:
    event: LedgerEvent
    prev_hash: str
    body: bytes
    prefix: str
    leaf_index: int  # the event's position in the tree, which is not seq - 1: a database sequence may skip numbers


def export_package(ledger: Ledger, archive: ArtifactStore, tenant: str, first: str | None, last: str | None,
                   out: Path) -> Exported:
    """Write the audit package of ``tenant``'s bundles published for periods ``first``..``last`` (inclusive; None is
    unbounded) to the folder ``out``, which must not exist (PACKAGE_EXISTS)."""
    validate_tenant_id(tenant)
    for period in (first, last):
        if period is not None:
            validate_period(period)
    if first and last and first > last:
        raise EvidenceError(ReasonCode.PERIOD_INVALID, "--from is after --to")
    if os.path.lexists(out):
        raise EvidenceError(ReasonCode.PACKAGE_EXISTS, f"{out.name} already exists: export never replaces anything")
    found = _published(ledger, tenant, first, last)
    numbered = ledger.leaves()  # read after the events: every event found has its leaf
    position = {seq: index for index, (seq, _) in enumerate(numbered)}
    publications = sorted((_Publication(*entry, position[entry[0].seq]) for entry in found),
                          key=lambda p: (p.event.body["period"], p.leaf_index))  # the index lists them by period
    tree = merkle.Tree([leaf for _, leaf in numbered])
    witnessed = _Witnessed(archive)
    chosen = _checkpoints(archive, publications, witnessed)
    parent = out.absolute().parent
    make_dirs(parent, 0o755)
    staging = parent / f".{out.name}.partial-{uuid.uuid4().hex}"
    staging.mkdir(mode=0o700)
    try:
        package = LocalStore(staging, scheme="package")
        index = _write(archive, package, tenant, first, last, publications, chosen, tree)
        os.chmod(staging, 0o755)
        _fsync_dir(staging)
        _rename_noreplace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _fsync_dir(parent)
    return Exported(index, sum(1 for key in index.checkpoints if witnessed(key)))


def _published(ledger: Ledger, tenant: str, first: str | None, last: str | None
               ) -> list[tuple[LedgerEvent, str, bytes, str]]:
    """(event, prev_hash, body bytes, bundle prefix) of each `bundle.published` event of the tenant in the range."""
    found = []
    for event, prev_hash, body in ledger.stored_events(EventType.BUNDLE_PUBLISHED, tenant):
        period = event.body["period"]
        if (first or period) <= period <= (last or period):
            prefix = bundle_prefix(TenantMonth(tenant, period), event.body["details"]["identity"])
            found.append((event, prev_hash, body, prefix))
    if not found:
        raise EvidenceError(ReasonCode.BUNDLE_NOT_FOUND, f"the ledger records no bundle of {tenant} in "
                            f"{first or 'the first period'}..{last or 'the last period'}")
    return found


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


def _checkpoints(archive: ArtifactStore, publications: list[_Publication], witnessed: _Witnessed
                 ) -> dict[int, str]:
    """For each publication (by leaf index), the key of the checkpoint its proof is against: the earliest covering
    checkpoint co-signed by a witness of the archive, else the earliest covering one."""
    keys = checkpoint_keys(archive)
    sizes = [int(key.rsplit("/", 1)[-1][:12]) for key in keys]
    chosen = {}
    for publication in publications:
        start = bisect.bisect_right(sizes, publication.leaf_index)  # the first checkpoint with size > leaf index
        if start == len(keys):
            raise EvidenceError(ReasonCode.LEDGER_NOT_CHECKPOINTED, f"no published checkpoint covers the publication "
                                f"of {publication.prefix} yet: run `evidence ledger checkpoint` first")
        chosen[publication.leaf_index] = next((key for key in keys[start:] if witnessed(key)), keys[start])
    return chosen


def _write(archive: ArtifactStore, package: LocalStore, tenant: str, first: str | None, last: str | None,
           publications: list[_Publication], chosen: dict[int, str], tree: merkle.Tree) -> Index:
    for key in archive.list("keys"):  # verbatim, whatever is there (PEMs, a keyring document)
        _copy(archive, key, package, key, max_bytes=MAX_KEYS_OBJECT_BYTES)
    for key in archive.list(WITNESS_PREFIX):
        _copy(archive, key, package, f"{WITNESS}/{key.rsplit('/', 1)[-1]}", max_bytes=MAX_KEY_BYTES)
    statement_keys = published_statement_keys(archive)
    checkpoints = sorted(set(chosen.values()) | {checkpoint_keys(archive)[-1]},
                         key=lambda key: int(key.rsplit("/", 1)[-1][:12]))
    signed = {key: _signed_checkpoint(archive, package, key, statement_keys, tree) for key in checkpoints}
    for old, new in zip(checkpoints, checkpoints[1:]):
        (old_size, old_root), (new_size, new_root) = signed[old], signed[new]
        proof = tree.consistency_proof(old_size, new_size)
        if not merkle.verify_consistency(old_size, new_size, proof, old_root, new_root):
            raise EvidenceError(ReasonCode.LEDGER_INVALID, f"checkpoint {new} does not extend {old}")
        package.put_once(consistency_path(old, new),
                         _json({"old": old, "new": new, "proof": [h.hex() for h in proof]}))
    for publication in publications:
        _write_bundle(archive, package, publication, chosen[publication.leaf_index], signed, tree)
    index = Index(tenant, first, last, datetime.now(timezone.utc).isoformat(timespec="seconds"), checkpoints,
                  [consistency_path(old, new) for old, new in zip(checkpoints, checkpoints[1:])],
                  [publication.prefix for publication in publications])
    package.put_once(INDEX, _json(index.document()))  # last: the index names only what is already there
    return index


def _signed_checkpoint(archive: ArtifactStore, package: LocalStore, key: str, statement_keys: dict,
                       tree: merkle.Tree) -> tuple[int, bytes]:
    """Copy a checkpoint verbatim once its signature verifies and its root is the ledger's at its size."""
    checkpoint = read_checkpoint(archive, key, statement_keys)
    size, root = checkpoint["size"], bytes.fromhex(checkpoint["root_sha256"])
    if size > len(tree.leaves) or tree.root(0, size) != root:
        raise EvidenceError(ReasonCode.LEDGER_INVALID, f"the ledger's first {size} events differ from signed "
                            f"checkpoint {key}")
    _copy(archive, key, package, key, max_bytes=jsonread.MAX_BYTES)
    return size, root


def _write_bundle(archive: ArtifactStore, package: LocalStore, publication: _Publication, checkpoint: str,
                  signed: dict[str, tuple[int, bytes]], tree: merkle.Tree) -> None:
    """The bundle's files, if they are the ones its event committed; its event; its verified inclusion proof."""
    prefix, details = publication.prefix, publication.event.body["details"]
    files = {
        "report_sha256": _copy(archive, f"{prefix}/{REPORT}", package, f"{prefix}/{REPORT}", details["report_sha256"],
                               MAX_REPORT_BYTES + SIGNATURE_ALLOWANCE),
        "statement_sha256": _copy(archive, f"{prefix}/{STATEMENT}", package, f"{prefix}/{STATEMENT}",
                                  details["statement_sha256"], jsonread.MAX_BYTES),
    }
    versions = [(archive.version_id(f"{prefix}/{name}"), details.get(f"{field}_version_id"))
                for name, field in ((REPORT, "report"), (STATEMENT, "statement"))]
    if any(current != committed for current, committed in versions):  # a versioned archive (S3) only
        raise EvidenceError(ReasonCode.LEDGER_INVALID, f"the archive's current version of a file of {prefix} is not "
                            "the committed one")
    manifest = archive.get(f"{prefix}/{MANIFEST}", max_bytes=jsonread.MAX_BYTES)
    if not commits_bundle(publication.event, prefix, jsonread.loads(manifest, ReasonCode.MANIFEST_INVALID, MANIFEST),
                          files):
        raise EvidenceError(ReasonCode.LEDGER_INVALID, f"the archive's {prefix} is not what the ledger committed")
    package.put_once(f"{prefix}/{MANIFEST}", manifest)
    size, root = signed[checkpoint]
    index = publication.leaf_index
    proof = tree.inclusion_proof(index, size)
    if merkle.leaf_hash(publication.body) != tree.leaves[index] or not merkle.verify_inclusion(
            index, size, tree.leaves[index], proof, root):
        raise EvidenceError(ReasonCode.LEDGER_INVALID, f"the inclusion proof of {prefix} does not reach {checkpoint}")
    seq = publication.event.seq
    package.put_once(event_path(seq), publication.body)
    package.put_once(inclusion_path(prefix), _json({
        "event": event_path(seq), "event_seq": seq, "prev_hash": publication.prev_hash,
        "event_hash": publication.event.event_hash, "leaf_index": index, "tree_size": size, "checkpoint": checkpoint,
        "proof": [h.hex() for h in proof],
    }))


def _copy(archive: ArtifactStore, key: str, package: LocalStore, target: str, expected_sha256: str | None = None,
          max_bytes: int | None = None) -> str:
    """Stream one object from the archive into the package (hashed once, on the way; digest checked when given)."""
    with package.spool(package.root) as spool:
        sha256 = archive.get_file(key, spool, expected_sha256, max_bytes)
        package.put_spooled(target, spool, sha256, spool.tell())
    return sha256


def _json(document: dict) -> bytes:
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
