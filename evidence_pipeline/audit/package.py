"""Offline audit packages: the format, and its verification with nothing but the package folder.

A package (format ``evidence-audit-package``, version 2) is a folder laid out like the archive it came from, so
that the bundles verify with the same code (`verify.verify_bundle`, in `verify_many`'s worker processes), plus
the proofs that tie each bundle to a signed checkpoint:

    package.json                               the index (below), signed: package_index.py
    keys/…                                     the archive's keys/ folder, copied verbatim
    bundles/<tenant>/<YYYY-MM>/<identity>/     report.pdf, statement.dsse.json, manifest.json, copied verbatim
    ledger/checkpoints/<size:012d>.json        the signed checkpoints the proofs need, copied verbatim
    events/<seq:012d>.json                     each bundle's `bundle.published` event body: the exact bytes hashed;
                                               and each authorization event's (below)
    proofs/inclusion/<tenant>/<YYYY-MM>/<identity>.json      the event's inclusion proof against one checkpoint
    proofs/authorizations/<seq:012d>.json      an authorization event's inclusion proof (the same format)
    proofs/consistency/<old:012d>-<new:012d>.json            between consecutive checkpoints of the package
    proofs/tlog/<tenant>/<YYYY-MM>/<identity>.tlog-proof     the event's c2sp.org/tlog-proof@v1 (with notes)
    assessment-results/<tenant>/<YYYY-MM>/<identity>.json    its OSCAL Assessment Results (oscal.py)
    assessment-results/package.json            one OSCAL Assessment Results of every tenant-month: theirs, in order
    witness/<key id>.pem                       the witness's public key, if the archive has one: a convenience
                                               that is never trusted unless the auditor pins its id
    documents/<tenant>/…                       the tenant's document artifacts, copied verbatim, with their
                                               events under events/ and proofs under proofs/documents/, and
    uploads/<tenant>/<sha256>                  the uploads' bytes, only when exported --with-uploads:
                                               package_documents.py

The authorization events are every event of the tenant that stores a signed request in details["authorization"]
(actors/roles.py RECORDED_AS: template submit and approve, replays of its jobs, ruleset canary and rollback,
offboarding, token issue and revoke, its registration), plus what the offline re-check folds the actor registry
from: every actor event and every authorized `keys.rotated` / `keys.revoked` event (tenant ""). The index lists
them in ledger order with the exporting deployment's EVIDENCE_ACTION_MAX_AGE_SECONDS; package_authorizations.py
proves and re-checks them.

In version 2 (package_index.py) package.json is a DSSE envelope of an in-toto statement signed with the statement
key, whose subjects are every other file of the package and whose predicate is the index; version 1's was the index
itself, unsigned (still read, and refused unless the auditor allows it). The index and the proof files are plain
JSON; their fields are documented in docs/auditors/formats.md, and
docs/auditors/own-verifier.md holds a short verifier written from that description alone. Nothing in this module opens
a database or a network connection, and it imports no SQLAlchemy (a test checks the modules loaded).

Over 400 lines because the format and its reader stay together: every field written is checked a few lines from
where it is read. The re-check of the authorization events, which reads nothing of the format but their bodies,
is package_authorizations.py's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, TypeGuard, cast

from cryptography.hazmat.primitives.asymmetric import ed25519

from evidence_pipeline import jsonread
from evidence_pipeline.actors.offline import DEFAULT_MAX_AGE_SECONDS
from evidence_pipeline.audit.checkpoints import PREFIX as CHECKPOINTS
from evidence_pipeline.audit.checkpoints import CheckpointKeys, check_witness, checkpoint_key, commits_bundle
from evidence_pipeline.audit.locations import Location
from evidence_pipeline.audit.oscal import check_bound, check_package_bound
from evidence_pipeline.audit.package_index import (
    INDEX_MAX_BYTES,
    SignedIndex,
    check_files,
    check_key_validity,
    is_envelope,
    open_signed_index,
)
from evidence_pipeline.audit.verify import Check, Verification
from evidence_pipeline.audit.verify_many import Outcome, verify_all
from evidence_pipeline.audit.witnessing import NotePins, check_notes, note_key, package_note
from evidence_pipeline.errors import UNAVAILABLE_CODES, EvidenceError, ReasonCode
from evidence_pipeline.ledger import merkle
from evidence_pipeline.ledger.chain import chain_hash
from evidence_pipeline.models import PERIOD, TENANT_ID, LedgerEvent
from evidence_pipeline.monthly.bundle import MANIFEST, REPORT, STATEMENT
from evidence_pipeline.signed_note import MAX_NOTE_BYTES, NoteError
from evidence_pipeline.signing.keys import (
    MAX_KEY_BYTES,
    ed25519_public,
    pinned_public_key,
    public_key_id,
)
from evidence_pipeline.store import DISCARD, ArtifactStore
from evidence_pipeline.store.local import LocalStore
from evidence_pipeline.witness.policy import TlogPolicy
from evidence_pipeline.witness.proof import MAX_PROOF_BYTES, parse_tlog_proof

FORMAT = "evidence-audit-package"
VERSION = 2
INDEX = "package.json"
EVENTS = "events"
INCLUSION = "proofs/inclusion"
AUTHORIZATION_PROOFS = "proofs/authorizations"
CONSISTENCY = "proofs/consistency"
TLOG_PROOFS = "proofs/tlog"
ASSESSMENTS = "assessment-results"
WITNESS = "witness"
_HASH = re.compile(r"[0-9a-f]{64}")
_IDENTITY = _HASH
_WITNESS_ID = re.compile(r"ed25519-[0-9a-f]{16}")
_INDEX_FIELDS = {"format", "version", "tenant", "from", "to", "exported_at", "checkpoints", "consistency", "bundles"}
# Added within version 1, both or neither: a package exported before them lists no authorizations, and still verifies.
_AUTHORIZATION_FIELDS = {"authorizations", "action_max_age_seconds"}
_VERSION_2_FIELDS = _INDEX_FIELDS | _AUTHORIZATION_FIELDS | {"documents"}
_EVENT_PATH = re.compile(rf"{EVENTS}/([0-9]{{12}})\.json")
_INCLUSION_FIELDS = {"event", "event_seq", "prev_hash", "event_hash", "leaf_index", "tree_size", "checkpoint", "proof"}


def event_path(seq: int) -> str:
    return f"{EVENTS}/{seq:012d}.json"


def inclusion_path(bundle: str) -> str:
    return f"{INCLUSION}/{bundle.removeprefix('bundles/')}.json"


def tlog_proof_path(bundle: str) -> str:
    """The bundle's c2sp.org/tlog-proof@v1 file (its publication event, to the package's newest checkpoint)."""
    return f"{TLOG_PROOFS}/{bundle.removeprefix('bundles/')}.tlog-proof"


PACKAGE_ASSESSMENT = f"{ASSESSMENTS}/package.json"  # no tenant's folder: a tenant id has no dot


def assessment_path(bundle: str) -> str:
    """The bundle's OSCAL Assessment Results, as the exporter verified it (audit/oscal.py)."""
    return f"{ASSESSMENTS}/{bundle.removeprefix('bundles/')}.json"


