"""A landing location for source files (EVIDENCE_LANDING_URI: a folder or ``s3://bucket/prefix``): files
``<tenant>/<YYYY-MM>/<name>.csv`` that a tenant's data system drops, each published once through the one
publication path (publication.py) by the landing sensor (defs/landing.py).

The location is a trust boundary: the path names the tenant, so only what really is at that path is taken. A
folder walk follows no link: every folder is opened ``O_NOFOLLOW`` relative to the one above it, from the root's
descriptor, and a file is read only as a regular file with one hard link, opened ``O_NOFOLLOW`` and checked again
on its descriptor (``fstat``). An entry in the layout that is a symbolic link (a tenant or month folder, or a
file), a file with another hard link, or anything but a regular file is refused, never read; so is every file of a
tenant the tenant registry does not hold as active (TENANT_UNKNOWN, TENANT_OFFBOARDED).

A file is taken only once complete: names that begin with ``.`` or do not end in ``.csv`` are never taken (write
under such a name, then rename: the rename is atomic), and a file is taken at the first tick that finds it exactly
as the previous tick saw it (size, mtime and inode; on S3, where a PUT is atomic, size and ETag), and read only if
it still is. The sensor keeps what each tick saw in its cursor.

What is taken is marked, not moved: a marker ``<name>.published`` beside the entry holds the outcome (the
revision, or the refusal: its code and the report), and a marked entry is never taken again; a refusal that
waiting cannot heal is marked like a file that breaks the format. Publication is idempotent by digest, so a file
taken twice (a marker that failed to write) converges on its revision. Names are never trusted: an entry whose
tenant or period is not a slug or a month is passed over, and nothing of its name reaches a store key.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from botocore.exceptions import ClientError

from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.ledger.tenants import ACTIVE, OFFBOARDED
from evidence_pipeline.models import PERIOD, TENANT_ID, TenantMonth
from evidence_pipeline.monthly import publication, source_format
from evidence_pipeline.runtime import Runtime

MARKER = ".published"
ACTOR = "landing"
# The refusals a take marks: none of them heals by waiting, so they are never taken again.
REFUSED = frozenset(
    {
        ReasonCode.SOURCE_INVALID,
        ReasonCode.SOURCE_TOO_LARGE,
        ReasonCode.TENANT_UNKNOWN,
        ReasonCode.TENANT_OFFBOARDED,
        ReasonCode.LANDING_SYMLINK,
        ReasonCode.LANDING_HARD_LINK,
        ReasonCode.LANDING_NOT_REGULAR,
    }
)
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO named like a source file must not wait for a writer
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_MARKER = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _source_name(name: str) -> bool:
    return name.endswith(".csv") and not name.startswith(".")


# What each level of <tenant>/<YYYY-MM>/<name>.csv must be called to be taken
_LAYOUT = (TENANT_ID.fullmatch, PERIOD.fullmatch, _source_name)


def layout_tenant_month(parts: tuple[str, ...]) -> TenantMonth | None:
    """The tenant-month of a path ``<tenant>/<YYYY-MM>/<name>.csv`` (its parts, relative to the location); None for
    a path outside the layout (a marker, a name beginning with ``.``, another level)."""
    if len(parts) != len(_LAYOUT) or not all(fits(part) for fits, part in zip(_LAYOUT, parts)):
        return None
    return TenantMonth(parts[0], parts[1])


@dataclass(frozen=True)
class Landed:
    """An entry of the layout, not marked yet."""

    name: str  # relative to the location: <tenant>/<YYYY-MM>/<file>.csv, or a tenant or month folder that is a link
    tenant: str
    period: str | None  # None: a tenant folder that is a link
    version: tuple  # what tells a change: (size, mtime_ns, inode) of a local file, (size, ETag) of an S3 object
    refusal: ReasonCode | None = None  # decided before any read: the entry's kind, or its tenant's standing

    @property
    def tenant_month(self) -> TenantMonth:
        return TenantMonth(self.tenant, self.period)


def _file_refusal(status: os.stat_result) -> ReasonCode | None:
    """What a file's own status (``lstat`` in the walk, ``fstat`` of the opened file) refuses it for."""
    if not stat.S_ISREG(status.st_mode):
        return ReasonCode.LANDING_NOT_REGULAR
    return ReasonCode.LANDING_HARD_LINK if status.st_nlink != 1 else None


