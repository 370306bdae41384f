"""Source revision -> deterministic report PDF (reportlab).

Determinism: reportlab invariant mode, fonts bundled in this package, no wall clock, and the PDF dates pinned to
the end of the reporting period (reportlab reads SOURCE_DATE_EPOCH, so we set it for the build and restore it).
The same revision and RENDERER_VERSION give byte-identical PDFs in any process.
"""

from __future__ import annotations

import calendar
import contextlib
import hashlib
import io
import operator
import os
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import BinaryIO

import pandas as pd
from reportlab import rl_config
from reportlab.graphics.charts.barcharts import VerticalBarChart
from reportlab.graphics.shapes import Drawing, String
from reportlab.lib import colors
from reportlab.lib.pagesizes import A4
from reportlab.lib.styles import ParagraphStyle
from reportlab.lib.units import mm
from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.ttfonts import TTFont
from reportlab.pdfgen import canvas as pdfcanvas
from reportlab.platypus import PageBreak, Paragraph, SimpleDocTemplate, Spacer, Table, TableStyle

from evidence_pipeline.models import RenderedReport, SourceRevision, TenantMonth
from evidence_pipeline.monthly.document_outcomes import OutcomesRevision, counts

# Bump whenever the output bytes for the same revision would change (layout, fonts, reportlab upgrade).
RENDERER_VERSION = "report-renderer/1.2.0"

rl_config.invariant = 1
_FONTS = Path(__file__).parent.parent / "fonts"
pdfmetrics.registerFont(TTFont("EvidenceSans", str(_FONTS / "Vera.ttf")))
pdfmetrics.registerFont(TTFont("EvidenceSans-Bold", str(_FONTS / "VeraBd.ttf")))
_EPOCH_LOCK = threading.Lock()

_BODY = ParagraphStyle("body", fontName="EvidenceSans", fontSize=9, leading=12)
_H1 = ParagraphStyle("h1", fontName="EvidenceSans-Bold", fontSize=20, leading=26, spaceAfter=8)
_H2 = ParagraphStyle("h2", fontName="EvidenceSans-Bold", fontSize=13, leading=18, spaceBefore=8, spaceAfter=6)
_TABLE = TableStyle(
    [
        ("FONT", (0, 0), (-1, -1), "EvidenceSans", 8),
        ("FONT", (0, 0), (-1, 0), "EvidenceSans-Bold", 8),
        ("BACKGROUND", (0, 0), (-1, 0), colors.HexColor("#dde4ee")),
        ("GRID", (0, 0), (-1, -1), 0.25, colors.HexColor("#8896aa")),
        ("ALIGN", (1, 1), (-1, -1), "RIGHT"),
    ]
)


def money(minor: int, currency: str) -> str:
    """Minor units with two decimals, in integer arithmetic: exact for any amount (no float rounding)."""
    units, cents = divmod(abs(operator.index(minor)), 100)
    return f"{'-' if minor < 0 else ''}{units:,}.{cents:02d} {currency}"


def report_subject(revision: SourceRevision) -> str:
    """The PDF /Subject: the validation gate checks it against the pinned revision."""
    tm = revision.tenant_month
    return f"tenant={tm.tenant}; period={tm.period}; source_sha256={revision.sha256}; renderer={RENDERER_VERSION}"


def summarize(frame: pd.DataFrame) -> pd.DataFrame:
    """Per currency: orders, refunds, fees, net and payouts in minor units."""
    sums = _sums(frame, ["currency"])
    sums["orders_count"] = frame[frame.kind == "order"].groupby("currency").size()
    sums["net"] = sums["order"] - sums["refund"] - sums["fee"]
    return sums.fillna(0).astype("int64").sort_index()


def render_report(revision: SourceRevision, frame: pd.DataFrame) -> RenderedReport:
    """The report in memory; the pipeline streams it to a file with ``write_report``."""
    out = io.BytesIO()
    sha256, pages = write_report(revision, frame, out)
    return RenderedReport(revision.tenant_month, revision.sha256, RENDERER_VERSION, out.getvalue(), sha256, pages)


def write_report(
    revision: SourceRevision,
    frame: pd.DataFrame,
    out: BinaryIO,
    preview: bool = False,
    documents: tuple[OutcomesRevision, list[dict]] | None = None,
) -> tuple[str, int]:
    """Render into ``out``, hashing while writing; returns (sha256, pages).

    ``preview`` is the reduced fidelity of the preview lane: the cover and summary only, titled and subject-tagged
    as a preview, so the gate (which checks the subject) can never accept it as evidence. ``documents`` (the
    month's pinned document outcomes and their jobs) adds the "Document jobs" section.
    """
    tm = revision.tenant_month
    summary = summarize(frame)
    story = _cover(revision, frame, summary)
    if preview:
        story.insert(0, Paragraph("PREVIEW - not evidence: cover and summary only, unsigned, never archived", _H2))
    else:
        story += _daily(frame, summary) + _refunds(frame) + (_document_jobs(*documents) if documents else [])
    hashing = _HashingWriter(out)
    doc = SimpleDocTemplate(
        hashing,
        pagesize=A4,
        title=f"{'PREVIEW ' if preview else ''}Monthly compliance report {tm.tenant} {tm.period}",
        author="evidence_pipeline",
        subject=report_subject(revision) + ("; fidelity=preview" if preview else ""),
        creator=RENDERER_VERSION,
        leftMargin=18 * mm,
        rightMargin=18 * mm,
        topMargin=18 * mm,
        bottomMargin=20 * mm,
    )
    with pinned_epoch(tm.year, tm.month):
        doc.build(story, canvasmaker=_NumberedCanvas)
    return hashing.digest.hexdigest(), doc.page


