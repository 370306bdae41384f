"""`evidence ruleset …`: contract-review rulesets: a candidate's shadow run, canary routing, rollback, status."""

from __future__ import annotations

import json
from pathlib import Path

import click

from evidence_pipeline.cli.acting import gate, signed, signer_options
from evidence_pipeline.cli.options import json_option
from evidence_pipeline.cli.resources import intake_ledger, load_settings, open_runtime


@click.group()
def ruleset() -> None:
    """Review rulesets: try a candidate on recent reviews, route chosen tenants to it, roll it back."""


def _print_routes(in_force: str, routed: dict[str, str], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps({"in_force": in_force, "routed": routed}, indent=2))
        return
    click.echo(f"in force: {in_force}")
    for tenant, candidate in sorted(routed.items()):
        click.echo(f"  {tenant:<24} -> {candidate}")


@ruleset.command("canary")
@click.argument("candidate")
@click.option("--tenant", "tenants", multiple=True, required=True, help="A tenant to route (repeatable).")
@signer_options
@json_option
def ruleset_canary(
    candidate: str, tenants: tuple[str, ...], key: Path | None, actor: str | None, as_json: bool
) -> None:
    """Route the new contract reviews of the chosen tenants to CANDIDATE (a registered version): jobs they submit
    without naming a ruleset pin it from now on. An operator's signed action, recorded as a `ruleset.canary` event
    per tenant."""
    from evidence_pipeline.actors.roles import Action
    from evidence_pipeline.documents import canary
    from evidence_pipeline.documents import ruleset as rulesets

    settings = load_settings()
    envelope = signed(
        settings,
        key=key,
        actor=actor,
        action=Action.RULESET_CANARY,
        args={"candidate": candidate, "tenants": list(tenants)},
    )
    _print_routes(rulesets.IN_FORCE, canary.start(gate(settings), envelope), as_json)


@ruleset.command("rollback")
@signer_options
@json_option
def ruleset_rollback(key: Path | None, actor: str | None, as_json: bool) -> None:
    """Stop routing tenants to the candidate: their new jobs pin the version in force again. Jobs already
    accepted keep the ruleset they pinned (leased ones finish under it); no job or event is deleted. An operator's
    signed action."""
    from evidence_pipeline.actors.roles import Action
    from evidence_pipeline.documents import canary
    from evidence_pipeline.documents import ruleset as rulesets

    settings = load_settings()
    envelope = signed(settings, key=key, actor=actor, action=Action.RULESET_ROLLBACK, args={})
    stopped = canary.rollback(gate(settings), envelope)
    if as_json:
        click.echo(json.dumps({"in_force": rulesets.IN_FORCE, "rolled_back": stopped}, indent=2))
        return
    click.echo(f"rolled back {len(stopped)} tenant(s) to {rulesets.IN_FORCE}" if stopped else "no tenant was routed")


@ruleset.command("status")
@json_option
def ruleset_status(as_json: bool) -> None:
    """The version in force and the tenants routed to a candidate."""
    from evidence_pipeline.documents import canary
    from evidence_pipeline.documents import ruleset as rulesets

    _print_routes(rulesets.IN_FORCE, canary.routes(intake_ledger()), as_json)


@ruleset.command("shadow")
@click.argument("candidate")
@click.option(
    "--sample",
    default=100,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="How many of the most recent contract reviews to re-evaluate.",
)
@json_option
def ruleset_shadow(candidate: str, sample: int, as_json: bool) -> None:
    """Re-evaluate recent contract reviews under CANDIDATE (a ruleset file, or a registered version) and print
    where its decision differs from the committed one. Reads only: nothing is signed, stored or recorded."""
    from evidence_pipeline.documents import ruleset as rulesets
    from evidence_pipeline.documents.shadow import shadow

    if candidate in rulesets.REGISTERED:
        chosen = rulesets.load(candidate, rulesets.REGISTERED[candidate])
    else:
        chosen = rulesets.load_candidate(Path(candidate))
    results = shadow(open_runtime(load_settings()), chosen, sample)
    changed = [r for r in results if r.changed]
    if as_json:
        jobs = [
            {
                "job_id": r.job_id,
                "tenant": r.tenant,
                "current": r.current,
                "candidate": r.candidate,
                "changed": r.changed,
            }
            for r in results
        ]
        click.echo(
            json.dumps(
                {
                    "candidate": {"version": chosen.version, "sha256": chosen.sha256},
                    "jobs": jobs,
                    "changed": len(changed),
                },
                indent=2,
            )
        )
        return
    for r in results:
        line = f"{r.job_id[:12]}  {r.tenant:<20} {r.current['decision']}"
        if r.changed:
            line += f" -> {r.candidate['decision']}" + "".join(
                f"  {key}: {','.join(r.candidate[key]) or '-'} (was {','.join(r.current[key]) or '-'})"
                for key in ("missing", "failed_rules")
                if r.candidate[key] != r.current[key]
            )
        click.echo(("CHANGED " if r.changed else "same    ") + line)
    click.echo(
        f"{len(results)} review(s) under {chosen.version} (sha256 {chosen.sha256[:12]}): "
        f"{len(changed)} changed; nothing was signed or recorded"
    )
