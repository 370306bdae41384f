"""A bundle as one file: a deterministic, uncompressed POSIX (pax) tar laid out like the archive it comes from,
so that `evidence verify FILE` verifies it as a one-bundle archive, with nothing else.

    keys/…                                             every published key and keyring document, as in the archive
    bundles/<tenant>/<YYYY-MM>/<identity>/report.pdf   the bundle's three files, as in the archive
    bundles/<tenant>/<YYYY-MM>/<identity>/statement.dsse.json
    bundles/<tenant>/<YYYY-MM>/<identity>/manifest.json

Members come in key order, as regular files of mode 0444, owner 0:0 without names, dated at the bundle's
publication; each carries pax records ``EVIDENCE.sha256`` and, in a versioned archive (S3), ``EVIDENCE.version_id``
(the object version the manifest records). So one bundle always gives the same bytes, and the size is known before
a byte is read: the tenant API streams it (``BundleFile.stream``) with a Content-Length and its sha256 as ETag.
"""

from __future__ import annotations

import hashlib
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.store import CHUNK, ArtifactStore, check_key, copy_hashing, verified_chunks

SHA256_RECORD = "EVIDENCE.sha256"
VERSION_RECORD = "EVIDENCE.version_id"
_BLOCK = tarfile.BLOCKSIZE
_END = b"\0" * (2 * _BLOCK)  # two zero blocks end an archive


@dataclass(frozen=True)
class Member:
    key: str
    sha256: str
    size: int
    version_id: str | None = None
    data: bytes | None = None  # held (small files); None: streamed from the store, checked against sha256


def _header(member: Member, mtime: int) -> bytes:
    info = tarfile.TarInfo(member.key)
    info.size, info.mode, info.mtime, info.type = member.size, 0o444, mtime, tarfile.REGTYPE
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.pax_headers = {SHA256_RECORD: member.sha256} | (
        {VERSION_RECORD: member.version_id} if member.version_id else {}
    )
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "strict")


def _padding(size: int) -> bytes:
    return b"\0" * (-size % _BLOCK)


@dataclass(frozen=True)
class BundleFile:
    """The file of one bundle: its members (sorted by key) and the publication time its members are dated at."""

    members: tuple[Member, ...]
    mtime: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "members", tuple(sorted(self.members, key=lambda member: member.key)))

    @property
    def size(self) -> int:
        body = self._body_size()
        return body + (-body % tarfile.RECORDSIZE)  # whole records, as tar writes them

    def _body_size(self) -> int:
        """Headers, contents and their padding, and the end-of-archive blocks."""
        return sum(len(_header(m, self.mtime)) + m.size + len(_padding(m.size)) for m in self.members) + len(_END)

    def stream(self, store: ArtifactStore) -> Iterator[bytes]:
        """The file's bytes; a streamed member whose bytes differ from its sha256 ends the stream early
        (STORE_DIGEST_MISMATCH), before the last of its bytes."""
        for member in self.members:
            yield _header(member, self.mtime)
            if member.data is not None:
                yield member.data
            else:
                yield from verified_chunks(store, member.key, member.sha256, member.size)
            yield _padding(member.size)
        yield _END + b"\0" * (-self._body_size() % tarfile.RECORDSIZE)

    def sha256(self, store: ArtifactStore) -> str:
        digest = hashlib.sha256()
        for chunk in self.stream(store):
            digest.update(chunk)
        return digest.hexdigest()


class BundleFileStore:
    """A bundle file, read as an ArtifactStore (read-only) by `evidence verify FILE`: the members are indexed once
    and read on demand, each checked against its ``EVIDENCE.sha256`` record as it is read."""

    def __init__(self, path: Path, shown: str):
        self.shown = shown  # how the user named the file: uri() names it, never a resolved local path
        try:
            self.tar = tarfile.open(path, "r:")
        except (OSError, tarfile.TarError):
            raise EvidenceError(ReasonCode.BUNDLE_FILE_INVALID, f"{shown} is not an uncompressed tar file") from None
        self.entries: dict[str, tarfile.TarInfo] = {}
        for info in self.tar.getmembers():
            if not info.isreg() or info.name in self.entries or not _plain_key(info.name):
                self.tar.close()
                raise EvidenceError(
                    ReasonCode.BUNDLE_FILE_INVALID,
                    f"{shown} holds an entry that is not one "
                    "regular file under a plain key (a link, a folder, a repeat, an odd name)",
                )
            self.entries[info.name] = info

    def bundles(self) -> list[str]:
        """The key prefixes of the bundle folders it holds."""
        return sorted({key.rsplit("/", 1)[0] for key in self.entries if key.startswith("bundles/")})

    def close(self) -> None:
        self.tar.close()

    def _entry(self, key: str) -> tarfile.TarInfo:
        info = self.entries.get(check_key(key))
        if info is None:
            raise EvidenceError(ReasonCode.STORE_NOT_FOUND, f"object {key} does not exist")
        return info

    def get_file(
        self, key: str, out: BinaryIO, expected_sha256: str | None = None, max_bytes: int | None = None
    ) -> str:
        info = self._entry(key)
        if max_bytes is not None and info.size > max_bytes:
            raise EvidenceError(ReasonCode.STORE_OBJECT_TOO_LARGE, f"object {key} is larger than {max_bytes} bytes")
        reader = self.tar.extractfile(info)
        sha256, _ = copy_hashing(iter(lambda: reader.read(CHUNK), b""), out)
        recorded = info.pax_headers.get(SHA256_RECORD)
        if sha256 != recorded or (expected_sha256 is not None and sha256 != expected_sha256):
            raise EvidenceError(ReasonCode.STORE_DIGEST_MISMATCH, f"object {key} does not match its recorded sha256")
        return sha256

    def get(self, key: str, expected_sha256: str | None = None, max_bytes: int | None = None) -> bytes:
        out = _Buffer()
        self.get_file(key, out, expected_sha256, max_bytes)
        return bytes(out)

    def get_versioned(self, key: str, max_bytes: int | None = None) -> tuple[bytes, str | None]:
        return self.get(key, max_bytes=max_bytes), self.version_id(key)

    def exists(self, key: str) -> bool:
        return check_key(key) in self.entries

    def version_id(self, key: str) -> str | None:
        return self._entry(key).pax_headers.get(VERSION_RECORD)

    def list(self, prefix: str) -> list[str]:
        return sorted(key for key in self.entries if key.startswith(check_key(prefix) + "/"))

    def uri(self, key: str) -> str:
        return f"{self.shown}!{check_key(key)}"

    def retained_until(self, key: str):
        return None


def open_bundle_file(path: str) -> tuple[BundleFileStore, str]:
    """The file at ``path`` as a store, and the key prefix of the one bundle folder it holds."""
    store = BundleFileStore(Path(path), path)
    bundles = store.bundles()
    if len(bundles) != 1 or bundles[0].count("/") != 3:
        store.close()
        raise EvidenceError(
            ReasonCode.BUNDLE_FILE_INVALID,
            f"{path} holds {len(bundles)} bundle folders: a bundle file holds exactly one",
        )
    return store, bundles[0]


class _Buffer(bytearray):
    def write(self, chunk: bytes) -> int:
        self.extend(chunk)
        return len(chunk)


def _plain_key(name: str) -> bool:
    try:
        check_key(name)
    except EvidenceError:
        return False
    return True