class _HashingWriter:
    """What reportlab writes the PDF to: ``out``, hashed on the way."""

    def __init__(self, out: BinaryIO):
        self.out, self.digest = out, hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        return self.out.write(data)


def report_totals(frame: pd.DataFrame, documents: OutcomesRevision | None = None) -> tuple[str, ...]:
    """Gross sales and net per currency, formatted exactly as the report prints them, and the digest of the pinned
    document outcomes."""
    summary = summarize(frame)
    totals = tuple(money(int(summary.loc[c, col]), c) for c in summary.index for col in ("order", "net"))
    return totals + ((documents.sha256,) if documents else ())


def _cover(revision: SourceRevision, frame: pd.DataFrame, summary: pd.DataFrame) -> list:
    tm = revision.tenant_month
    facts = [
        ["Tenant", tm.tenant],
        ["Period", f"{calendar.month_name[tm.month]} {tm.year} ({tm.period})"],
        ["Source revision", f"#{revision.sequence}"],
        ["Source sha256", revision.sha256],
        ["Renderer", RENDERER_VERSION],
    ]
    header = ["Currency", "Orders", "Gross sales", "Refunds", "Fees", "Net", "Payouts"]
    rows = [
        [
            c,
            f"{int(s.orders_count):,}",
            money(s.order, c),
            money(s.refund, c),
            money(s.fee, c),
            money(s.net, c),
            money(s.payout, c),
        ]
        for c, s in summary.iterrows()
    ]
    return [
        Paragraph("Monthly compliance report", _H1),
        Table(facts, colWidths=[35 * mm, 139 * mm], style=_FACTS),
        Spacer(1, 8 * mm),
        Paragraph("Summary by currency", _H2),
        Table([header] + rows, repeatRows=1, style=_TABLE),
        Spacer(1, 4 * mm),
        Paragraph(
            "Net = gross sales - refunds - fees. Amounts are sums of the pinned source revision's transactions in "
            "minor units, shown with two decimals. This report is deterministic: the same source revision and "
            "renderer always produce the same unsigned bytes, whose sha256 is recorded in the evidence bundle.",
            _BODY,
        ),
        Spacer(1, 6 * mm),
        Paragraph("Orders per day", _H2),
        _orders_chart(revision.tenant_month, frame),
    ]


def _orders_chart(tenant_month: TenantMonth, frame: pd.DataFrame) -> Drawing:
    days = calendar.monthrange(tenant_month.year, tenant_month.month)[1]
    per_day = frame[frame.kind == "order"].groupby(frame.booked_on.str[-2:].astype(int)).size()
    counts = [int(per_day.get(d, 0)) for d in range(1, days + 1)]
    drawing = Drawing(174 * mm, 70 * mm)
    chart = VerticalBarChart()
    chart.x, chart.y, chart.width, chart.height = 12 * mm, 10 * mm, 158 * mm, 55 * mm
    chart.data = [counts]
    chart.categoryAxis.categoryNames = [str(d) if d % 5 == 1 else "" for d in range(1, days + 1)]
    chart.categoryAxis.labels.fontName = chart.valueAxis.labels.fontName = "EvidenceSans"
    chart.categoryAxis.labels.fontSize = chart.valueAxis.labels.fontSize = 7
    chart.valueAxis.valueMin = 0
    chart.bars[0].fillColor = colors.HexColor("#3c6e9f")
    drawing.add(chart)
    drawing.add(String(12 * mm, 2 * mm, "Day of month", fontName="EvidenceSans", fontSize=7))
    return drawing


