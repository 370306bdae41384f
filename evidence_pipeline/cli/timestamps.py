"""`evidence timestamps …`: the long-term care of B-LTA bundles' document time stamps."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import click

from evidence_pipeline.cli.options import check_tenant_id, json_option, parse_moment
from evidence_pipeline.cli.resources import load_settings, open_runtime
from evidence_pipeline.errors import exit_code


@click.group()
def timestamps() -> None:
    """Document time stamps of B-LTA bundles."""


@timestamps.command("renew")
@click.option(
    "--before",
    "before",
    callback=parse_moment,
    metavar="TIME",
    help="Renew the bundles whose newest document time stamp's TSA certificate expires before this ISO 8601 "
    "time (UTC unless it says) [default: a year from now].",
)
@click.option("--tenant", "tenant_id", callback=check_tenant_id, help="Only this tenant's bundles.")
@json_option
def renew(before: datetime | None, tenant_id: str | None, as_json: bool) -> None:
    """Add a new document time stamp (from EVIDENCE_TSA_URL) to every published B-LTA bundle whose newest one's TSA
    certificate expires before --before, as a new file of the bundle (renewals/NNNN.pdf) beside the old, recorded in
    the ledger (`bundle.timestamp_renewed`). Re-running renews nothing twice. Exits non-zero, with the first
    failure's reason code, when a bundle could not be renewed (the others still are)."""
    from evidence_pipeline.operations.renewal import DEFAULT_HORIZON, FAILED, RENEWED, renew_timestamps

    horizon = before or datetime.now(timezone.utc) + DEFAULT_HORIZON
    results = renew_timestamps(open_runtime(load_settings()), horizon, "evidence timestamps renew", tenant_id)
    failed = [result for result in results if result.outcome == FAILED]
    if as_json:
        click.echo(json.dumps({"before": horizon.isoformat(), "bundles": [r.as_dict() for r in results]}, indent=2))
    else:
        for result in results:
            until = f" (TSA certificate until {result.tsa_not_after.isoformat()})" if result.tsa_not_after else ""
            why = f": {result.code}: {result.message}" if result.code else ""
            click.echo(f"{result.outcome} {result.bundle} renewal {result.renewal}{until}{why}")
        renewed = sum(result.outcome == RENEWED for result in results)
        click.echo(
            f"{renewed} renewed, {len(failed)} failed, {len(results) - renewed - len(failed)} left as they "
            f"are, of {len(results)} B-LTA bundle(s); horizon {horizon.isoformat()}"
        )
    if failed:  # each failure is named above; the exit code is the first one's
        click.get_current_context().exit(exit_code(failed[0].code))
