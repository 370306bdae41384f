"""`evidence demo`: the demo tenants' documents and months, worked through Dagster, and what to run next."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import click

from evidence_pipeline.cli.resources import load_settings, use_dagster_home


@click.command()
@click.option("--months", default=3, show_default=True, help="Complete months to materialize per demo tenant.")
def demo(months: int) -> None:
    """Submit the demo tenants' documents and work them, then materialize their last complete months through
    Dagster."""
    from evidence_pipeline.definitions import defs  # imports Dagster: only when asked for
    from evidence_pipeline.defs.demo import run_demo
    from evidence_pipeline.monthly import document_outcomes

    settings = load_settings()
    use_dagster_home(settings)
    demo = run_demo(
        months, datetime.now(timezone.utc).date(), say=lambda line: click.echo(line, err=True), code_location=defs
    )
    if demo.documents:
        click.echo(f"document jobs, filed under {demo.documents_period} (its report lists them):")
        click.echo(f"{'tenant':<18} {'operation':<46} {'jobs':>4}  outcome")
        for tenant in sorted({job.tenant for job in demo.documents}):
            jobs = [document_outcomes.outcome(job) for job in demo.documents if job.tenant == tenant]
            for operation, result, n in document_outcomes.counts(jobs):
                click.echo(f"{tenant:<18} {operation:<46} {n:>4}  {result}")
        click.echo("")
    outcomes = demo.months
    click.echo(f"{'tenant':<18} {'period':<8} {'pages':>5}  {'outcome':<8} report.pdf sha256 or reason code")
    for outcome in outcomes:
        state = ("new" if outcome.newly_published else "existing") if outcome.ok else "FAILED"
        click.echo(
            f"{outcome.tenant_month.tenant:<18} {outcome.tenant_month.period:<8} {outcome.pages or '-':>5}  "
            f"{state:<8} {outcome.report_sha256 if outcome.ok else outcome.reason}"
        )
    published = [o for o in outcomes if o.ok]
    created = sum(o.newly_published for o in published)
    failed = len(outcomes) - len(published)
    click.echo(
        f"\n{len(published)} bundles ({created} newly published, {len(published) - created} already "
        f"published), {failed} failed"
    )
    if published:
        example = published[0].location
        if not settings.archive_uri.startswith("s3://"):
            example = str(Path(settings.archive_uri) / example.removeprefix("archive://"))
        click.echo(f"archive: {settings.archive_uri}")
        click.echo(f"verify a bundle:  .venv/bin/evidence verify {example}")
        click.echo(f"prove it is in the signed ledger:  .venv/bin/evidence ledger prove {example}")
        click.echo("open the UI:      .venv/bin/evidence ui   (then http://127.0.0.1:3000; auditors: --read-only)")
    click.echo(
        "act as a dev actor: --key FILE on a signed command, or EVIDENCE_ACTOR_KEY=FILE (0600 files under "
        "$EVIDENCE_HOME, ./.evidence by default; see the roles in the docs' Who acts)"
    )
    for name, (role, key) in demo.actors.items():  # never a local path: the home names it
        click.echo(f"  {name:<13} {role:<9} --key $EVIDENCE_HOME/{key}")
    if failed:
        reasons = sorted({o.reason for o in outcomes if not o.ok})
        raise click.ClickException(
            f"{failed} tenant-month(s) failed: {', '.join(reasons)} (see `evidence dead-letter list`)"
        )