def _version(status: os.stat_result) -> tuple:
    return status.st_size, status.st_mtime_ns, status.st_ino


class DirectoryLanding:
    def __init__(self, root: Path):
        self.root = root

    def walk(self) -> Iterator[Landed]:
        """Every unmarked entry of the layout, in name order, refused by its kind or with its version."""
        try:
            root = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the root is the operator's
        except FileNotFoundError:
            return
        try:
            yield from _walk(root, ())
        finally:
            os.close(root)

    def read(self, landed: Landed) -> bytes:
        """The file's bytes, read from a descriptor whose status is checked: still the version the walk saw."""
        return self.read_file(landed.name, tuple(landed.version))

    def read_file(self, name: str, version: tuple | None = None) -> bytes:
        """The bytes of ``name`` (relative to the root), reached through no link and read from a descriptor whose
        status is checked: a regular file with one hard link (else its LANDING_* refusal), still ``version`` when
        one is given (else LANDING_FILE_CHANGED). `source publish --from-dir` reads the layout with it too."""
        try:
            fd = self._open(name, _FILE)
        except OSError as error:
            if version is not None:  # it became a link or went away since the walk: the next walk sees what it is now
                raise _changed() from None
            if error.errno in (errno.ELOOP, errno.ENOTDIR):  # O_NOFOLLOW met a link (ENOTDIR: one to a folder)
                raise EvidenceError(ReasonCode.LANDING_SYMLINK, ReasonCode.LANDING_SYMLINK.meaning) from None
            raise EvidenceError(ReasonCode.LOCAL_IO_FAILED, f"cannot open a source file: {error.strerror}") from None
        try:
            status = os.fstat(fd)
            refusal = _file_refusal(status)
            if refusal is not None:
                raise EvidenceError(refusal, refusal.meaning)
            version = version or _version(status)
            if _version(status) != version:
                raise _changed()
            source_format.check_size(status.st_size)
            with os.fdopen(os.dup(fd), "rb") as file:
                data = file.read(status.st_size + 1)
            if len(data) != status.st_size or _version(os.fstat(fd)) != version:
                raise _changed()
            return data
        finally:
            os.close(fd)

    def mark(self, name: str, outcome: bytes) -> None:
        try:
            fd = self._open(name + MARKER, _MARKER)  # exclusive: a marker is written once
        except FileExistsError:  # marked since the walk (a concurrent tick): the first marker stands
            return
        except OSError as error:  # left pending: taken again, it converges on the same revision
            raise EvidenceError(ReasonCode.LOCAL_IO_FAILED, f"cannot mark a landed file: {error.strerror}") from None
        with os.fdopen(fd, "wb") as marker:
            marker.write(outcome)

    def _open(self, name: str, flags: int) -> int:
        """``name`` (relative to the root) opened with ``flags`` at the end of a walk that follows no link."""
        *folders, last = name.split("/")
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for folder in folders:
                inner = os.open(folder, _DIR, dir_fd=fd)
                os.close(fd)
                fd = inner
            return os.open(last, flags, 0o644, dir_fd=fd)
        finally:
            os.close(fd)


def _walk(folder: int, above: tuple[str, ...]) -> Iterator[Landed]:
    """The entries of an open folder ``folder`` at level ``len(above)`` of the layout, and those below them."""
    with os.scandir(folder) as listing:
        entries = {entry.name: entry for entry in listing}
    level = len(above)
    for name, entry in sorted(entries.items()):
        if not _LAYOUT[level](name) or name + MARKER in entries:
            continue
        path = (*above, name)
        found = Landed("/".join(path), path[0], path[1] if level else None, ())
        if entry.is_symlink():
            yield replace(found, refusal=ReasonCode.LANDING_SYMLINK)
        elif level < len(_LAYOUT) - 1:
            if entry.is_dir(follow_symlinks=False):
                try:
                    inner = os.open(name, _DIR, dir_fd=folder)
                except OSError:  # swapped for a link or gone since the listing: the next walk sees it
                    continue
                try:
                    yield from _walk(inner, path)
                finally:
                    os.close(inner)
        else:
            status = entry.stat(follow_symlinks=False)
            yield replace(found, version=_version(status), refusal=_file_refusal(status))