def authorization_proof_path(seq: int) -> str:
    return f"{AUTHORIZATION_PROOFS}/{seq:012d}.json"


def _authorization_seq(entry: dict[str, Any]) -> int | None:
    """The seq of an index's authorization entry, if both its paths are the ones the format gives that seq."""
    matched = _EVENT_PATH.fullmatch(entry["event"]) if isinstance(entry["event"], str) else None
    seq = int(matched.group(1)) if matched else None
    return seq if seq and entry == {"event": event_path(seq), "inclusion": authorization_proof_path(seq)} else None


def consistency_path(old: str, new: str) -> str:
    return f"{CONSISTENCY}/{checkpoint_size(old):012d}-{checkpoint_size(new):012d}.json"


def checkpoint_size(checkpoint: str) -> int:
    return int(checkpoint.rsplit("/", 1)[-1][:12])


@dataclass(frozen=True)
class Index:
    """package.json, checked: every path in it is the one the format gives it."""

    tenant: str
    first: str | None  # the exported range of periods, inclusive (None: unbounded)
    last: str | None
    exported_at: str
    checkpoints: list[str]  # checkpoint keys, oldest (smallest) first
    consistency: list[str]  # one proof per consecutive pair of checkpoints
    bundles: list[str]  # bundle prefixes, bundles/<tenant>/<YYYY-MM>/<identity>
    authorizations: list[int]  # seqs of the authorization events, in ledger order
    action_max_age_seconds: float  # the exporting deployment's, which the re-check of the signed requests uses
    documents: dict[str, Any] | None = None  # version 2: the document artifacts (package_documents.py checks them)
    version: int = VERSION
    signed: SignedIndex | None = field(default=None, compare=False)  # version 2: the envelope it came in

    def document(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": self.version,
            "tenant": self.tenant,
            "from": self.first,
            "to": self.last,
            "exported_at": self.exported_at,
            "checkpoints": self.checkpoints,
            "consistency": self.consistency,
            "bundles": [{"path": bundle, "inclusion": inclusion_path(bundle)} for bundle in self.bundles],
            "authorizations": [
                {"event": event_path(seq), "inclusion": authorization_proof_path(seq)} for seq in self.authorizations
            ],
            "action_max_age_seconds": self.action_max_age_seconds,
        } | ({"documents": self.documents} if self.version >= 2 else {})


