"""The source file format: its columns and their rules (the one definition, which the docs' reference table is
generated from), the check of every cell against them, and the reading of a CSV file into rows with their line
numbers.

A file that breaks the format is refused whole: ``SourceRejected`` carries a per-row report, the first
MAX_REPORTED problems in file order (line, column, code) and the total, and never a cell's value.
"""

from __future__ import annotations

import calendar
import csv
import io
from dataclasses import dataclass

import numpy as np
import pandas as pd

from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.models import TenantMonth

KINDS = ("order", "refund", "fee", "payout")
CURRENCIES = ("EUR", "USD", "GBP", "SEK", "PLN", "CHF")
CHANNELS = ("web", "app", "marketplace")
MAX_ROWS = 1_000_000
MAX_BYTES = 128 * 1024 * 1024  # a file of MAX_ROWS rows of the longest cells stays below this
MAX_REPORTED = 100  # problems a rejection lists; its total counts them all
# 10,000,000.00 in a two-decimal currency, per transaction. Every total the report prints (per currency and per
# day; net = orders - refunds - fees) sums at most MAX_ROWS amounts, so it stays within +-10**15: far inside int64,
# and below 2**53, so pandas' float64 intermediates (pivot tables with empty cells) are still exact.
MAX_AMOUNT_MINOR = 10**9
_AMOUNT = rf"[1-9][0-9]{{0,{len(str(MAX_AMOUNT_MINOR)) - 1}}}"
_TXN_ID = r"[A-Za-z0-9-]{1,40}"


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    rule: str