def _changed() -> EvidenceError:
    return EvidenceError(ReasonCode.LANDING_FILE_CHANGED, "the file changed since the last tick saw it")


class S3Landing:
    def __init__(self, client, uri: str):
        self.client = client
        self.bucket, _, prefix = uri.removeprefix("s3://").partition("/")
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""

    def walk(self) -> Iterator[Landed]:
        """Every unmarked object of the layout, in name order, with its version (S3 has no links)."""
        listed = {}
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix):
            listed |= {item["Key"].removeprefix(self.prefix): item for item in page.get("Contents", [])}
        for name, item in sorted(listed.items()):
            parts = name.split("/")
            if (
                len(parts) == len(_LAYOUT)
                and all(fits(part) for fits, part in zip(_LAYOUT, parts))
                and name + MARKER not in listed
            ):
                yield Landed(name, parts[0], parts[1], (item["Size"], item["ETag"]))

    def read(self, landed: Landed) -> bytes:
        """The object's bytes, only while it is still the version the listing saw (``IfMatch`` its ETag)."""
        size, etag = landed.version
        source_format.check_size(size)
        try:
            return self.client.get_object(Bucket=self.bucket, Key=self.prefix + landed.name, IfMatch=etag)[
                "Body"
            ].read()
        except ClientError as error:
            if _s3_code(error) not in ("PreconditionFailed", "NoSuchKey"):
                raise
            raise _changed() from None

    def mark(self, name: str, outcome: bytes) -> None:
        try:
            self.client.put_object(Bucket=self.bucket, Key=self.prefix + name + MARKER, Body=outcome, IfNoneMatch="*")
        except ClientError as error:
            if _s3_code(error) != "PreconditionFailed":
                raise
            # marked since the listing (a concurrent tick): the first marker stands


def _s3_code(error: ClientError) -> str | None:
    return error.response.get("Error", {}).get("Code")


def open_landing(uri: str, s3_client=None) -> DirectoryLanding | S3Landing:
    return S3Landing(s3_client, uri) if uri.startswith("s3://") else DirectoryLanding(Path(uri))


def pending(
    rt: Runtime, landing: DirectoryLanding | S3Landing, seen_before: dict[str, list]
) -> tuple[list[Landed], dict[str, list]]:
    """(the entries to take now, in name order; what this walk saw of each file it did not refuse, for the next
    tick). A refused entry is taken at once, to be marked, never read; a file only once its version is the one the
    previous tick saw (``seen_before``)."""
    found = list(landing.walk())
    standing = rt.tenants.standing({landed.tenant for landed in found}) if found else {}
    ready, seen = [], {}
    for landed in found:
        refusal = landed.refusal or _standing_refusal(standing.get(landed.tenant))
        if refusal is not None:
            ready.append(replace(landed, refusal=refusal))
            continue
        seen[landed.name] = list(landed.version)  # as the cursor's JSON holds it
        if seen_before.get(landed.name) == seen[landed.name]:
            ready.append(landed)
    return ready, seen


def _standing_refusal(standing: str | None) -> ReasonCode | None:
    return {ACTIVE: None, OFFBOARDED: ReasonCode.TENANT_OFFBOARDED}.get(standing, ReasonCode.TENANT_UNKNOWN)


def take(rt: Runtime, landing: DirectoryLanding | S3Landing, landed: Landed) -> dict:
    """Publish one landed file and mark it with the outcome: the revision's view, or {"error": …} when it is
    refused (REFUSED: not taken again). Transient failures raise, and leave it pending."""
    try:
        outcome = _publish(rt, landing, landed)
    except EvidenceError as refused:
        if refused.code not in REFUSED:
            raise
        report = refused.report() if isinstance(refused, source_format.SourceRejected) else {}
        outcome = {"error": {"code": refused.code, "message": refused.message, **report}}
    landing.mark(landed.name, json.dumps(outcome, sort_keys=True).encode())
    return outcome


def _publish(rt: Runtime, landing: DirectoryLanding | S3Landing, landed: Landed) -> dict:
    if landed.refusal is not None:
        raise EvidenceError(landed.refusal, landed.refusal.meaning)
    prepared = publication.prepare(landed.tenant_month, landing.read(landed))
    published = publication.publish(rt, prepared, publication.Publisher(ACTOR, f"landing-{prepared.sha256[:16]}"))
    return published.view() | {"published": published.created}