def parse_index(data: bytes, keys: CheckpointKeys) -> Index:
    """package.json as an Index; PACKAGE_INVALID when it is not exactly what its version of the format says:
    version 2 signed, version 1 unsigned. A version 2 index is read only once its signature by one of ``keys``
    verified over the statement's bytes (package_index.open_signed_index)."""
    document = jsonread.loads(data, ReasonCode.PACKAGE_INVALID, INDEX, max_bytes=INDEX_MAX_BYTES)
    signed = None
    if is_envelope(document):
        signed = open_signed_index(document, keys)
        document = signed.document
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise EvidenceError(ReasonCode.PACKAGE_INVALID, f"{INDEX} is not an {FORMAT} index")
    version = document.get("version")
    if version not in (1, VERSION) or (version == VERSION) != (signed is not None):
        raise EvidenceError(
            ReasonCode.PACKAGE_INVALID,
            f"{INDEX} is format version {version!r}"
            + (" unsigned" if signed is None else " signed")
            + "; this verifier reads a signed "
            f"version {VERSION} index and an unsigned version 1 index",
        )
    try:
        index = Index(
            document["tenant"],
            document["from"],
            document["to"],
            document["exported_at"],
            document["checkpoints"],
            document["consistency"],
            [
                entry["path"]
                for entry in document["bundles"]
                if entry == {"path": entry["path"], "inclusion": inclusion_path(entry["path"])}
            ],
            # a None (an entry not of the format) is refused by _index_problem below
            cast(list[int], [_authorization_seq(entry) for entry in document.get("authorizations", [])]),
            document.get("action_max_age_seconds", DEFAULT_MAX_AGE_SECONDS),
            document.get("documents"),
            version,
            signed,
        )
        problem = _index_problem(document, index)
    except (KeyError, TypeError, AttributeError, ValueError):
        problem = "misses a field or has one of the wrong type"
    if problem:
        raise EvidenceError(ReasonCode.PACKAGE_INVALID, f"{INDEX} {problem}")
    return index


def _index_problem(document: dict[str, Any], index: Index) -> str | None:
    """What is wrong with a parsed index, or None."""
    allowed = (
        [_VERSION_2_FIELDS] if index.version == VERSION else [_INDEX_FIELDS, _INDEX_FIELDS | _AUTHORIZATION_FIELDS]
    )
    if document.keys() not in allowed:
        return f"has other fields than version {index.version} defines"
    if index.version == VERSION and not (
        isinstance(index.documents, dict) and isinstance(index.documents.get("artifacts"), list)
    ):
        return "has no documents section"
    if not isinstance(index.tenant, str) or not TENANT_ID.fullmatch(index.tenant):
        return "names no valid tenant"
    if any(p is not None and not (isinstance(p, str) and PERIOD.fullmatch(p)) for p in (index.first, index.last)):
        return "has a range bound that is not YYYY-MM"
    if not isinstance(index.exported_at, str):
        return "has no export time"
    if len(index.bundles) != len(document["bundles"]) or not (
        index.bundles or index.documents and index.documents["artifacts"]
    ):
        return "lists no bundle and no document artifact, or a bundle whose inclusion proof is not at its place"
    pattern = re.compile(rf"bundles/{re.escape(index.tenant)}/([0-9]{{4}}-[0-9]{{2}})/[0-9a-f]{{64}}")
    for bundle in index.bundles:
        matched = isinstance(bundle, str) and pattern.fullmatch(bundle)
        if not matched or not _in_range(matched.group(1), index.first, index.last):
            return f"lists {bundle!r}, which is not a bundle of {index.tenant} in the exported range"
    if len(set(index.bundles)) != len(index.bundles):
        return "lists a bundle twice"
    seqs = index.authorizations
    if None in seqs or seqs != sorted(set(seqs)):
        return "lists an authorization event out of ledger order, twice, or whose files are not at their place"
    maximum = index.action_max_age_seconds
    if type(maximum) not in (int, float) or not maximum > 0:
        return "has no positive action_max_age_seconds"
    checkpoints = index.checkpoints
    if not checkpoints or not all(
        isinstance(key, str) and re.fullmatch(rf"{CHECKPOINTS}/[0-9]{{12}}\.json", key) for key in checkpoints
    ):
        return "lists no checkpoint, or a checkpoint that is not at its place"
    sizes = [checkpoint_size(key) for key in checkpoints]
    if sizes != sorted(set(sizes)) or sizes[0] < 1:
        return "lists checkpoints out of order"
    if index.consistency != [consistency_path(old, new) for old, new in zip(checkpoints, checkpoints[1:])]:
        return "does not list one consistency proof per consecutive pair of checkpoints"
    return None