FORMAT = (
    Column("txn_id", "string", "1-40 characters of `A-Z a-z 0-9 -`; unique within the file"),
    Column("booked_on", "date", "`YYYY-MM-DD`, a calendar day of the file's month"),
    Column("kind", "enum", "one of " + ", ".join(f"`{kind}`" for kind in KINDS)),
    Column("currency", "enum", "one of " + ", ".join(f"`{currency}`" for currency in CURRENCIES)),
    Column(
        "amount_minor",
        "integer",
        f"whole minor units (cents), 1..{MAX_AMOUNT_MINOR:,} written in plain digits, no sign, no leading zero",
    ),
    Column("channel", "enum", "one of " + ", ".join(f"`{channel}`" for channel in CHANNELS)),
)
COLUMNS = tuple(column.name for column in FORMAT)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a source: where (``line``: the file's line, the header being line 1; ``row``: the
    1-based data row of a frame, 0 for a file's problems, which its lines name) and which rule (``code``).
    ``column`` is "" for a problem of the whole row or file."""

    row: int
    line: int
    column: str
    code: str

    def as_dict(self) -> dict:
        return {"line": self.line, "column": self.column, "code": self.code}


class SourceRejected(EvidenceError):
    """SOURCE_INVALID with its report: ``problems`` (at most MAX_REPORTED, in file order) of ``total``."""

    def __init__(self, tenant_month: TenantMonth, problems: list[Problem], total: int):
        first = problems[0]
        where = f"row {first.row}" if first.row else f"line {first.line}"
        where += f", column {first.column}" if first.column else ""
        super().__init__(
            ReasonCode.SOURCE_INVALID,
            f"source for {tenant_month}: {where}: {first.code} ({total} problem{'s' if total != 1 else ''})",
        )
        self.problems = problems
        self.total = total

    def __reduce__(self):
        return EvidenceError, (self.code, self.message)

    def report(self) -> dict:
        return {"problems": [problem.as_dict() for problem in self.problems], "problems_total": self.total}


def check_frame(frame: pd.DataFrame, tenant_month: TenantMonth, lines: np.ndarray | None = None) -> pd.DataFrame:
    """The frame's rows converted (amounts as int64), sorted by txn_id, once every cell passes its column's rule;
    SourceRejected otherwise. ``lines`` gives each data row's line in its file (default: row + 1)."""
    problems = [Problem(0, 1, name, ReasonCode.SOURCE_COLUMN_MISSING) for name in COLUMNS if name not in frame.columns]
    if problems:
        raise SourceRejected(tenant_month, problems, len(problems))
    frame = frame.loc[:, list(COLUMNS)]
    if len(frame) == 0 or len(frame) > MAX_ROWS:
        code = ReasonCode.SOURCE_NO_ROWS if len(frame) == 0 else ReasonCode.SOURCE_TOO_MANY_ROWS
        raise SourceRejected(tenant_month, [Problem(0, 1, "", code)], 1)
    text = frame.astype(str).where(frame.notna(), "")
    amount_text = text["amount_minor"].str.fullmatch(_AMOUNT)
    amounts = text["amount_minor"].where(amount_text, "1").astype("int64")  # at most 10 digits: fits int64
    days = calendar.monthrange(tenant_month.year, tenant_month.month)[1]
    date = (
        text["booked_on"].str.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
        & pd.to_datetime(text["booked_on"], format="%Y-%m-%d", errors="coerce").notna()
    )
    in_month = text["booked_on"].isin([f"{tenant_month.period}-{day:02d}" for day in range(1, days + 1)])
    # column -> [(rows that break a rule, its code)], the first rule a cell breaks is the one reported
    rules = {
        "txn_id": [
            (~text["txn_id"].str.fullmatch(_TXN_ID), ReasonCode.SOURCE_VALUE_INVALID),
            (text["txn_id"].duplicated(), ReasonCode.SOURCE_TXN_ID_DUPLICATE),
        ],
        "booked_on": [(~date, ReasonCode.SOURCE_VALUE_INVALID), (~in_month, ReasonCode.SOURCE_DATE_OUTSIDE_PERIOD)],
        "kind": [(~text["kind"].isin(KINDS), ReasonCode.SOURCE_VALUE_INVALID)],
        "currency": [(~text["currency"].isin(CURRENCIES), ReasonCode.SOURCE_VALUE_INVALID)],
        "amount_minor": [(~(amount_text & (amounts <= MAX_AMOUNT_MINOR)), ReasonCode.SOURCE_VALUE_INVALID)],
        "channel": [(~text["channel"].isin(CHANNELS), ReasonCode.SOURCE_VALUE_INVALID)],
    }
    rows, columns, codes = [], [], []
    for index, name in enumerate(COLUMNS):
        reported = (text[name] == "").to_numpy(dtype=bool, copy=True)
        found = [(reported.copy(), ReasonCode.SOURCE_VALUE_MISSING)]
        for broken, code in rules[name]:
            broken = broken.to_numpy(dtype=bool) & ~reported
            reported |= broken
            found.append((broken, code))
        for broken, code in found:
            bad = np.flatnonzero(broken)
            rows.append(bad)
            columns.append(np.full(len(bad), index))
            codes += [code] * len(bad)
    _raise_any(tenant_month, np.concatenate(rows), np.concatenate(columns), codes, lines)
    out = text.assign(amount_minor=amounts)
    return out.sort_values("txn_id", kind="stable").reset_index(drop=True)


def _raise_any(
    tenant_month: TenantMonth, rows: np.ndarray, columns: np.ndarray, codes: list[str], lines: np.ndarray | None
) -> None:
    total = len(rows)
    if not total:
        return
    first = np.lexsort((columns, rows))[:MAX_REPORTED]  # file order: by row, then by column
    problems = [
        Problem(int(rows[i]) + 1, int(rows[i]) + 2, COLUMNS[columns[i]], codes[i])
        if lines is None
        else Problem(0, int(lines[rows[i]]), COLUMNS[columns[i]], codes[i])
        for i in first
    ]
    raise SourceRejected(tenant_month, problems, total)


def check_size(size: int) -> None:
    """A file above MAX_BYTES is SOURCE_TOO_LARGE: callers that know the size check it before reading."""
    if size > MAX_BYTES:
        raise EvidenceError(ReasonCode.SOURCE_TOO_LARGE, f"a source file is at most {MAX_BYTES} bytes")


def read_file(data: bytes, tenant_month: TenantMonth) -> pd.DataFrame:
    """A source file (UTF-8 CSV, a header naming the columns in any order) as checked, converted rows; a file
    that breaks the format is SourceRejected, whole, with its report."""
    check_size(len(data))
    try:
        text = data.decode("utf-8-sig")  # a leading byte order mark (spreadsheets write one) is not a header
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise SourceRejected(tenant_month, [Problem(0, line, "", ReasonCode.SOURCE_ENCODING_INVALID)], 1) from None
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        header = next(reader, None)
        if header is None:
            raise SourceRejected(tenant_month, [Problem(0, 1, "", ReasonCode.SOURCE_NO_ROWS)], 1)
        _check_header(header, tenant_month)
        records, lines, shape = [], [], []
        for record in reader:
            if record == []:  # a blank line
                continue
            if len(records) + len(shape) >= MAX_ROWS:
                raise SourceRejected(
                    tenant_month, [Problem(0, reader.line_num, "", ReasonCode.SOURCE_TOO_MANY_ROWS)], 1
                )
            if len(record) != len(header):
                shape.append(Problem(0, reader.line_num, "", ReasonCode.SOURCE_ROW_FIELDS))
                continue
            records.append(record)
            lines.append(reader.line_num)
    except csv.Error:
        raise SourceRejected(tenant_month, [Problem(0, reader.line_num, "", ReasonCode.SOURCE_NOT_CSV)], 1) from None
    frame = pd.DataFrame(records, columns=header, dtype=str)
    try:
        frame = check_frame(frame, tenant_month, np.asarray(lines, dtype=np.int64))
    except SourceRejected as rejected:
        if not shape:
            raise
        merged = sorted([*shape, *rejected.problems], key=lambda problem: problem.line)[:MAX_REPORTED]
        raise SourceRejected(tenant_month, merged, len(shape) + rejected.total) from None
    if shape:
        raise SourceRejected(tenant_month, shape[:MAX_REPORTED], len(shape))
    return frame


def _check_header(header: list[str], tenant_month: TenantMonth) -> None:
    problems = [Problem(0, 1, name, ReasonCode.SOURCE_COLUMN_MISSING) for name in COLUMNS if name not in header]
    problems += [Problem(0, 1, "", ReasonCode.SOURCE_COLUMN_UNKNOWN) for name in header if name not in COLUMNS]
    problems += [Problem(0, 1, name, ReasonCode.SOURCE_COLUMN_REPEATED) for name in COLUMNS if header.count(name) > 1]
    if problems:
        raise SourceRejected(tenant_month, problems[:MAX_REPORTED], len(problems))


def format_table() -> str:
    """The reference table of the format (Markdown), generated for the docs."""
    lines = ["| column | type | rule |", "| --- | --- | --- |"]
    lines += [f"| `{column.name}` | {column.type} | {column.rule} |" for column in FORMAT]
    return "\n".join(lines) + "\n"
