"""Immutable source revisions: one canonical CSV of marketplace transactions per tenant-month.

A revision is named by the sha256 of its canonical bytes and is never rewritten; a correction is a new
revision with the next sequence number. Pipelines pin a revision by digest and re-check it on every read. Only
publication.py publishes one (the file checked, the revision stored here, its `source.published` event recorded).

Sequences are claimed put-once: a publication first stores ``<sequence>.claim`` (holding its digest) and only then
its revision, so two concurrent publications of different bytes can never take one sequence (the loser of a claim
takes the next), and two of the same bytes converge on one revision. The format itself is source_format.py's.
"""

from __future__ import annotations

import io
import re

import pandas as pd

from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.models import SourceRevision, TenantMonth
from evidence_pipeline.monthly.source_format import check_frame
from evidence_pipeline.store import ArtifactStore, sha256_hex

_REVISION_KEY = re.compile(r"^([0-9]{6})-([0-9a-f]{64})\.csv$")
_CLAIM_KEY = re.compile(r"^([0-9]{6})\.claim$")
_CLAIM_ATTEMPTS = 1000  # each lost claim means another publication took that sequence: progress, not a spin


def canonical_csv(checked: pd.DataFrame) -> bytes:
    """The canonical bytes of a frame that ``validate_frame`` returned."""
    return checked.to_csv(index=False, lineterminator="\n").encode("utf-8")


def validate_frame(frame: pd.DataFrame, tenant_month: TenantMonth) -> pd.DataFrame:
    """The one set of rules for a source revision (source_format.FORMAT), applied by the publication path
    (publication.py) before anything is stored and by ``read_revision`` on every read.

    Every cell is judged as the text the canonical CSV holds for it (all a reader ever sees), and converted only
    once that text is known to fit: an amount is 1..MAX_AMOUNT_MINOR written in plain digits, a date is exactly
    YYYY-MM-DD, a real calendar day of the tenant-month. Rejections (SOURCE_INVALID, with a report of problems)
    name the 1-based data row and the column, never the cell's value.
    """
    return check_frame(frame, tenant_month)


def _prefix(tenant_month: TenantMonth) -> str:
    return f"{tenant_month.tenant}/{tenant_month.period}"


def _listed(store: ArtifactStore, tenant_month: TenantMonth) -> list[tuple[int, str, str]]:
    """(sequence, sha256, key) of every published revision, oldest first."""
    return _listing(store, tenant_month)[0]


def _listing(store: ArtifactStore, tenant_month: TenantMonth) -> tuple[list[tuple[int, str, str]], dict[int, str]]:
    """The published revisions (as ``_listed``) and the claimed sequences, each with the key of its claim."""
    listed, claims = [], {}
    for key in store.list(_prefix(tenant_month)):
        name = key.rsplit("/", 1)[-1]
        if match := _REVISION_KEY.fullmatch(name):
            listed.append((int(match.group(1)), match.group(2), key))
        elif match := _CLAIM_KEY.fullmatch(name):
            claims[int(match.group(1))] = key
    return sorted(listed), claims


def _store_revision(store: ArtifactStore, tenant_month: TenantMonth, data: bytes) -> SourceRevision:
    """Store canonical bytes (from ``canonical_csv``) as the tenant-month's next revision, or find the revision
    that has them. Private to the one publication path (publication.py), which records its `source.published`
    event: nothing else stores a revision.

    The sequence is the one after the highest claimed, taken by a put-once claim; a claim lost to another
    publication moves on to the next. A claim of these bytes without its revision (a concurrent publication of the
    same bytes between its two puts, or one that stopped there) is completed when no revision is published above
    it, so the same bytes never take two sequences and a retry leaves no gap; above a published revision, it is
    stale and the bytes take the next sequence, to be the latest.
    """
    digest = sha256_hex(data)
    for _ in range(_CLAIM_ATTEMPTS):
        listed, claims = _listing(store, tenant_month)
        for sequence, sha256, key in listed:
            if sha256 == digest:
                return SourceRevision(tenant_month, sequence, digest, len(data), key)
        published = {sequence for sequence, _, _ in listed}
        in_flight = sorted(claim for claim in claims if claim > max(published, default=0))
        ours = next((claim for claim in in_flight if store.get(claims[claim]) == digest.encode()), None)
        sequence = ours if ours is not None else max([*in_flight, *published], default=0) + 1
        try:
            store.put_once(f"{_prefix(tenant_month)}/{sequence:06d}.claim", digest.encode())
        except EvidenceError as error:
            if error.code != ReasonCode.STORE_CONFLICT:
                raise
            continue  # another publication claimed the sequence first
        key = f"{_prefix(tenant_month)}/{sequence:06d}-{digest}.csv"
        store.put_once(key, data)
        return SourceRevision(tenant_month, sequence, digest, len(data), key)
    raise EvidenceError(
        ReasonCode.TENANT_MONTH_BUSY,
        f"{_CLAIM_ATTEMPTS} concurrent publications of {tenant_month} claimed every sequence first",
    )


def pin_latest(store: ArtifactStore, tenant_month: TenantMonth) -> SourceRevision:
    """Resolve "latest" once, here; everything downstream holds the returned digest."""
    listed = _listed(store, tenant_month)
    if not listed:
        raise EvidenceError(ReasonCode.SOURCE_NOT_FOUND, f"no source revision published for {tenant_month}")
    sequence, sha256, key = listed[-1]
    data = _get_checked(store, key, sha256)
    return SourceRevision(tenant_month, sequence, sha256, len(data), key)


def _get_checked(store: ArtifactStore, key: str, sha256: str) -> bytes:
    try:
        return store.get(key, expected_sha256=sha256)
    except EvidenceError as error:
        if error.code == ReasonCode.STORE_DIGEST_MISMATCH:
            raise EvidenceError(
                ReasonCode.SOURCE_DIGEST_MISMATCH, f"source revision {sha256[:12]} changed since publication"
            ) from None
        raise


def read_revision(store: ArtifactStore, revision: SourceRevision) -> pd.DataFrame:
    """Read a pinned revision: digest re-checked, schema re-validated."""
    data = _get_checked(store, revision.key, revision.sha256)
    try:
        frame = pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False)  # validate_frame converts
    except (ValueError, pd.errors.ParserError) as error:
        raise EvidenceError(
            ReasonCode.SOURCE_INVALID, f"source for {revision.tenant_month} is not CSV: {type(error).__name__}"
        )
    return validate_frame(frame, revision.tenant_month)