def _in_range(period: str, first: str | None, last: str | None) -> bool:
    return PERIOD.fullmatch(period) is not None and (first or period) <= period <= (last or period)


class PackageStore(LocalStore):
    """A package folder, read like an archive (no symlink followed, regular files only).

    A package is not versioned. A bundle file's version is the archive version that export copied (export checks
    that it is the committed one), as the bundle's manifest records it; the `ledger_event` check vouches for the
    manifest, version ids included."""

    def __init__(self, root: Path):
        super().__init__(root, scheme="package")

    def version_id(self, key: str) -> str | None:
        folder, _, name = key.rpartition("/")
        if name not in (REPORT, STATEMENT):
            return None
        try:
            manifest: Any = jsonread.loads(
                self.get(f"{folder}/{MANIFEST}", max_bytes=jsonread.MAX_BYTES), ReasonCode.MANIFEST_INVALID, MANIFEST
            )
            version = manifest["artifacts"][name].get("version_id")
        except EvidenceError as error:
            if error.code in UNAVAILABLE_CODES:
                raise
            return None
        except (KeyError, TypeError, AttributeError):
            return None
        return version if isinstance(version, str) else None


@dataclass(frozen=True)
class PackageKeys:
    """The statement keys a package's index and checkpoints are checked with, and why there are none (its keyring
    did not verify, or under another root than the one pinned), when so."""

    keys: CheckpointKeys
    problem: EvidenceError | None = None

    @classmethod
    def of(cls, store: ArtifactStore, key_ids: frozenset[str], root_ids: frozenset[str]) -> PackageKeys:
        """Those the package's keyring lists (pinned by root), or its keys."""
        try:
            return cls(CheckpointKeys.of(store, key_ids, root_ids))
        except EvidenceError as error:
            if error.code in UNAVAILABLE_CODES:
                raise
            return cls(CheckpointKeys({}, None), error)  # nothing can verify: each check fails on its own line


def open_package(
    argument: str, key_ids: frozenset[str] = frozenset(), root_ids: frozenset[str] = frozenset()
) -> tuple[LocalStore, Index, PackageKeys]:
    """The package folder as a store (read like an archive: no symlink followed), its index, read once its
    signature verified (PACKAGE_INDEX_SIGNATURE_INVALID otherwise: nothing of an unauthenticated index is read),
    and the keys it was checked with."""
    path = Path(argument)
    if not path.is_dir():
        raise EvidenceError(
            ReasonCode.PACKAGE_NOT_FOUND, f"{argument} is not a folder (a .tar or .zip must be unpacked first)"
        )
    store = PackageStore(path.resolve())
    if not store.exists(INDEX):
        raise EvidenceError(ReasonCode.PACKAGE_NOT_FOUND, f"{argument} holds no {INDEX}")
    keys = PackageKeys.of(store, key_ids, root_ids)
    try:
        index = parse_index(store.get(INDEX, max_bytes=INDEX_MAX_BYTES), keys.keys)
    except EvidenceError as error:
        if error.code != ReasonCode.PACKAGE_INDEX_SIGNATURE_INVALID or keys.problem is None:
            raise
        raise EvidenceError(
            error.code,
            f"package.json's signature cannot be checked: the package's keys are "
            f"unknown ({keys.problem.code}: {keys.problem.message})",
        ) from None
    return store, index, keys


def witness_public_key(store: ArtifactStore, pinned: str) -> ed25519.Ed25519PublicKey | str:
    """``--require-witness``: a PEM file of the witness's public key, or its key id, which pins the copy in the
    package's witness/ folder (the id names the key's own bytes). Returns the key, or the pinned id when the
    package holds no key by that id (every checkpoint then lacks a verifiable witness signature)."""
    if _WITNESS_ID.fullmatch(pinned) and not Path(pinned).exists():
        key = f"{WITNESS}/{pinned}.pem"
        if not store.exists(key):
            return pinned
        public = ed25519_public(store.get(key, max_bytes=MAX_KEY_BYTES))
        if public is None or public_key_id(public) != pinned:
            return pinned  # a swapped file cannot borrow the pinned id
        return public
    return pinned_public_key(Path(pinned), "--require-witness (or a witness key id, ed25519-…)")


