"""A landing location for source files (EVIDENCE_LANDING_URI: a folder or ``s3://bucket/prefix``): files
``<tenant>/<YYYY-MM>/<name>.csv`` that a tenant's data system drops, each published once through the one
publication path (publication.py) by the landing sensor (defs/landing.py).

What is taken is marked, not moved: a marker ``<name>.csv.published`` beside the file holds the outcome (the
revision, or the refusal's report), and a marked file is never taken again. Publication is idempotent by digest,
so a file taken twice (a marker that failed to write) converges on its revision. Names are never trusted: a file
whose tenant or period is not a slug or a month is passed over, and nothing of its name reaches a store key.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.models import TENANT_ID, TenantMonth
from evidence_pipeline.monthly import publication, source_format
from evidence_pipeline.runtime import Runtime

MARKER = ".published"
ACTOR = "landing"
_PERIOD = re.compile(r"^\d{4}-(0[1-9]|1[0-2])$")


@dataclass(frozen=True)
class Landed:
    tenant_month: TenantMonth
    name: str  # relative to the location: <tenant>/<YYYY-MM>/<file>.csv


class DirectoryLanding:
    def __init__(self, root: Path):
        self.root = root

    def names(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(str(path.relative_to(self.root)) for path in self.root.glob("*/*/*") if path.is_file())

    def read(self, name: str) -> bytes:
        path = self.root / name
        source_format.check_size(path.stat().st_size)
        return path.read_bytes()

    def mark(self, name: str, outcome: bytes) -> None:
        with open(self.root / (name + MARKER), "xb") as marker:  # exclusive: a marker is written once
            marker.write(outcome)


class S3Landing:
    def __init__(self, client, uri: str):
        self.client = client
        self.bucket, _, prefix = uri.removeprefix("s3://").partition("/")
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""

    def names(self) -> list[str]:
        names = []
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix):
            names += [item["Key"].removeprefix(self.prefix) for item in page.get("Contents", [])]
        return sorted(names)

    def read(self, name: str) -> bytes:
        source_format.check_size(self.client.head_object(Bucket=self.bucket, Key=self.prefix + name)["ContentLength"])
        return self.client.get_object(Bucket=self.bucket, Key=self.prefix + name)["Body"].read()

    def mark(self, name: str, outcome: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=self.prefix + name + MARKER, Body=outcome, IfNoneMatch="*")


def open_landing(uri: str, s3_client=None) -> DirectoryLanding | S3Landing:
    return S3Landing(s3_client, uri) if uri.startswith("s3://") else DirectoryLanding(Path(uri))


def pending(landing: DirectoryLanding | S3Landing) -> list[Landed]:
    """The files not taken yet, in name order."""
    names = landing.names()
    marked = {name.removesuffix(MARKER) for name in names if name.endswith(MARKER)}
    found = []
    for name in names:
        parts = name.split("/")
        if (len(parts) == 3 and name.endswith(".csv") and name not in marked and TENANT_ID.fullmatch(parts[0])
                and _PERIOD.fullmatch(parts[1])):
            found.append(Landed(TenantMonth(parts[0], parts[1]), name))
    return found


def take(rt: Runtime, landing: DirectoryLanding | S3Landing, landed: Landed) -> dict:
    """Publish one landed file and mark it with the outcome: the revision's view, or {"error": …} when the file
    breaks the format (refused whole; it is not taken again). Transient failures raise, and leave it pending."""
    try:
        prepared = publication.prepare(landed.tenant_month, landing.read(landed.name))
    except EvidenceError as refused:
        if refused.code not in (ReasonCode.SOURCE_INVALID, ReasonCode.SOURCE_TOO_LARGE):
            raise
        report = refused.report() if isinstance(refused, source_format.SourceRejected) else {}
        outcome = {"error": {"code": refused.code, "message": refused.message, **report}}
    else:
        publisher = publication.Publisher(ACTOR, f"landing-{prepared.sha256[:16]}")
        published = publication.publish(rt, prepared, publisher)
        outcome = published.view() | {"published": published.created}
    landing.mark(landed.name, json.dumps(outcome, sort_keys=True).encode())
    return outcome
