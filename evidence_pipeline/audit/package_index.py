"""The signed index of an audit package (format version 2): package.json is a DSSE envelope (payloadType
``application/vnd.in-toto+json``) of an in-toto Statement v1 signed with the statement key, as a bundle's statement
is. Its subjects are every other file of the package, each by its path and sha256; its predicate
(``predicateType`` PREDICATE_TYPE) is the index itself (package.py's ``Index.document``).

Verification checks the signature over the payload bytes against the statement keys the package's keys/ folder
holds (through its keyring, pinned by ``--root-id``, when there is one) before the payload is parsed; once parsed,
with a keyring, that the key was valid when the package was exported (the time the index states); then that
the files of the package are exactly the subjects: a file removed is PACKAGE_FILE_MISSING, one added (anything that
is not a folder, a symlink or a hidden file included) PACKAGE_FILE_UNLISTED, one whose bytes changed
PACKAGE_FILE_MISMATCH, each naming the files. A version 1 index is unsigned: PACKAGE_INDEX_UNSIGNED, unless the
auditor accepts it with ``--allow-unsigned-index`` (a version 2 index rewritten as version 1 is then the
auditor's explicit choice, never a silent downgrade).
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ed25519

from evidence_pipeline import jsonread
from evidence_pipeline.audit.checkpoints import CheckpointKeys
from evidence_pipeline.errors import UNAVAILABLE_CODES, EvidenceError, ReasonCode
from evidence_pipeline.signing import dsse
from evidence_pipeline.signing.keyring_document import SignatureTimes, check_key_at, parse_time
from evidence_pipeline.store import DISCARD, ArtifactStore

PREDICATE_TYPE = "https://evidence-pipeline.dev/audit-package/v2"
# package.json lists every file (~240 bytes each, base64 in the envelope): 64 MiB is ~250,000 files, ~50,000 bundles.
# Export refuses a package past it rather than write one that its verifier would refuse.
INDEX_MAX_BYTES = 64 << 20
_HASH = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class SignedIndex:
    """A version 2 package.json whose signature verified, then parsed."""

    key_ids: tuple[str, ...]  # the statement keys whose signatures verified it
    document: dict[str, Any]  # the predicate: the index
    subjects: dict[str, str]  # path -> sha256 of every other file of the package


def sign_index(document: dict[str, Any], files: dict[str, str], key: ed25519.Ed25519PrivateKey, key_id: str) -> bytes:
    """package.json for the index ``document`` and the package's ``files`` (path -> sha256)."""
    statement = {
        "_type": dsse.STATEMENT_TYPE,
        "subject": [{"name": path, "digest": {"sha256": sha256}} for path, sha256 in sorted(files.items())],
        "predicateType": PREDICATE_TYPE,
        "predicate": document,
    }
    envelope = dsse.sign_envelope(dsse.canonical_json(statement), key, key_id)
    if len(envelope) > INDEX_MAX_BYTES:
        raise EvidenceError(
            ReasonCode.PACKAGE_TOO_LARGE,
            f"the package's index would be {len(envelope)} bytes, above "
            f"the {INDEX_MAX_BYTES} a verifier reads ({len(files)} files): export fewer periods",
        )
    return envelope


def is_envelope(document: object) -> bool:
    return isinstance(document, dict) and document.keys() == {"payload", "payloadType", "signatures"}


