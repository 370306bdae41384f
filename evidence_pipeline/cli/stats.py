"""`evidence stats`: stage latency percentiles from the ledger, and the ages of the oldest waiting work."""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING

import click

from evidence_pipeline.cli.options import check_tenant_id, json_option
from evidence_pipeline.cli.resources import load_settings, open_runtime, use_dagster_home
from evidence_pipeline.config import Settings
from evidence_pipeline.errors import EvidenceError, ReasonCode

if TYPE_CHECKING:
    from evidence_pipeline.operations.stats import StageSummary


class _Since(click.ParamType):
    name = "ISO-DATE-OR-DATETIME"

    def convert(self, value, param, ctx) -> datetime:
        from evidence_pipeline.operations.stats import parse_since

        try:
            return parse_since(value)
        except ValueError as error:
            self.fail(str(error), param, ctx)


def _oldest_queued_run_age(settings: Settings) -> float | None:
    if not settings.dagster_home.is_dir():
        return None  # nothing has run through Dagster here yet: do not create an instance just to look
    use_dagster_home(settings)
    from evidence_pipeline.defs.queue import oldest_queued_run_age_in_dagster_home  # imports Dagster

    try:
        return oldest_queued_run_age_in_dagster_home()
    except Exception as error:  # Dagster's storage raises its own types (PostgreSQL down, bad URL, ...)
        raise EvidenceError(
            ReasonCode.DAGSTER_UNAVAILABLE, f"the Dagster instance could not be read ({type(error).__name__})"
        ) from None


@click.command()
@click.option("--tenant", callback=check_tenant_id, help="Only this tenant's events.")
@click.option(
    "--since", type=_Since(), help="Only events recorded at or after this date or time (UTC unless an offset is given)."
)
@json_option
def stats(tenant: str | None, since: datetime | None, as_json: bool) -> None:
    """Stage latency percentiles (ms, nearest-rank) from the ledger's stages.timed events, and the age of the
    oldest queued Dagster run (any tenant)."""
    from evidence_pipeline.operations.stats import PERCENTILES, admission_stats, stage_stats

    settings = load_settings(reads_only=True)
    rt = open_runtime(settings)
    result = stage_stats(rt.ledger, tenant, since)
    admission = admission_stats(rt.ledger, tenant, since)
    unstarted_age = rt.submissions.oldest_unstarted_age()
    queued_age = _oldest_queued_run_age(settings)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "tenant": tenant,
                    "since": since.isoformat() if since else None,
                    "unit": "ms",
                    "percentile_method": "nearest-rank",
                    **result.as_dict(),
                    "admission": admission.as_dict(),
                    "oldest_unstarted_document_job_age_seconds": unstarted_age,
                    "oldest_queued_run_age_seconds": queued_age,
                },
                indent=2,
            )
        )
        return
    scope = f"tenant {tenant}" if tenant else "all tenants"
    click.echo(f"{result.events} stages.timed events, {scope}" + (f", since {since.isoformat()}" if since else ""))
    click.echo(f"{'lane':<9} {'stage':<11} {'count':>6}" + "".join(f" {f'p{p} ms':>10}" for p in PERCENTILES))
    for lane, summaries in [("all", result.stages), *result.lanes.items()]:
        for summary in summaries:
            click.echo(f"{lane:<9} {summary.stage:<11} {summary.count:>6}" + _percentile_cells(summary))
    click.echo(f"{'intake':<9} {admission.stage:<11} {admission.count:>6}" + _percentile_cells(admission))
    click.echo(
        "no unstarted document jobs"
        if unstarted_age is None
        else f"oldest unstarted document job: {unstarted_age:.0f} s"
    )
    click.echo("no queued runs" if queued_age is None else f"oldest queued run: {queued_age:.0f} s")


def _percentile_cells(summary: StageSummary) -> str:
    from evidence_pipeline.operations.stats import PERCENTILES

    values = (getattr(summary, f"p{p}") for p in PERCENTILES)
    return "".join(f" {'-' if value is None else f'{value:.1f}':>10}" for value in values)