@dataclass
class PackageChecks:
    """What holds the package together: its contents against the index, each checkpoint (and its witness), the
    consistency between consecutive checkpoints. ``roots`` holds the (size, root) of each checkpoint that
    verified: the only roots that the bundles' inclusion proofs may reach."""

    checks: list[Check] = field(default_factory=list)
    roots: dict[str, tuple[int, bytes]] = field(default_factory=dict)
    checkpoint_key_ids: set[str] = field(default_factory=set)
    witness_id: str | None = None

    @property
    def ok(self) -> bool:
        return all(check.passed for check in self.checks)

    @property
    def codes(self) -> list[str]:
        return sorted({check.code for check in self.checks if not check.passed and check.code})


def check_package(
    store: LocalStore,
    index: Index,
    *,
    package_keys: PackageKeys,
    witness: ed25519.Ed25519PublicKey | str | None = None,
    policy: TlogPolicy | None = None,
    allow_unsigned_index: bool = False,
    origin: str | None = None,
    stated: bool = True,
) -> PackageChecks:
    """Every package-level check; ``witness``: the pinned in-process witness key of earlier versions (or an id the
    package has no key for), whose valid signature every checkpoint must then carry; ``policy``: the outside
    witnesses, N of which must have co-signed the newest checkpoint (to which every other is consistent), and
    whose cosignatures on every checkpoint's note must verify; ``origin``: the log's pinned origin, which every
    note must state (None: nothing pins it, and a note is refused; ``stated``: the auditor named it, and the newest
    checkpoint must have a note); ``allow_unsigned_index``: accept a version 1 index."""
    result = PackageChecks()
    keys = package_keys.keys
    if package_keys.problem is not None:
        result.checks.append(Check("keyring", False, package_keys.problem.code, package_keys.problem.message))
    signed = index.signed
    if signed is None:
        result.checks.append(
            Check(
                "index_signature",
                allow_unsigned_index,
                None if allow_unsigned_index else ReasonCode.PACKAGE_INDEX_UNSIGNED,
                f"{INDEX} is an unsigned version 1 index"
                + (", accepted by --allow-unsigned-index" if allow_unsigned_index else ""),
            )
        )
    else:
        result.checks.append(run_check("index_signature", lambda: check_key_validity(signed, index.exported_at, keys)))
        result.checks.append(run_check("files", lambda: check_files(store, store.root, INDEX, signed.subjects)))
    result.checks.append(run_check("contents", lambda: _check_contents(store, index)))
    if isinstance(witness, str):
        result.witness_id = witness
    elif witness is not None:
        result.witness_id = public_key_id(witness)
    bodies = []  # the checkpoints that verified, whose notes are checked next
    for key in index.checkpoints:
        checkpoint = _checkpoint(store, key, keys)
        result.checks.append(run_check(f"checkpoint {checkpoint_size(key)}", lambda: checkpoint))
        if isinstance(checkpoint, dict):
            bodies.append(checkpoint)
            result.roots[key] = (checkpoint["size"], bytes.fromhex(checkpoint["root_sha256"]))
            result.checkpoint_key_ids.add(checkpoint["key_id"])
        if witness is not None:
            result.checks.append(
                run_check(f"witness {checkpoint_size(key)}", lambda: _check_witness(store, key, witness))
            )
    pins = NotePins(origin, policy, checkpoint_size(index.checkpoints[-1]), stated)
    for size, error in check_notes(bodies, partial(package_note, store), keys.keys, pins):
        result.checks.append(
            Check(f"note {size}", True) if error is None else Check(f"note {size}", False, error.code, error.message)
        )
    for old, new in zip(index.checkpoints, index.checkpoints[1:]):
        result.checks.append(
            run_check(
                f"consistency {checkpoint_size(old)} -> {checkpoint_size(new)}",
                lambda: _check_consistency(store, old, new, result.roots),
            )
        )
    if store.exists(PACKAGE_ASSESSMENT):  # exported since issue 51's package-wide document
        result.checks.append(
            run_check(
                "package_assessment_results",
                lambda: check_package_bound(
                    _read(store, PACKAGE_ASSESSMENT), [_read(store, assessment_path(b)) for b in index.bundles]
                ),
            )
        )
    return result


def _read(store: ArtifactStore, key: str) -> bytes:
    try:
        return store.get(key, max_bytes=jsonread.MAX_BYTES)
    except EvidenceError as error:
        _missing_is_incomplete(error, key)
        raise


def run_check(name: str, check: Callable[[], object]) -> Check:
    try:
        outcome = check()
        if isinstance(outcome, EvidenceError):
            raise outcome
    except EvidenceError as error:
        if error.code in UNAVAILABLE_CODES:
            raise
        return Check(name, False, error.code, error.message)
    return Check(name, True)