def _sums(frame: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Sums of amount_minor per ``by`` (sorted) and kind, one column per kind, 0 where none. One groupby: pandas'
    pivot_table per currency and iterrows cost a third of a report's rendering."""
    sums = frame.groupby(by + ["kind"]).amount_minor.sum().unstack(fill_value=0)
    return sums.reindex(columns=["order", "refund", "fee", "payout"], fill_value=0)


def _daily(frame: pd.DataFrame, summary: pd.DataFrame) -> list:
    story: list = [PageBreak(), Paragraph("Daily detail", _H2)]
    sums = _sums(frame, ["currency", "booked_on"])
    for currency in summary.index:
        table = [["Day", "Gross sales", "Refunds", "Fees", "Net", "Payouts"]] + [
            [
                day,
                money(order, currency),
                money(refund, currency),
                money(fee, currency),
                money(order - refund - fee, currency),
                money(payout, currency),
            ]
            for day, order, refund, fee, payout in sums.loc[currency].itertuples()
        ]
        story += [
            Paragraph(f"Daily detail, {currency}", _BODY),
            Table(table, repeatRows=1, style=_TABLE),
            Spacer(1, 5 * mm),
        ]
    return story


_FACTS = _TABLE.getCommands()[:1] + [("GRID", (0, 0), (-1, -1), 0.25, colors.grey)]  # label | value, left-aligned

_ROWS_PER_TABLE = 200


def _refunds(frame: pd.DataFrame) -> list:
    refunds = frame[frame.kind == "refund"]
    story: list = [PageBreak(), Paragraph(f"Refunds ({len(refunds):,})", _H2)]
    if refunds.empty:
        return story + [Paragraph("No refunds in this period.", _BODY)]
    header = ["Transaction", "Booked on", "Channel", "Amount"]
    rows = [[r.txn_id, r.booked_on, r.channel, money(r.amount_minor, r.currency)] for r in refunds.itertuples()]
    # reportlab re-measures a table's remaining rows at every page break (quadratic in its length): one table per
    # chunk of rows, with equal column widths, keeps a 500-page report linear.
    widths = [40 * mm, 30 * mm, 40 * mm, 40 * mm]
    return story + [
        Table([header] + rows[i : i + _ROWS_PER_TABLE], colWidths=widths, repeatRows=1, style=_TABLE)
        for i in range(0, len(rows), _ROWS_PER_TABLE)
    ]


def _document_jobs(documents: OutcomesRevision, jobs: list[dict]) -> list:
    """Counts by operation and outcome, then every output's digest, as the pinned revision records them."""
    facts = [["Document outcomes sha256", documents.sha256], ["Closed revision", documents.key.rsplit("/", 1)[-1]]]
    story: list = [
        PageBreak(),
        Paragraph(f"Document jobs ({len(jobs):,})", _H2),
        Table(facts, colWidths=[40 * mm, 134 * mm], style=_FACTS),
        Spacer(1, 4 * mm),
    ]
    if not jobs:
        return story + [Paragraph("No document jobs were accepted for this tenant in this period.", _BODY)]
    summary = [["Operation", "Outcome", "Jobs"]] + [[op, outcome, f"{n:,}"] for op, outcome, n in counts(jobs)]
    story += [Table(summary, colWidths=[40 * mm, 70 * mm, 20 * mm], repeatRows=1, style=_TABLE), Spacer(1, 6 * mm)]
    rows = [
        [entry["job_id"][:16], output["artifact_id"].rsplit("/", 1)[-1], output["sha256"]]
        for entry in jobs  # the closed revision's entries (document_outcomes.outcome)
        for output in entry["outputs"]
    ]
    if not rows:
        return story + [Paragraph("No document job published an output in this period.", _BODY)]
    widths = [28 * mm, 32 * mm, 114 * mm]
    return (
        story
        + [Paragraph("Outputs", _H2)]
        + [
            Table(
                [["Job", "Artifact", "sha256"]] + rows[i : i + _ROWS_PER_TABLE],
                colWidths=widths,
                repeatRows=1,
                style=_TABLE,
            )
            for i in range(0, len(rows), _ROWS_PER_TABLE)
        ]
    )


@contextlib.contextmanager
def pinned_epoch(year: int, month: int):
    """Pin the PDF's dates to the last second of the period, whatever the caller's SOURCE_DATE_EPOCH. reportlab
    reads SOURCE_DATE_EPOCH from the process environment, so that is where it is pinned (under a lock)."""
    last_day = calendar.monthrange(year, month)[1]
    epoch = int(datetime(year, month, last_day, 23, 59, 59, tzinfo=timezone.utc).timestamp())
    with _EPOCH_LOCK:
        previous = os.environ.get("SOURCE_DATE_EPOCH")
        os.environ["SOURCE_DATE_EPOCH"] = str(epoch)
        try:
            yield
        finally:
            if previous is None:
                del os.environ["SOURCE_DATE_EPOCH"]
            else:
                os.environ["SOURCE_DATE_EPOCH"] = previous


class _NumberedCanvas(pdfcanvas.Canvas):
    """Defers page output so every page can say "page X of Y"."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._pages: list[dict] = []

    def showPage(self):
        self._pages.append(dict(self.__dict__))
        self._startPage()

    def save(self):
        for state in self._pages:
            self.__dict__.update(state)
            self.setFont("EvidenceSans", 7)
            self.drawRightString(A4[0] - 18 * mm, 10 * mm, f"Page {self._pageNumber} of {len(self._pages)}")
            self.drawString(18 * mm, 10 * mm, RENDERER_VERSION)
            super().showPage()
        super().save()
