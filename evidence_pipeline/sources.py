"""Immutable source revisions: one canonical CSV of marketplace transactions per tenant-month.

A revision is named by the sha256 of its canonical bytes and is never rewritten; a correction is a new
revision with the next sequence number. Pipelines pin a revision by digest and re-check it on every read.
"""

from __future__ import annotations

import io
import re

import pandas as pd

from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.models import SourceRevision, TenantMonth
from evidence_pipeline.store import ArtifactStore, sha256_hex

COLUMNS = ("txn_id", "booked_on", "kind", "currency", "amount_minor", "channel")
KINDS = ("order", "refund", "fee", "payout")
CURRENCIES = ("EUR", "USD", "GBP", "SEK", "PLN", "CHF")
CHANNELS = ("web", "app", "marketplace")
MAX_ROWS = 1_000_000
_REVISION_KEY = re.compile(r"^(\d{6})-([0-9a-f]{64})\.csv$")


def canonical_bytes(frame: pd.DataFrame, tenant_month: TenantMonth) -> bytes:
    """Validate a transactions frame and return its canonical CSV bytes (sorted, fixed columns, LF)."""
    frame = validate_frame(frame, tenant_month)
    return frame.to_csv(index=False, lineterminator="\n").encode("utf-8")


def validate_frame(frame: pd.DataFrame, tenant_month: TenantMonth) -> pd.DataFrame:
    def invalid(why: str) -> EvidenceError:
        return EvidenceError("SOURCE_INVALID", f"source for {tenant_month}: {why}")

    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise invalid(f"missing columns {missing}")
    frame = frame.loc[:, list(COLUMNS)]
    if len(frame) == 0 or len(frame) > MAX_ROWS:
        raise invalid(f"row count {len(frame)} outside 1..{MAX_ROWS}")
    if frame.isna().any().any():
        raise invalid("empty cells")
    if not frame["txn_id"].astype(str).str.fullmatch(r"[A-Za-z0-9-]{1,40}").all():
        raise invalid("txn_id must be 1-40 characters of [A-Za-z0-9-]")
    if frame["txn_id"].duplicated().any():
        raise invalid("duplicate txn_id")
    for column, allowed in (("kind", KINDS), ("currency", CURRENCIES), ("channel", CHANNELS)):
        if not frame[column].isin(allowed).all():
            raise invalid(f"{column} outside {allowed}")
    amounts = pd.to_numeric(frame["amount_minor"], errors="coerce")
    if amounts.isna().any() or (amounts != amounts.round()).any() or (amounts <= 0).any():
        raise invalid("amount_minor must be a positive integer (minor units)")
    dates = pd.to_datetime(frame["booked_on"], format="%Y-%m-%d", errors="coerce")
    if dates.isna().any():
        raise invalid("booked_on must be YYYY-MM-DD")
    if not ((dates.dt.year == tenant_month.year) & (dates.dt.month == tenant_month.month)).all():
        raise invalid("booked_on outside the period")
    out = frame.assign(amount_minor=amounts.astype("int64"), txn_id=frame["txn_id"].astype(str))
    return out.sort_values("txn_id", kind="stable").reset_index(drop=True)


def _prefix(tenant_month: TenantMonth) -> str:
    return f"{tenant_month.tenant}/{tenant_month.period}"


def _listed(store: ArtifactStore, tenant_month: TenantMonth) -> list[tuple[int, str, str]]:
    """(sequence, sha256, key) of every published revision, oldest first."""
    listed = []
    for key in store.list(_prefix(tenant_month)):
        match = _REVISION_KEY.fullmatch(key.rsplit("/", 1)[-1])
        if match:
            listed.append((int(match.group(1)), match.group(2), key))
    return sorted(listed)


def publish_revision(store: ArtifactStore, tenant_month: TenantMonth, frame: pd.DataFrame) -> SourceRevision:
    """Publish a new revision, or return the existing one with the same canonical bytes."""
    data = canonical_bytes(frame, tenant_month)
    digest = sha256_hex(data)
    existing = _listed(store, tenant_month)
    for sequence, sha256, key in existing:
        if sha256 == digest:
            return SourceRevision(tenant_month, sequence, digest, len(data), key)
    sequence = (existing[-1][0] if existing else 0) + 1
    key = f"{_prefix(tenant_month)}/{sequence:06d}-{digest}.csv"
    store.put_once(key, data)
    return SourceRevision(tenant_month, sequence, digest, len(data), key)


def pin_latest(store: ArtifactStore, tenant_month: TenantMonth) -> SourceRevision:
    """Resolve "latest" once, here; everything downstream holds the returned digest."""
    listed = _listed(store, tenant_month)
    if not listed:
        raise EvidenceError("SOURCE_NOT_FOUND", f"no source revision published for {tenant_month}")
    sequence, sha256, key = listed[-1]
    data = _get_checked(store, key, sha256)
    return SourceRevision(tenant_month, sequence, sha256, len(data), key)


def _get_checked(store: ArtifactStore, key: str, sha256: str) -> bytes:
    try:
        return store.get(key, expected_sha256=sha256)
    except EvidenceError as error:
        if error.code == "STORE_DIGEST_MISMATCH":
            raise EvidenceError("SOURCE_DIGEST_MISMATCH", f"source revision {sha256[:12]} changed since publication") from None
        raise


def read_revision(store: ArtifactStore, revision: SourceRevision) -> pd.DataFrame:
    """Read a pinned revision: digest re-checked, schema re-validated."""
    data = _get_checked(store, revision.key, revision.sha256)
    try:
        frame = pd.read_csv(io.BytesIO(data), dtype={"txn_id": str, "booked_on": str}, keep_default_na=False)
    except (ValueError, pd.errors.ParserError) as error:
        raise EvidenceError("SOURCE_INVALID", f"source for {revision.tenant_month} is not CSV: {type(error).__name__}")
    return validate_frame(frame, revision.tenant_month)
