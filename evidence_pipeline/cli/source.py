"""`evidence source …`: publishing tenants' monthly source data, signed by the operator who publishes it."""

from __future__ import annotations

import functools
import json
import re
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import click

from evidence_pipeline.cli.acting import actor_name, gate, signed, signer_options
from evidence_pipeline.cli.options import check_period, check_tenant_id, json_option
from evidence_pipeline.cli.resources import load_settings, open_runtime
from evidence_pipeline.errors import EvidenceError, exit_code
from evidence_pipeline.models import TENANT_ID, TenantMonth

_PERIOD_FILE = re.compile(r"^([0-9]{4}-[0-9]{2})\.csv$")


@click.group()
def source() -> None:
    """Source data: a tenant-month's transactions, published as an immutable revision."""


@source.command("publish")
@click.argument("tenant_id", metavar="TENANT", required=False, callback=check_tenant_id)
@click.argument("period", metavar="PERIOD", required=False, callback=check_period)
@click.argument("file", metavar="FILE", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--from-dir",
    "from_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Publish every DIR/<tenant>/<YYYY-MM>.csv, and every DIR/<tenant>/<YYYY-MM>/<name>.csv (the "
    "landing location's layout), instead, each on its own.",
)
@signer_options
@json_option
def source_publish(
    tenant_id: str | None,
    period: str | None,
    file: Path | None,
    from_dir: Path | None,
    key: Path | None,
    actor: str | None,
    as_json: bool,
) -> None:
    """Publish FILE (CSV, the source format) as TENANT's revision for PERIOD (YYYY-MM).

    The file is checked whole first: one that breaks the format publishes nothing and its report lists each
    problem (line, column, code; the first 100 and the total). A valid file becomes the tenant-month's next
    revision, or, the same rows published before, that revision again. Each publication is signed with your key
    (an operator) and recorded as a `source.published` event under your name. Exit 1 when any file is refused."""
    if (from_dir is None) == (file is None) or (file is not None and period is None):
        raise click.UsageError("give TENANT PERIOD FILE, or --from-dir DIR")
    from evidence_pipeline.monthly.landing import DirectoryLanding

    files = (
        [(TenantMonth(tenant_id, period), functools.partial(_read_named, file))]
        if file is not None
        else [
            (tenant_month, functools.partial(DirectoryLanding(from_dir).read_file, name))
            for tenant_month, name in _listed_files(from_dir)
        ]
    )
    settings = load_settings()
    rt = open_runtime(settings)
    correlation_id = f"cli-{uuid.uuid4().hex}"
    results, failed = [], None
    for tenant_month, read in files:
        try:
            results.append(
                _publish_one(settings, rt, tenant_month, read=read, key=key, actor=actor, correlation_id=correlation_id)
            )
        except EvidenceError as error:
            results.append({"tenant": tenant_month.tenant, "period": tenant_month.period, "error": _error(error)})
            failed = failed or error.code
        _say(results[-1], as_json)
    if as_json:
        click.echo(json.dumps(results, indent=2))
    if failed is not None:
        sys.exit(exit_code(failed))


def _listed_files(folder: Path) -> list[tuple[TenantMonth, str]]:
    """DIR/<tenant>/<YYYY-MM>.csv and the landing layout DIR/<tenant>/<YYYY-MM>/<name>.csv (the landing sensor's
    markers and names beginning with "." are passed over, as the sensor passes them over), sorted by path, each
    with its name relative to DIR; any other file refuses the whole command before anything is read. A folder may
    be a landing location, which its tenants write: each file is read as the sensor reads it, through no link."""
    from evidence_pipeline.monthly.landing import MARKER, layout_tenant_month

    found, stray = [], []
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder).parts
        if path.is_dir() or relative[-1].startswith(".") or relative[-1].endswith(".csv" + MARKER):
            continue
        month = _PERIOD_FILE.fullmatch(relative[-1])
        if len(relative) == 2 and TENANT_ID.fullmatch(relative[0]) and month is not None:
            found.append((TenantMonth(relative[0], month.group(1)), "/".join(relative)))
        elif (landed := layout_tenant_month(relative)) is not None:
            found.append((landed, "/".join(relative)))
        else:
            stray.append("/".join(relative))
    if stray:
        raise click.UsageError(
            f"{len(stray)} files are not <tenant>/<YYYY-MM>.csv or <tenant>/<YYYY-MM>/<name>.csv "
            f"(first: {stray[0]}): nothing published"
        )
    if not found:
        raise click.UsageError("no <tenant>/<YYYY-MM>.csv or <tenant>/<YYYY-MM>/<name>.csv file in the folder")
    return found


def _read_named(path: Path) -> bytes:
    """A file the operator named: the size checked before it is read."""
    from evidence_pipeline.monthly import source_format

    source_format.check_size(path.stat().st_size)
    return path.read_bytes()


def _publish_one(
    settings,
    rt,
    tenant_month: TenantMonth,
    *,
    read: Callable[[], bytes],
    key: Path | None,
    actor: str | None,
    correlation_id: str,
) -> dict:
    from evidence_pipeline.actors.roles import Action
    from evidence_pipeline.monthly import publication

    prepared = publication.prepare(tenant_month, read())
    envelope = signed(
        settings,
        key=key,
        actor=actor,
        action=Action.SOURCE_PUBLISH,
        args=publication.signed_args(prepared),
        tenant=tenant_month.tenant,
    )
    record = publication.signed_by(gate(settings), envelope, prepared)
    publisher = publication.Publisher(actor_name(settings, key, actor), correlation_id)
    published = publication.publish(rt, prepared, publisher, record)
    return published.view() | {"published": published.created}


def _error(error: EvidenceError) -> dict:
    return {"code": error.code, "message": error.message, **(error.report() if hasattr(error, "report") else {})}


def _say(result: dict, as_json: bool) -> None:
    if as_json:
        return
    name = f"{result['tenant']} {result['period']}"
    error = result.get("error")
    if error is None:
        state = "published" if result["published"] else "already published (the same rows)"
        click.echo(
            f"{name}: revision {result['sequence']} {state}: sha256 {result['sha256']}, {result['rows']} rows, "
            f"{result['bytes']} bytes"
        )
        return
    click.echo(f"{name}: refused: {error['code']}: {error['message']}", err=True)
    for problem in error.get("problems", []):
        click.echo(
            f"  line {problem['line']}{', ' + problem['column'] if problem['column'] else ''}: {problem['code']}",
            err=True,
        )
    if error.get("problems_total", 0) > len(error.get("problems", [])):
        click.echo(f"  ... {error['problems_total']} problems in all", err=True)