def _check_contents(store: ArtifactStore, index: Index) -> None:
    """Every file the index lists or implies is there, and no bundle is there that the index does not list."""
    bundle_files = set(store.list("bundles"))
    listed = set(index.bundles)
    found = {"/".join(key.split("/")[:4]) for key in bundle_files if key.count("/") >= 3}
    expected = [f"{b}/{name}" for b in index.bundles for name in (REPORT, STATEMENT, MANIFEST)]
    present = bundle_files | set(store.list("proofs")) | set(store.list(CHECKPOINTS)) | set(store.list(EVENTS))
    missing = [
        key
        for key in [
            *expected,
            *map(inclusion_path, index.bundles),
            *index.checkpoints,
            *index.consistency,
            *map(event_path, index.authorizations),
            *map(authorization_proof_path, index.authorizations),
        ]
        if key not in present
    ]
    if missing:
        raise EvidenceError(
            ReasonCode.PACKAGE_INCOMPLETE,
            f"{len(missing)} file(s) the index lists are missing: "
            + ", ".join(missing[:5])
            + (", …" if len(missing) > 5 else ""),
        )
    unlisted = sorted(found - listed)
    if unlisted:
        raise EvidenceError(
            ReasonCode.PACKAGE_INVALID,
            "the package holds bundles its index does not list: "
            + ", ".join(unlisted[:5])
            + (", …" if len(unlisted) > 5 else ""),
        )


def _checkpoint(store: ArtifactStore, key: str, keys: CheckpointKeys) -> dict[str, Any] | EvidenceError:
    try:
        return keys.read(store, key)
    except EvidenceError as error:
        if error.code in UNAVAILABLE_CODES:
            raise
        code = (
            ReasonCode.PACKAGE_INCOMPLETE if error.code == ReasonCode.STORE_NOT_FOUND else ReasonCode.CHECKPOINT_INVALID
        )
        return EvidenceError(code, f"checkpoint {key} does not verify ({error.code}: {error.message})")


def _check_witness(store: ArtifactStore, key: str, witness: ed25519.Ed25519PublicKey | str) -> None:
    if isinstance(witness, str):
        raise EvidenceError(
            ReasonCode.WITNESS_SIGNATURE_MISSING,
            f"the package holds no public key whose id is the pinned {witness}: pass its PEM file",
        )
    check_witness(store.get(key, max_bytes=jsonread.MAX_BYTES), witness, key)


def _check_consistency(store: ArtifactStore, old: str, new: str, roots: dict[str, tuple[int, bytes]]) -> None:
    """The consistency proof between two consecutive checkpoints reaches both signed roots."""
    if old not in roots or new not in roots:
        raise EvidenceError(ReasonCode.PROOF_INVALID, f"{old} or {new} did not verify: nothing to be consistent with")
    path = consistency_path(old, new)
    document = _json(store, path)
    hashes = document.get("proof") if isinstance(document, dict) else None
    if not isinstance(document, dict) or document.keys() != {"old", "new", "proof"} or not _hashes(hashes):
        raise EvidenceError(ReasonCode.PACKAGE_INVALID, f"{path} is not a consistency proof")
    (old_size, old_root), (new_size, new_root) = roots[old], roots[new]
    if (document["old"], document["new"]) != (old, new) or not merkle.verify_consistency(
        old_size, new_size, [bytes.fromhex(h) for h in hashes], old_root, new_root
    ):
        raise EvidenceError(ReasonCode.PROOF_INVALID, f"checkpoint {new} is not an append-only extension of {old}")


def _json(store: ArtifactStore, key: str) -> object:
    try:
        data = store.get(key, max_bytes=jsonread.MAX_BYTES)
    except EvidenceError as error:
        if error.code == ReasonCode.STORE_NOT_FOUND:
            raise EvidenceError(ReasonCode.PACKAGE_INCOMPLETE, f"{key} is missing") from None
        raise
    return jsonread.loads(data, ReasonCode.PACKAGE_INVALID, key)


def _hashes(value: object) -> TypeGuard[list[str]]:
    return isinstance(value, list) and all(isinstance(h, str) and _HASH.fullmatch(h) for h in value)