def open_signed_index(envelope: object, keys: CheckpointKeys) -> SignedIndex:
    """The statement inside package.json (``envelope``, its JSON read), parsed only once the signature over its
    payload bytes verified with a statement key of the package: PACKAGE_INDEX_SIGNATURE_INVALID before anything of
    the payload is read; PACKAGE_INVALID when, signed, it is not one of this format."""
    fields = dsse.envelope_fields(envelope, ReasonCode.PACKAGE_INVALID)
    if fields.payload_type != dsse.PAYLOAD_TYPE:
        raise EvidenceError(ReasonCode.PACKAGE_INVALID, "package.json is not a signed package index")
    try:
        opened = fields.opened(keys.keys, dsse.PAYLOAD_TYPE, ReasonCode.PACKAGE_INVALID)
    except EvidenceError as error:
        raise EvidenceError(
            ReasonCode.PACKAGE_INDEX_SIGNATURE_INVALID,
            f"package.json's signature does not verify ({error.code}: {error.message})",
        ) from None
    statement: Any = jsonread.loads(
        opened.payload, ReasonCode.PACKAGE_INVALID, "package.json's payload", INDEX_MAX_BYTES
    )
    try:
        subjects = {
            s["name"]: s["digest"]["sha256"]
            for s in statement["subject"]
            if s.keys() == {"name", "digest"} and s["digest"].keys() == {"sha256"}
        }
        valid = (
            statement.keys() == {"_type", "subject", "predicateType", "predicate"}
            and statement["_type"] == dsse.STATEMENT_TYPE
            and statement["predicateType"] == PREDICATE_TYPE
            and isinstance(statement["predicate"], dict)
            and len(subjects) == len(statement["subject"])
            and all(
                isinstance(path, str) and isinstance(sha256, str) and _HASH.fullmatch(sha256)
                for path, sha256 in subjects.items()
            )
        )
    except (KeyError, TypeError, AttributeError):
        valid = False
    if not valid:
        raise EvidenceError(ReasonCode.PACKAGE_INVALID, "package.json is not a signed package index")
    return SignedIndex(opened.key_ids, statement["predicate"], subjects)


def check_key_validity(signed: SignedIndex, exported_at: str, keys: CheckpointKeys) -> None:
    """With a keyring, PACKAGE_INDEX_SIGNATURE_INVALID unless the keys that signed the index were valid, and not
    revoked, at the export time the index states (its signature verified when it was opened)."""
    if keys.keyring is None:
        return
    try:
        for key_id in signed.key_ids:
            check_key_at(
                keys.keyring,
                key_id,
                SignatureTimes(made=(parse_time(exported_at, "exported_at"),)),
                "package index key",
            )
    except EvidenceError as error:
        if error.code in UNAVAILABLE_CODES:
            raise
        raise EvidenceError(
            ReasonCode.PACKAGE_INDEX_SIGNATURE_INVALID,
            f"package.json's signature does not verify ({error.code}: {error.message})",
        ) from None
    except ValueError as error:
        raise EvidenceError(ReasonCode.PACKAGE_INDEX_SIGNATURE_INVALID, f"package.json: {error}") from None


def package_files(root: Path, index_name: str) -> dict[str, bool]:
    """Every entry of the package folder that is not a folder (symlinks not followed, hidden files included), but
    the index itself: path -> whether it is a regular file."""
    found = {}
    for folder, folders, files in os.walk(root, followlinks=False):
        relative = Path(folder).relative_to(root)
        for name in files + [f for f in folders if os.path.islink(os.path.join(folder, f))]:
            path = (relative / name).as_posix()
            if path != index_name:
                found[path] = stat.S_ISREG(os.lstat(os.path.join(folder, name)).st_mode)
    return found


def check_files(store: ArtifactStore, root: Path, index_name: str, subjects: dict[str, str]) -> None:
    """The package holds exactly the index's subjects, each with its digest."""
    found = package_files(root, index_name)
    missing = sorted(set(subjects) - set(found))
    if missing:
        raise EvidenceError(
            ReasonCode.PACKAGE_FILE_MISSING,
            f"{len(missing)} file(s) the signed index lists are missing: " + _names(missing),
        )
    unlisted = sorted(set(found) - set(subjects))
    if unlisted:
        raise EvidenceError(
            ReasonCode.PACKAGE_FILE_UNLISTED,
            f"{len(unlisted)} file(s) the signed index does not list: " + _names(unlisted),
        )
    mismatched = [path for path in sorted(subjects) if not found[path] or _digest(store, path) != subjects[path]]
    if mismatched:
        raise EvidenceError(
            ReasonCode.PACKAGE_FILE_MISMATCH,
            f"{len(mismatched)} file(s) are not the bytes the signed index lists: " + _names(mismatched),
        )


def _digest(store: ArtifactStore, path: str) -> str | None:
    try:
        return store.get_file(path, DISCARD)
    except EvidenceError as error:
        if error.code in UNAVAILABLE_CODES:
            raise
        return None  # not a regular file after all: not the listed bytes


def _names(paths: list[str]) -> str:
    return ", ".join(paths[:5]) + (", …" if len(paths) > 5 else "")
