"""Options and argument checks that several command groups share: --json, ISO 8601 times, tenant ids, periods."""

from __future__ import annotations

from datetime import datetime, timezone

import click

from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.models import validate_tenant_id

JSON_REQUESTED = "evidence.json"  # ctx.meta key: the running command was asked for JSON (the error boundary reads it)


def _remember_json(ctx: click.Context, _param, value: bool) -> bool:
    ctx.meta[JSON_REQUESTED] = value
    return value


json_option = click.option("--json", "as_json", is_flag=True, callback=_remember_json, is_eager=True,
                           help="Print the result as JSON (errors as {\"error\": {\"code\", \"message\"}}).")


def parse_moment(_ctx, _param, value: str | None) -> datetime | None:
    """The callback of ``--at`` and its kin: an ISO 8601 time, UTC unless it names its offset."""
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter("not an ISO 8601 time, e.g. 2031-06-30T12:00:00Z") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def check_tenant_id(ctx, param, value: str | None) -> str | None:
    try:
        return None if value is None else validate_tenant_id(value)
    except EvidenceError as error:
        raise click.BadParameter(str(error), ctx, param) from None


def check_period(ctx, param, value: str | None) -> str | None:
    from evidence_pipeline.models import validate_period

    try:
        return None if value is None else validate_period(value)
    except EvidenceError as error:
        raise click.BadParameter(str(error), ctx, param) from None
