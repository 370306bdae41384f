"""The tenant registry: a text file with one tenant id per line (`#` starts a comment).

Only valid slugs are ever registered; a bad line is reported by line number and reason code, never added
(and its text is not echoed, so nothing a user typed ends up in logs).
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.faults import io_fault
from evidence_pipeline.models import validate_tenant_id
from evidence_pipeline.paths import private_dirs


@dataclass(frozen=True)
class RejectedLine:
    line: int
    code: str


def read_registry(path: Path) -> tuple[list[str], list[RejectedLine]]:
    """Return (valid tenant ids in file order without duplicates, rejected lines)."""
    if not path.exists():
        return [], []
    tenants: dict[str, None] = {}  # ordered and a set: a list's `in` made 10,000 lines cost 0.6 s
    rejected: list[RejectedLine] = []
    for number, raw in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
        entry = raw.split("#", 1)[0].strip()
        if not entry:
            continue
        try:
            tenants[validate_tenant_id(entry)] = None
        except EvidenceError as error:
            rejected.append(RejectedLine(number, error.code))
    return list(tenants), rejected


def add_to_registry(path: Path, tenants: list[str]) -> None:
    known = set(read_registry(path)[0])
    new = [validate_tenant_id(t) for t in dict.fromkeys(tenants) if t not in known]
    if new:
        private_dirs(path.parent)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        os.fchmod(fd, 0o600)  # tenant ids are tenant data: owner-only, whatever the umask
        with os.fdopen(fd, "a", encoding="utf-8") as handle:
            handle.writelines(f"{tenant}\n" for tenant in new)


def remove_from_registry(path: Path, tenant: str) -> bool:
    """Drop the lines that register ``tenant`` (comments and other lines stay); True when there were any.
    The file is replaced atomically, so a reader sees the old registry or the new one."""
    if not path.exists():
        return False
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
    kept = [line for line in lines if line.split("#", 1)[0].strip() != tenant]
    if len(kept) == len(lines):
        return False
    scratch = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        io_fault("registry_write")
        fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.writelines(kept)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(scratch, path)
    except OSError as error:
        scratch.unlink(missing_ok=True)
        if error.errno in (errno.EROFS, errno.EACCES, errno.EPERM):  # e.g. a ConfigMap mounted read-only
            raise EvidenceError(ReasonCode.TENANT_REGISTRY_READ_ONLY,
                                f"the tenant registry cannot be rewritten here: remove {tenant} where it is "
                                "managed, then run this again") from None
        reason = errno.errorcode.get(error.errno, "I/O error")
        raise EvidenceError(ReasonCode.LOCAL_IO_FAILED,
                            f"the tenant registry could not be rewritten ({reason})") from None
    return True
