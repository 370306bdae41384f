"""Jobs that need an operator: `evidence dead-letter list`, `evidence replay` and `evidence sweep` (the attempt
directories that dead workers left behind)."""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

import click

from evidence_pipeline.cli.acting import gate, signed, signer_options
from evidence_pipeline.cli.options import check_tenant_id, json_option, parse_moment
from evidence_pipeline.cli.resources import load_settings, open_runtime


@click.group("dead-letter")
def dead_letter() -> None:
    """Jobs that failed and need a human: dead (retries exhausted) or rejected by a terminal failure."""


_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _parse_age(_ctx, _param, value: str | None) -> float | None:
    """``--older-than``: a duration, a number and a unit (s, m, h, d), e.g. 90m or 7d; seconds."""
    if value is None:
        return None
    number, unit = value[:-1], value[-1:]
    if unit not in _AGE_UNITS or not number.isdigit():
        raise click.BadParameter("a duration such as 30m, 12h or 7d")
    return int(number) * _AGE_UNITS[unit]


@dead_letter.command("list")
@click.option("--tenant", callback=check_tenant_id, help="Only this tenant's jobs.")
@click.option(
    "--kind",
    "kinds",
    multiple=True,
    type=click.Choice(["tenant-month", "evidence-request", "document"]),
    help="Only jobs of this kind (repeatable): a tenant-month's evidence, a tenant's request for a month's "
    "evidence, a document operation.",
)
@click.option("--code", "codes", multiple=True, help="Only jobs that ended with this reason code (repeatable).")
@click.option("--older-than", callback=_parse_age, help="Only jobs that ended at least this long ago (30m, 12h, 7d).")
@click.option("--since", callback=parse_moment, help="Only jobs that ended at or after this ISO 8601 time.")
@json_option
def dead_letter_list(
    tenant: str | None,
    kinds: tuple[str, ...],
    codes: tuple[str, ...],
    older_than: float | None,
    since: datetime | None,
    as_json: bool,
) -> None:
    """Failed jobs (dead, or rejected by a terminal failure), with the next step for each; decisions about an
    input (a gate refusal, a contract a ruleset rejected) are outcomes, not listed here."""
    from evidence_pipeline.operations.dead_letters import DeadLetterFilter, dead_letters

    settings = load_settings(reads_only=True)
    runtime = open_runtime(settings)
    which = DeadLetterFilter(
        tenant,
        kinds,
        codes,
        None if older_than is None else time.time() - older_than,
        None if since is None else since.timestamp(),
    )
    letters = dead_letters(runtime, which)
    if as_json:
        click.echo(json.dumps(letters, indent=2))
        return
    for letter in letters:
        click.echo(
            f"{letter['job_id']}  {letter['state']:<8} {letter['tenant']:<20} {letter['period']}  "
            f"{letter['kind']:<16} ended={letter['ended_at']}  attempts={letter['tries']}  reason={letter['reason']}"
            + (f"  message={letter['message']}" if letter["message"] else "")
            + f"\n    attempt {letter['attempt_id']}; next: {letter['next_step']}"
        )
    click.echo(f"{len(letters)} job(s)")


@click.command()
@click.argument("job_id")
@click.option("--reason", required=True, help="Why this job is retried (recorded in the ledger).")
@signer_options
@click.option(
    "--policy-version",
    help="The policy the new attempt runs under: the one the job was pinned with (the default); any other is refused.",
)
def replay(job_id: str, reason: str, key: Path | None, actor: str | None, policy_version: str | None) -> None:
    """Open a new attempt of a rejected or dead job on the same pinned input; the ended attempt stays as it was.
    An operator's signed action (`job.replay`), stored with its `job.replayed` event."""
    from evidence_pipeline.actors.roles import Action
    from evidence_pipeline.operations.dead_letters import replayed
    from evidence_pipeline.operations.replay import replay_job

    settings = load_settings()
    args = {"job_id": job_id, "reason": reason} | ({"policy_version": policy_version} if policy_version else {})
    job = replay_job(gate(settings), signed(settings, key=key, actor=actor, action=Action.JOB_REPLAY, args=args))
    click.echo(
        f"job {job_id} ({job.tenant} {job.period}): attempt {job.attempt_id} replays "
        f"{job.replay_of}; next: {replayed(open_runtime(settings), job_id)}"
    )


@click.command()
def sweep() -> None:
    """Remove abandoned attempt directories (older than the lease, lease not live); what it removed, kept and
    failed to remove is recorded in the ledger (`sweep.completed`)."""
    from evidence_pipeline.operations.maintenance import sweep_attempts

    settings = load_settings()
    runtime = open_runtime(settings)
    counts = sweep_attempts(runtime, "evidence sweep").counts()
    click.echo(
        f"swept {counts['removed']} abandoned attempt directories; kept {counts['kept_live']} with a live "
        f"lease and {counts['kept_young']} too young; failed to remove {counts['failed']}"
    )
