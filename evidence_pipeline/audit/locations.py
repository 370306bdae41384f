"""Where bundles are: what a user passes to `evidence verify` or `evidence ledger prove`, as an archive root and a
key prefix below it.

A location is an archive root, or ``<archive>/bundles[/<tenant>[/<period>[/<identity>]]]``, as a local folder or
under ``s3://bucket[/prefix]``. Only a location naming all four parts is one bundle; the others are prefixes whose
bundles are listed from the store. Nothing else the user passed reaches a key: every part below ``bundles`` must
be a tenant slug, a period and a sha256 identity, in that order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.models import PERIOD, TENANT_ID
from evidence_pipeline.store import ArtifactStore

BUNDLES = "bundles"
_IDENTITY = re.compile(r"^[0-9a-f]{64}$")
_PARTS = (TENANT_ID, PERIOD, _IDENTITY)  # below bundles/, in order
_FORMS = "an archive or <archive>/bundles[/<tenant>[/<period>[/<identity>]]], as a folder or s3://bucket/prefix"


@dataclass(frozen=True)
class Location:
    argument: str  # as the user passed it: output may name it, never the resolved local path
    archive: str  # the archive root: an absolute folder, or s3://bucket[/prefix]
    prefix: str  # "bundles", or "bundles/<tenant>", ... down to one bundle's "bundles/<tenant>/<period>/<identity>"
    is_archive_root: bool = False  # the argument names the archive itself, not a folder below it

    @property
    def is_bundle(self) -> bool:
        return self.prefix.count("/") == len(_PARTS)

    def shown(self, bundle: str) -> str:
        """How to name ``bundle`` (a key prefix at or below this location) to the user: their argument, extended."""
        below = bundle if self.is_archive_root else bundle.removeprefix(self.prefix).strip("/")
        return f"{self.argument.rstrip('/')}/{below}" if below else self.argument


def locate(argument: str) -> Location:
    """The archive root and key prefix that ``argument`` names; BUNDLE_NOT_FOUND when it names none."""
    if argument.startswith("s3://"):
        bucket, _, path = argument.removeprefix("s3://").partition("/")
        if not bucket:
            raise EvidenceError(ReasonCode.BUNDLE_NOT_FOUND, f"no bucket in {argument}: expected {_FORMS}")
        parts = [part for part in path.split("/") if part]
        root, below = _split(parts)
        archive = "s3://" + "/".join([bucket, *root])
    elif "://" in argument:
        raise EvidenceError(ReasonCode.BUNDLE_NOT_FOUND, f"expected {_FORMS}")
    else:
        folder = Path(argument).resolve()
        if not folder.is_dir():
            raise EvidenceError(ReasonCode.BUNDLE_NOT_FOUND, f"{argument} is not a folder: expected {_FORMS}")
        # A folder holding bundles/ is an archive root, even below a folder that happens to be named bundles.
        parts = list(folder.parts[1:])
        root, below = (parts, []) if (folder / BUNDLES).is_dir() else _split(parts)
        archive = str(Path(folder.anchor, *root))
    return Location(argument, archive, "/".join([BUNDLES, *below]), is_archive_root=root == parts)


def locate_bundle(argument: str) -> Location:
    location = locate(argument)
    if not location.is_bundle:
        raise EvidenceError(
            ReasonCode.BUNDLE_NOT_FOUND,
            f"{argument} is not one bundle: expected <archive>/bundles/<tenant>/<period>/<identity>",
        )
    return location


def _split(parts: list[str]) -> tuple[list[str], list[str]]:
    """(archive root parts, parts below bundles/): the innermost `bundles` followed only by plausible tenant,
    period and identity parts; a path without one is an archive root."""
    for index in reversed(range(len(parts))):
        below = parts[index + 1 :]
        if (
            parts[index] == BUNDLES
            and len(below) <= len(_PARTS)
            and all(pattern.fullmatch(part) for pattern, part in zip(_PARTS, below))
        ):
            return parts[:index], below
    return parts, []


def bundles_below(store: ArtifactStore, location: Location) -> list[str]:
    """The key prefixes of the bundles at or below ``location``, sorted; BUNDLE_NOT_FOUND when there are none.

    Every listed entry at bundle depth or deeper names a bundle, so a folder that is not one (an incomplete
    bundle, a symlink) is verified and reported, never skipped.
    """
    if location.is_bundle:
        return [location.prefix]
    depth = len(_PARTS) + 1
    bundles = sorted(
        {"/".join(key.split("/")[:depth]) for key in store.list(location.prefix) if key.count("/") >= depth - 1}
    )
    if not bundles:
        raise EvidenceError(ReasonCode.BUNDLE_NOT_FOUND, f"no bundle below {location.argument}: expected {_FORMS}")
    return bundles
