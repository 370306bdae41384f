"""Immutable source revisions: one canonical CSV of marketplace transactions per tenant-month.

A revision is named by the sha256 of its canonical bytes and is never rewritten; a correction is a new
revision with the next sequence number. Pipelines pin a revision by digest and re-check it on every read.
"""

from __future__ import annotations

import calendar
import io
import re

import numpy as np
import pandas as pd

from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.models import SourceRevision, TenantMonth
from evidence_pipeline.store import ArtifactStore, sha256_hex

COLUMNS = ("txn_id", "booked_on", "kind", "currency", "amount_minor", "channel")
KINDS = ("order", "refund", "fee", "payout")
CURRENCIES = ("EUR", "USD", "GBP", "SEK", "PLN", "CHF")
CHANNELS = ("web", "app", "marketplace")
MAX_ROWS = 1_000_000
# 10,000,000.00 in a two-decimal currency, per transaction. Every total the report prints (per currency and per
# day; net = orders - refunds - fees) sums at most MAX_ROWS amounts, so it stays within +-10**15: far inside int64,
# and below 2**53, so pandas' float64 intermediates (pivot tables with empty cells) are still exact.
MAX_AMOUNT_MINOR = 10**9
_AMOUNT = rf"[1-9][0-9]{{0,{len(str(MAX_AMOUNT_MINOR)) - 1}}}"
_TXN_ID = r"[A-Za-z0-9-]{1,40}"
_REVISION_KEY = re.compile(r"^(\d{6})-([0-9a-f]{64})\.csv$")


def canonical_bytes(frame: pd.DataFrame, tenant_month: TenantMonth) -> bytes:
    """Validate a transactions frame and return its canonical CSV bytes (sorted, fixed columns, LF)."""
    frame = validate_frame(frame, tenant_month)
    return frame.to_csv(index=False, lineterminator="\n").encode("utf-8")


def validate_frame(frame: pd.DataFrame, tenant_month: TenantMonth) -> pd.DataFrame:
    """The one set of rules for a source revision, applied by ``publish_revision`` before anything is stored and by
    ``read_revision`` on every read.

    Every cell is judged as the text the canonical CSV holds for it (all a reader ever sees), and converted only
    once that text is known to fit: an amount is 1..MAX_AMOUNT_MINOR written in plain digits, a date is exactly
    YYYY-MM-DD, a real calendar day of the tenant-month. Rejections name the 1-based data row and the column,
    never the cell's value.
    """

    def invalid(why: str) -> EvidenceError:
        return EvidenceError(ReasonCode.SOURCE_INVALID, f"source for {tenant_month}: {why}")

    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise invalid(f"missing columns {missing}")
    frame = frame.loc[:, list(COLUMNS)]
    if len(frame) == 0 or len(frame) > MAX_ROWS:
        raise invalid(f"row count {len(frame)} outside 1..{MAX_ROWS}")
    empty = frame.isna().to_numpy()
    if empty.any():
        row, column = (int(i) for i in np.argwhere(empty)[0])
        raise invalid(f"row {row + 1}, column {COLUMNS[column]}: empty cell")
    text = frame.astype(str)
    amount_text = text["amount_minor"].str.fullmatch(_AMOUNT)
    amounts = text["amount_minor"].where(amount_text, "1").astype("int64")  # at most 10 digits: fits int64
    days = calendar.monthrange(tenant_month.year, tenant_month.month)[1]
    rules = {
        "txn_id": (text["txn_id"].str.fullmatch(_TXN_ID), "must be 1-40 characters of [A-Za-z0-9-]"),
        "booked_on": (text["booked_on"].isin([f"{tenant_month.period}-{day:02d}" for day in range(1, days + 1)]),
                      f"must be a date YYYY-MM-DD in {tenant_month.period}"),
        "kind": (text["kind"].isin(KINDS), f"must be one of {KINDS}"),
        "currency": (text["currency"].isin(CURRENCIES), f"must be one of {CURRENCIES}"),
        "amount_minor": (amount_text & (amounts <= MAX_AMOUNT_MINOR),
                         f"must be a whole number of minor units in 1..{MAX_AMOUNT_MINOR}, in digits"),
        "channel": (text["channel"].isin(CHANNELS), f"must be one of {CHANNELS}"),
    }
    for column in COLUMNS:
        valid, rule = rules[column]
        bad = np.flatnonzero(~valid.to_numpy())
        if len(bad):
            raise invalid(f"row {bad[0] + 1}, column {column}: {rule} ({len(bad)} rows)")
    duplicate = np.flatnonzero(text["txn_id"].duplicated().to_numpy())
    if len(duplicate):
        raise invalid(f"row {duplicate[0] + 1}, column txn_id: duplicate id ({len(duplicate)} rows)")
    out = text.assign(amount_minor=amounts)
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
        raise EvidenceError(ReasonCode.SOURCE_NOT_FOUND, f"no source revision published for {tenant_month}")
    sequence, sha256, key = listed[-1]
    data = _get_checked(store, key, sha256)
    return SourceRevision(tenant_month, sequence, sha256, len(data), key)


def _get_checked(store: ArtifactStore, key: str, sha256: str) -> bytes:
    try:
        return store.get(key, expected_sha256=sha256)
    except EvidenceError as error:
        if error.code == ReasonCode.STORE_DIGEST_MISMATCH:
            raise EvidenceError(ReasonCode.SOURCE_DIGEST_MISMATCH,
                                f"source revision {sha256[:12]} changed since publication") from None
        raise


def read_revision(store: ArtifactStore, revision: SourceRevision) -> pd.DataFrame:
    """Read a pinned revision: digest re-checked, schema re-validated."""
    data = _get_checked(store, revision.key, revision.sha256)
    try:
        frame = pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False)  # validate_frame converts
    except (ValueError, pd.errors.ParserError) as error:
        raise EvidenceError(ReasonCode.SOURCE_INVALID,
                            f"source for {revision.tenant_month} is not CSV: {type(error).__name__}")
    return validate_frame(frame, revision.tenant_month)
