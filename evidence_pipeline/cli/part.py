"""`evidence part …`: a reviewer's decision on a document's part (a split's derivative), which a merge admits."""

from __future__ import annotations

import json
from pathlib import Path

import click

from evidence_pipeline.cli.acting import gate, signed, signer_options
from evidence_pipeline.cli.options import check_tenant_id, json_option
from evidence_pipeline.cli.resources import load_settings, open_runtime


@click.group()
def part() -> None:
    """A document's parts: decide on one (approve or reject it for a merge)."""


@part.command("decide")
@click.argument("tenant_id", metavar="TENANT", callback=check_tenant_id)
@click.argument("artifact_id", metavar="ARTIFACT_ID")
@click.option("--approve/--reject", "approve", default=None, help="The decision (one of them is required).")
@click.option("--reason", required=True, help="Why (1-500 printable characters); recorded with the decision.")
@signer_options
@json_option
def part_decide(
    tenant_id: str,
    artifact_id: str,
    approve: bool | None,
    reason: str,
    key: Path | None,
    actor: str | None,
    as_json: bool,
) -> None:
    """Approve or reject TENANT's part ARTIFACT_ID (an artifact id, as the split's status lists its outputs): a
    reviewer's or an approver's signed action, recorded as a `part.decided` ledger event with the request. A merge
    admits a part whose latest decision, this one or its contract review's, approves it."""
    from evidence_pipeline.actors.roles import Action
    from evidence_pipeline.documents.decisions import decide_part

    if approve is None:
        raise click.UsageError("decide with --approve or --reject")
    settings = load_settings()
    rt = open_runtime(settings)
    envelope = signed(
        settings,
        key=key,
        actor=actor,
        action=Action.PART_DECIDE,
        args={"artifact_id": artifact_id, "decision": "approved" if approve else "rejected", "reason": reason},
        tenant=tenant_id,
    )
    details = decide_part(gate(settings), rt, envelope)
    shown = {k: details[k] for k in ("artifact_id", "sha256", "decision", "reason")}
    if as_json:
        click.echo(json.dumps(shown | {"tenant": tenant_id}, indent=2))
    else:
        click.echo(f"{shown['decision']}: {artifact_id} ({shown['sha256'][:12]}): {reason}")