def check_in_log(
    roots: dict[str, tuple[int, bytes]], store: ArtifactStore, prefix: str, verification: Verification
) -> None:
    """A bundle's ledger checks, after verify_bundle's (in the same worker): its `bundle.published` event is in
    a verified checkpoint (``inclusion_proof``), and it is exactly this bundle's files and manifest
    (``ledger_event``)."""
    proof = None

    def read_proof() -> dict[str, Any]:
        nonlocal proof
        proof = read_inclusion(store, inclusion_path(prefix))
        return proof

    inclusion = run_check("inclusion_proof", lambda: check_inclusion(store, read_proof(), roots))
    verification.checks.append(inclusion)
    if proof is not None:
        verification.checks.append(run_check("ledger_event", lambda: _check_event(store, prefix, proof)))
        newest = max(roots.values(), default=None)
        if newest is not None and store.exists(note_key(newest[0])):  # else no note to prove to: no tlog proofs
            verification.checks.append(run_check("tlog_proof", lambda: check_tlog_proof(store, prefix, proof, newest)))
    if store.exists(assessment_path(prefix)):  # exported since issue 51
        verification.checks.append(
            run_check(
                "assessment_results",
                lambda: check_bound(
                    store.get(assessment_path(prefix), max_bytes=jsonread.MAX_BYTES),
                    _json(store, f"{prefix}/{MANIFEST}"),
                ),
            )
        )


def check_tlog_proof(store: ArtifactStore, prefix: str, proof: dict[str, Any], newest: tuple[int, bytes]) -> None:
    """The bundle's c2sp.org/tlog-proof@v1 file: the event's index and an inclusion proof reaching the root of the
    note of the ``newest`` (size, root) verified checkpoint, that note byte for byte the package's (whose
    signatures and cosignatures check_notes verifies)."""
    path = tlog_proof_path(prefix)
    try:
        tlog = parse_tlog_proof(store.get(path, max_bytes=MAX_PROOF_BYTES))
        body = tlog.reaches(merkle.leaf_hash(event_bytes(store, proof["event"])))
    except EvidenceError as error:
        _missing_is_incomplete(error, path)
        raise
    except NoteError as error:
        raise EvidenceError(ReasonCode.PROOF_INVALID, f"{path}: {error}") from None
    if (
        tlog.index != proof["leaf_index"]
        or (body.size, body.root) != newest
        or tlog.checkpoint.encode() != store.get(note_key(newest[0]), max_bytes=MAX_NOTE_BYTES)
    ):
        raise EvidenceError(
            ReasonCode.PROOF_INVALID,
            f"{path} does not prove this bundle's event to the package's newest checkpoint note",
        )


def read_inclusion(store: ArtifactStore, path: str) -> dict[str, Any]:
    """An inclusion proof file, checked for shape (a bundle's or an authorization event's: the same format)."""
    document: Any = _json(store, path)
    try:
        valid = (
            document.keys() == _INCLUSION_FIELDS
            and all(type(document[name]) is int for name in ("event_seq", "leaf_index", "tree_size"))
            and document["event_seq"] >= 1
            and 0 <= document["leaf_index"] < document["tree_size"]
            and document["event"] == event_path(document["event_seq"])
            and all(
                isinstance(document[name], str) and _HASH.fullmatch(document[name])
                for name in ("prev_hash", "event_hash")
            )
            and document["checkpoint"] == checkpoint_key(document["tree_size"])
            and _hashes(document["proof"])
        )
    except (AttributeError, TypeError):
        valid = False
    if not valid:
        raise EvidenceError(ReasonCode.PACKAGE_INVALID, f"{path} is not an inclusion proof")
    return cast(dict[str, Any], document)  # checked above: an inclusion proof


def event_bytes(store: ArtifactStore, path: str) -> bytes:
    try:
        return store.get(path, max_bytes=jsonread.MAX_BYTES)
    except EvidenceError as error:
        if error.code == ReasonCode.STORE_NOT_FOUND:
            raise EvidenceError(ReasonCode.PACKAGE_INCOMPLETE, f"{path} is missing") from None
        raise


def read_event(store: ArtifactStore, seq: int, tenants: tuple[str, ...]) -> tuple[bytes, dict[str, Any]]:
    """An event of the package's (its bytes and body), which must be of one of ``tenants`` (PACKAGE_INVALID)."""
    text = event_bytes(store, event_path(seq))
    body = jsonread.loads(text, ReasonCode.PACKAGE_INVALID, event_path(seq))
    if not isinstance(body, dict) or body.get("tenant") not in tenants or not isinstance(body.get("details"), dict):
        named = " or ".join(tenant or "none" for tenant in tenants)
        raise EvidenceError(ReasonCode.PACKAGE_INVALID, f"event {seq} is not an event of {named}")
    return text, body


