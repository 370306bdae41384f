"""`evidence audit …`: what an auditor draws from the deployment's signed log."""

from __future__ import annotations

import json

import click

from evidence_pipeline.cli.options import json_option, witness_options, witness_policy
from evidence_pipeline.cli.resources import load_settings, open_audit


@click.group()
def audit() -> None:
    """An auditor's view of the deployment: samples drawn from witnessed checkpoints."""


@audit.command("sample")
@click.option(
    "--checkpoint",
    "size",
    type=click.IntRange(min=1),
    required=True,
    metavar="N",
    help="The checkpoint of N events whose root seeds the draw (pick one published after you announced the audit).",
)
@click.option("--count", type=click.IntRange(min=1), required=True, metavar="K", help="How many tenant-months.")
@witness_options("")
@click.option(
    "--origin",
    metavar="ORIGIN",
    help="The log's origin the checkpoint's note must state "
    "[default: the --policy file's `log` line, else EVIDENCE_LOG_ORIGIN].",
)
@json_option
def audit_sample(
    size: int,
    count: int,
    witnesses: tuple[str, ...],
    policy: int | None,
    policy_file: str | None,
    origin: str | None,
    as_json: bool,
) -> None:
    """Draw K tenant-months from those published among checkpoint N's events, deterministically from its root:
    the same checkpoint always gives the same sample, and the operator cannot steer it once a witness co-signed
    the root. The checkpoint's note must meet the witness policy (--witness/--policy, else every witness of
    EVIDENCE_WITNESSES); with neither, the sample says it is drawn from an unwitnessed root."""
    from evidence_pipeline.audit.sample import sample_archive
    from evidence_pipeline.audit.witnessing import pinned_origin
    from evidence_pipeline.signed_note import parse_vkey
    from evidence_pipeline.witness.policy import TlogPolicy

    settings = load_settings(reads_only=True)
    pins = witness_policy(witnesses, policy, policy_file)
    if pins is None and settings.witnesses:
        configured = tuple(parse_vkey(vkey) for _, vkey in settings.witnesses)
        pins = TlogPolicy.of_count(configured, len(configured))
    ledger, archive = open_audit(settings)
    drawn = sample_archive(
        ledger, archive, size=size, count=count, origin=pinned_origin(origin, pins) or settings.log_origin, policy=pins
    )
    if as_json:
        click.echo(
            json.dumps(
                {
                    "checkpoint": drawn.size,
                    "root_sha256": drawn.root.hex(),
                    "witnessed": drawn.witnessed,
                    "population": drawn.population,
                    "sample": [{"tenant": t, "period": p} for t, p in drawn.tenant_months],
                },
                indent=2,
            )
        )
        return
    click.echo(
        f"checkpoint {drawn.size}, root {drawn.root.hex()}, "
        + ("witnessed" if drawn.witnessed else "NOT witnessed (no witness policy: pass --witness or --policy)")
        + f"; {len(drawn.tenant_months)} of {drawn.population} tenant-months:"
    )
    for tenant, period in drawn.tenant_months:
        click.echo(f"{tenant} {period}")
