"""`evidence tenant …`: the tenant registry, tenants' API tokens, offboarding."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import click

from evidence_pipeline.cli.acting import gate, signed, signer_options
from evidence_pipeline.cli.options import check_tenant_id, json_option
from evidence_pipeline.cli.resources import load_settings, open_runtime
from evidence_pipeline.cli.webhook import tenant_webhook
from evidence_pipeline.errors import EvidenceError, ReasonCode, exit_code

# Tenants per signed request of `tenant add`: every tenant's `tenant.registered` event stores its request, so a
# request of 10,000 (past the 64 KiB a request may have) would store 10,000 copies of hundreds of KB. At 100, a
# request is at most ~7 KB, and 10,000 tenants are 100 requests.
REGISTER_PER_REQUEST = 100


@click.group()
def tenant() -> None:
    """Tenants: the registry, API tokens for intake, webhooks, offboarding."""


tenant.add_command(tenant_webhook)


@tenant.command("add")
@click.argument(
    "tenant_ids",
    nargs=-1,
    metavar="[TENANT...]",
    callback=lambda ctx, param, values: [check_tenant_id(ctx, param, value) for value in values],
)
@click.option(
    "--from-file",
    "from_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Also register the tenant ids of this file: one per line, `#` starts a comment.",
)
@signer_options
@json_option
def tenant_add(
    tenant_ids: list[str], from_file: Path | None, key: Path | None, actor: str | None, as_json: bool
) -> None:
    """Register tenants in the registry (the ledger's database); tenant_registry_sensor makes them partitions.

    An operator's signed action: one `tenant.registered` event per new tenant, one signed request per 100 tenants
    (each committed on its own: a run cut short is completed by running it again). Registered tenants stay as they are;
    an offboarded tenant is refused (TENANT_OFFBOARDED, exit 1) and the others are registered. A file with a line
    that is not a tenant id registers nothing (TENANT_ID_INVALID, the line numbers)."""
    from evidence_pipeline.actors.roles import Action
    from evidence_pipeline.ledger.tenants import OFFBOARDED
    from evidence_pipeline.operations.tenant_access import register_tenants
    from evidence_pipeline.operations.tenant_file import read_tenant_file

    if from_file is not None:
        listed, rejected = read_tenant_file(from_file)
        if rejected:
            lines = ", ".join(str(line.line) for line in rejected)
            raise EvidenceError(rejected[0].code, f"lines {lines} of the file are not tenant ids: nothing registered")
        tenant_ids = [*tenant_ids, *listed]
    if not tenant_ids:
        raise click.UsageError("name at least one TENANT or --from-file")
    settings = load_settings()
    tenant_ids, outcome, acting = list(dict.fromkeys(tenant_ids)), {}, gate(settings)
    for start in range(0, len(tenant_ids), REGISTER_PER_REQUEST):
        chunk = tenant_ids[start : start + REGISTER_PER_REQUEST]
        outcome |= register_tenants(
            acting,
            open_runtime(settings).tenants,
            signed(settings, key=key, actor=actor, action=Action.TENANT_REGISTER, args={"tenants": chunk}),
        )
    if as_json:
        click.echo(json.dumps(outcome, indent=2))
    else:
        for state in dict.fromkeys(outcome.values()):
            named = [tenant_id for tenant_id, found in outcome.items() if found == state]
            click.echo(f"{state} ({len(named)}): {' '.join(named)}")
    if OFFBOARDED in outcome.values():
        click.echo("Error: offboarded tenants are never registered again (TENANT_OFFBOARDED)", err=True)
        sys.exit(exit_code(ReasonCode.TENANT_OFFBOARDED))


@tenant.command("list")
@click.option("--all", "everyone", is_flag=True, help="Offboarded tenants too.")
@json_option
def tenant_list(everyone: bool, as_json: bool) -> None:
    """The registered tenants in registration order (the order they become partitions)."""

    rows = [
        row
        for row in open_runtime(load_settings(reads_only=True)).tenants.listing()
        if everyone or row.offboarded_seq is None
    ]
    if as_json:
        click.echo(json.dumps([dataclasses.asdict(row) for row in rows], indent=2))
        return
    for row in rows:
        state = "" if row.offboarded_seq is None else "  offboarded"
        click.echo(f"{row.tenant}  registered {row.registered_at}{state}")


@tenant.group("token")
def tenant_token() -> None:
    """Per-tenant API tokens (only their sha256 is stored)."""


@tenant_token.command("issue")
@click.argument("tenant_id", metavar="TENANT", callback=check_tenant_id)
@signer_options
def tenant_token_issue(tenant_id: str, key: Path | None, actor: str | None) -> None:
    """Issue a new API token for TENANT and print it, once (an operator's signed action, `token.issued`)."""
    from evidence_pipeline.actors.roles import Action
    from evidence_pipeline.operations.tenant_access import issue_token

    settings = load_settings()
    _, token_id, token = issue_token(
        gate(settings),
        open_runtime(settings).tokens,
        signed(settings, key=key, actor=actor, action=Action.TOKEN_ISSUE, args={}, tenant=tenant_id),
    )
    click.echo(f"token id: {token_id}")
    click.echo(f"token:    {token}")
    click.echo("The token is shown only this once; store it now. Send it as `Authorization: Bearer <token>`.")


@tenant_token.command("revoke")
@click.argument("token_id")
@signer_options
def tenant_token_revoke(token_id: str, key: Path | None, actor: str | None) -> None:
    """Revoke a token by its id: every request with it is refused from now on (an operator's signed action,
    `token.revoked`; a token revoked before records nothing)."""
    from evidence_pipeline.actors.roles import Action
    from evidence_pipeline.operations.tenant_access import revoke_token

    settings = load_settings()
    tenant_id = revoke_token(
        gate(settings),
        open_runtime(settings).tokens,
        signed(settings, key=key, actor=actor, action=Action.TOKEN_REVOKE, args={"token_id": token_id}),
    )
    click.echo(f"token {token_id} of tenant {tenant_id} revoked")


def _reason_option(_ctx, _param, value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    if not value or len(value) > 500 or not value.isprintable():
        raise click.BadParameter("give 1-500 printable characters")
    return value


@tenant.command("offboard")
@click.argument("tenant_id", metavar="TENANT", callback=check_tenant_id)
@click.option("--reason", callback=_reason_option, help="Ask for it, and why (an operator; recorded in the ledger).")
@click.option(
    "--approve",
    is_flag=True,
    help="Approve the pending request and offboard (an approver of another identity than the operator who asked).",
)
@signer_options
@json_option
def tenant_offboard(
    tenant_id: str, reason: str | None, approve: bool, key: Path | None, actor: str | None, as_json: bool
) -> None:
    """Offboard TENANT: stop its new work, erase what is not evidence, keep its bundles and the ledger.

    Four-eyes: an operator asks (`--reason`), an approver of another identity approves (`--approve`), which
    offboards. Safe to approve again: it converges, and erases what retention kept once that retention has ended."""
    from evidence_pipeline.actors.roles import Action
    from evidence_pipeline.operations.offboarding import offboard_tenant, pending_request, request_offboarding

    if (reason is None) == (not approve):
        raise click.UsageError("give either --reason (ask) or --approve (decide)")
    settings = load_settings()
    rt = open_runtime(settings)
    if reason is not None:
        envelope = signed(
            settings, key=key, actor=actor, action=Action.TENANT_OFFBOARD, args={"reason": reason}, tenant=tenant_id
        )
        requested = request_offboarding(rt, gate(settings), envelope)
        if as_json:
            click.echo(json.dumps({"tenant": tenant_id, "request": requested["event_id"], "reason": reason}, indent=2))
            return
        click.echo(
            f"offboarding of {tenant_id} requested ({requested['event_id']}); an approver of another identity "
            f"runs `evidence tenant offboard {tenant_id} --approve`"
        )
        return
    pending = pending_request(rt, tenant_id)
    envelope = signed(
        settings,
        key=key,
        actor=actor,
        action=Action.TENANT_OFFBOARD_APPROVE,
        args={"request": pending["event_id"] if pending else ""},
        tenant=tenant_id,
    )
    result = offboard_tenant(rt, gate(settings), envelope)
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    click.echo(
        f"tenant {tenant_id} offboarded at {result['offboarded_at']}"
        + ("" if result["first_run"] else " (an earlier run; this one converged)")
    )
    click.echo(
        f"tokens revoked: {result['tokens_revoked']}, batches cancelled: {result['batches_cancelled']}, "
        f"jobs rejected: {result['jobs_rejected']}"
    )
    click.echo("erased: " + ", ".join(f"{name} {count}" for name, count in result["erased"].items()))
    kept = sum(len(keys) for keys in result["kept_until_retention"].values())
    if kept:
        click.echo(f"kept under retention: {kept} objects; run again after their retention ends")
    evidence = result["evidence"]
    until = evidence["retained_until"] or "an operator removes them (the archive has no Object Lock)"
    click.echo(
        f"evidence kept: {evidence['bundles']} bundles, {evidence['document_job_outputs']} document job "
        f"outputs, until {until}"
    )