def prove_event(
    store: ArtifactStore, seq: int, text: bytes, proof: dict[str, Any], roots: dict[str, tuple[int, bytes]]
) -> None:
    """An event's bytes are in the log: its inclusion proof (read_inclusion's) is about it and reaches a verified
    checkpoint (PROOF_INVALID), and its chain hash is sha256(prev_hash || bytes)."""
    if proof["event_seq"] != seq:
        raise EvidenceError(ReasonCode.PACKAGE_INVALID, f"the inclusion proof of event {seq} proves another event")
    check_inclusion(store, proof, roots)
    if chain_hash(proof["prev_hash"], text) != proof["event_hash"]:
        raise EvidenceError(ReasonCode.PROOF_INVALID, f"event {seq}'s hash is not sha256(prev_hash || its bytes)")


def check_inclusion(store: ArtifactStore, proof: dict[str, Any], roots: dict[str, tuple[int, bytes]]) -> None:
    """RFC 9162: the event's leaf hash and the audit path reach the signed root of the checkpoint it names."""
    checkpoint = proof["checkpoint"]
    if checkpoint not in roots:
        raise EvidenceError(
            ReasonCode.PROOF_INVALID,
            f"the proof names checkpoint {checkpoint}, which the package does not hold or which did not verify",
        )
    size, root = roots[checkpoint]
    leaf = merkle.leaf_hash(event_bytes(store, proof["event"]))
    if size != proof["tree_size"] or not merkle.verify_inclusion(
        proof["leaf_index"], size, leaf, [bytes.fromhex(h) for h in proof["proof"]], root
    ):
        raise EvidenceError(
            ReasonCode.PROOF_INVALID, f"the event's inclusion proof does not reach the signed root of {checkpoint}"
        )


def _check_event(store: ArtifactStore, prefix: str, proof: dict[str, Any]) -> None:
    """The event describes this bundle: its files' digests, and the manifest it derives is the bundle's, with the
    event's chain hash (the ledger's chain_hash: sha256(prev_hash || body)) in the manifest's ledger position."""
    text = event_bytes(store, proof["event"])
    body = jsonread.loads(text, ReasonCode.LEDGER_EVENT_MISMATCH, proof["event"])
    files = {
        "report_sha256": _digest(store, f"{prefix}/{REPORT}"),
        "statement_sha256": _digest(store, f"{prefix}/{STATEMENT}"),
    }
    try:
        manifest = jsonread.loads(
            store.get(f"{prefix}/{MANIFEST}", max_bytes=jsonread.MAX_BYTES), ReasonCode.MANIFEST_INVALID, MANIFEST
        )
    except EvidenceError as error:
        _missing_is_incomplete(error, f"{prefix}/{MANIFEST}")
        manifest = None
    event_hash = chain_hash(proof["prev_hash"], text)
    event = LedgerEvent(
        proof["event_seq"],  # as the package has it: commits_bundle checks it
        cast(str, body.get("event_type") if isinstance(body, dict) else None),
        proof["event_hash"],
        cast(dict[str, Any], body),
    )
    if event_hash != proof["event_hash"] or not commits_bundle(event, prefix, manifest, files):
        raise EvidenceError(
            ReasonCode.LEDGER_EVENT_MISMATCH,
            f"the bundle's files or manifest are not what event {proof['event_seq']} committed",
        )


def _digest(store: ArtifactStore, key: str) -> str | None:
    try:
        return store.get_file(key, DISCARD)
    except EvidenceError as error:
        _missing_is_incomplete(error, key)
        return None  # a symlink, a folder...: reported by verify_bundle; here it means "not the committed file"


def _missing_is_incomplete(error: EvidenceError, key: str) -> None:
    """Re-raise an outage as it is and a missing file as PACKAGE_INCOMPLETE; anything else is the caller's."""
    if error.code in UNAVAILABLE_CODES:
        raise error
    if error.code == ReasonCode.STORE_NOT_FOUND:
        raise EvidenceError(ReasonCode.PACKAGE_INCOMPLETE, f"{key} is missing") from None


def open_package_store(root: str) -> ArtifactStore:
    """Each worker opens the package folder itself (verify_many's open_archive; export's, for its assessments)."""
    return PackageStore(Path(root))


def verify_bundles(
    argument: str,
    store: LocalStore,
    *,
    index: Index,
    checks: PackageChecks,
    key_ids: frozenset[str],
    root_ids: frozenset[str],
    workers: int,
    at: datetime | None = None,
) -> Iterator[Outcome]:
    """Every bundle the index lists, verified as `evidence verify` verifies an archive's, plus its ledger checks,
    in ``workers`` processes; one Outcome each, in the index's order."""
    location = Location(argument, str(store.root), "bundles", is_archive_root=True)
    return verify_all(
        [(location, bundle) for bundle in index.bundles],
        open_package_store,
        key_ids=key_ids,
        root_ids=root_ids,
        workers=workers,
        at=at,
        also=partial(check_in_log, checks.roots),
    )
