"""Jobs that need an operator: `evidence dead-letter list`, `evidence replay` and `evidence sweep` (the attempt
directories that dead workers left behind)."""

from __future__ import annotations

from pathlib import Path

import click

from evidence_pipeline.cli.acting import gate, signed, signer_options
from evidence_pipeline.cli.resources import load_settings, open_runtime


@click.group("dead-letter")
def dead_letter() -> None:
    """Jobs that need a human: rejected (terminal failure) or dead (retries exhausted)."""


@dead_letter.command("list")
def dead_letter_list() -> None:
    settings = load_settings()
    runtime = open_runtime(settings)
    rows = runtime.ledger.jobs_in("dead", "rejected")
    for job in rows:
        click.echo(
            f"{job['job_id']}  {job['state']:<8} {job['tenant']:<20} {job['period']}  "
            f"attempts={job['attempts']}  reason={job['last_reason']}"
            + (f"  message={job['last_message']}" if job["last_message"] else "")
        )
    click.echo(f"{len(rows)} job(s)")


@click.command()
@click.argument("job_id")
@click.option("--reason", required=True, help="Why this job is retried (recorded in the ledger).")
@signer_options
def replay(job_id: str, reason: str, key: Path | None, actor: str | None) -> None:
    """Reopen a rejected or dead job for a new attempt on the same pinned input; then re-materialize it. An
    operator's signed action (`job.replay`), stored with its `job.replayed` event."""
    from evidence_pipeline.actors.roles import Action
    from evidence_pipeline.operations.replay import replay_job

    settings = load_settings()
    envelope = signed(settings, key, actor, Action.JOB_REPLAY, {"job_id": job_id, "reason": reason})
    job = replay_job(gate(settings), envelope)
    click.echo(f"job {job['job_id']} reopened ({job['tenant']} {job['period']}); materialize the partition to run it")


@click.command()
def sweep() -> None:
    """Remove abandoned attempt directories (older than the lease, lease not live)."""
    from evidence_pipeline.operations.maintenance import sweep_attempts

    settings = load_settings()
    runtime = open_runtime(settings)
    click.echo(f"swept {len(sweep_attempts(runtime))} abandoned attempt directories")
