"""`evidence …`: the command line for operators and auditors."""

from __future__ import annotations

import json
import os
import shutil
import sys
from datetime import datetime, timezone
from pathlib import Path

import click

from evidence_pipeline.config import Settings
from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.ledger.checkpoints import prove_bundle, publish_checkpoint, verify_ledger
from evidence_pipeline.ledger import Ledger
from evidence_pipeline.ledger.documents import DocumentLedger
from evidence_pipeline.maintenance import sweep_attempts
from evidence_pipeline.models import validate_tenant_id
from evidence_pipeline.stats import PERCENTILES, StageSummary, admission_stats, parse_since, stage_stats
from evidence_pipeline.store import ArtifactStore
from evidence_pipeline.store.local import LocalStore
from evidence_pipeline.store.uri import open_store
from evidence_pipeline.verify import verify_bundle

_REPO_ROOT = Path(__file__).resolve().parent.parent


def _settings() -> Settings:
    try:
        return Settings.from_env()
    except EvidenceError as error:
        raise click.ClickException(str(error)) from None


def _use_dagster_home(settings: Settings) -> Path:
    """DAGSTER_HOME defaults to $EVIDENCE_HOME/dagster, seeded with the repository's dagster.yaml, or with
    dagster.production.yaml (PostgreSQL storage) when DAGSTER_PG_URL is set."""
    if "DAGSTER_HOME" not in os.environ:
        config = "dagster.production.yaml" if os.environ.get("DAGSTER_PG_URL") else "dagster.yaml"
        settings.dagster_home.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_REPO_ROOT / config, settings.dagster_home / "dagster.yaml")
        os.environ["DAGSTER_HOME"] = str(settings.dagster_home)
    return Path(os.environ["DAGSTER_HOME"])


@click.group()
def main() -> None:
    """Signed, tamper-evident monthly compliance evidence."""


@main.command()
@click.option("--months", default=3, show_default=True, help="Complete months to materialize per demo tenant.")
def demo(months: int) -> None:
    """Materialize the last complete months for every demo tenant through Dagster."""
    from evidence_pipeline.defs.demo import run_demo  # imports Dagster: only when asked for

    settings = _settings()
    _use_dagster_home(settings)
    try:
        bundles = run_demo(months, datetime.now(timezone.utc).date())
    except EvidenceError as error:
        raise click.ClickException(str(error)) from None
    click.echo(f"{'tenant':<18} {'period':<8} {'pages':>5}  {'new':<4} report.pdf sha256")
    for bundle in bundles:
        click.echo(
            f"{bundle.tenant_month.tenant:<18} {bundle.tenant_month.period:<8} {bundle.pages:>5}  "
            f"{'yes' if bundle.newly_published else 'no':<4} {bundle.report_sha256}"
        )
    created = sum(b.newly_published for b in bundles)
    click.echo(f"\n{len(bundles)} bundles ({created} newly published, {len(bundles) - created} already published)")
    example = bundles[0].location
    if not settings.archive_uri.startswith("s3://"):
        example = str(Path(settings.archive_uri) / example.removeprefix("archive://"))
    click.echo(f"archive: {settings.archive_uri}")
    click.echo(f"verify a bundle:  .venv/bin/evidence verify {example}")
    click.echo(f"prove it is in the signed ledger:  .venv/bin/evidence ledger prove {example}")
    click.echo("open the UI:      .venv/bin/evidence ui   (then http://127.0.0.1:3000)")


@main.command()
@click.argument("bundle")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--key-id", "key_ids", multiple=True, help="Only trust these statement key ids (repeatable).")
@click.option("--root-id", "root_ids", multiple=True, help="Only trust these PAdES trust root ids (repeatable).")
def verify(bundle: str, as_json: bool, key_ids: tuple[str, ...], root_ids: tuple[str, ...]) -> None:
    """Verify a bundle offline. Exit 0 only if every check passes.

    Keys come from the archive's keys/ folder; pin the ids you received out of band with --key-id and --root-id,
    otherwise whoever can write the archive could publish a key of their own.
    """
    try:
        store, prefix = _locate_bundle(bundle, _settings())
        result = verify_bundle(store, prefix, frozenset(key_ids), frozenset(root_ids))
    except EvidenceError as error:
        _fail(as_json, bundle, error)
    if as_json:
        click.echo(json.dumps(result.as_dict(), indent=2))
    else:
        for check in result.checks:
            click.echo(f"{'ok  ' if check.passed else 'FAIL'} {check.name}" + (f": {check.code}: {check.detail}" if not check.passed else ""))
        click.echo(f"statement key {result.statement_key_id}, trust root {result.trust_root_id}"
                   + ("" if key_ids and root_ids else "  (not pinned: pass --key-id and --root-id)"))
        click.echo("VERIFIED" if result.ok else f"NOT VERIFIED: {', '.join(result.codes)}")
    sys.exit(0 if result.ok else 1)


def _locate_bundle(bundle: str, settings: Settings) -> tuple[ArtifactStore, str]:
    """A bundle is <archive root>/bundles/<tenant>/<period>/<identity>, as a folder or under s3://bucket/prefix."""
    if bundle.startswith("s3://"):
        from evidence_pipeline.defs.resources import s3_client  # boto3 through dagster-aws, only when asked for

        root, marker, rest = bundle.rstrip("/").rpartition("/bundles/")
        if not marker or rest.count("/") != 2:
            raise EvidenceError("BUNDLE_NOT_FOUND", "expected s3://bucket/[prefix/]bundles/<tenant>/<period>/<identity>")
        return open_store(root, s3_client(settings)), f"bundles/{rest}"
    if "://" in bundle:
        raise EvidenceError("BUNDLE_NOT_FOUND", "a bundle is a local folder or an s3:// prefix")
    path = Path(bundle).resolve()
    if not path.is_dir() or len(path.parts) < 5 or path.parents[2].name != "bundles":
        raise EvidenceError("BUNDLE_NOT_FOUND", "expected a folder <archive>/bundles/<tenant>/<period>/<identity>")
    root = path.parents[3]
    return LocalStore(root), str(path.relative_to(root))


def _fail(as_json: bool, bundle: str, error: EvidenceError) -> None:
    if as_json:
        click.echo(json.dumps({"bundle": bundle, "ok": False, "codes": [error.code], "checks": []}, indent=2))
    else:
        click.echo(f"NOT VERIFIED: {error}", err=True)
    sys.exit(2)


def _runtime(settings: Settings):
    from evidence_pipeline.defs.resources import runtime_for  # S3 clients come from dagster-aws

    return runtime_for(settings)


def _run(action):
    """Run ``action``; a foreseeable failure prints its reason code and exits 2, without a traceback."""
    try:
        return action()
    except EvidenceError as error:
        raise click.ClickException(str(error)) from None


@main.group()
def ledger() -> None:
    """Audit ledger: signed checkpoints, verification, inclusion proofs."""


@ledger.command("checkpoint")
def ledger_checkpoint() -> None:
    """Sign and publish a checkpoint of the current ledger (put-once under ledger/checkpoints/)."""
    settings = _settings()
    runtime = _run(lambda: _runtime(settings))
    checkpoint = _run(lambda: publish_checkpoint(runtime.ledger, runtime.archive, runtime.keyring))
    click.echo(f"checkpoint {checkpoint['size']} events, root {checkpoint['root_sha256']}")


@ledger.command("verify")
def ledger_verify() -> None:
    """Recompute the hash chain, every checkpoint's Merkle root and the consistency between checkpoints."""
    settings = _settings()
    runtime = _run(lambda: _runtime(settings))
    report = _run(lambda: verify_ledger(runtime.ledger, runtime.archive))
    click.echo(f"ledger verified: {report['events']} events, {len(report['checkpoints'])} checkpoints consistent "
               f"({report['unchecked_tail']} events after the newest checkpoint)")


@ledger.command("prove")
@click.argument("bundle")
def ledger_prove(bundle: str) -> None:
    """Print the inclusion proof of BUNDLE's publication event in the newest covering checkpoint."""
    settings = _settings()
    runtime = _run(lambda: _runtime(settings))

    click.echo(json.dumps(_run(lambda: prove_bundle(runtime.ledger, *_locate_bundle(bundle, settings))), indent=2))


@main.group("dead-letter")
def dead_letter() -> None:
    """Jobs that need a human: rejected (terminal failure) or dead (retries exhausted)."""


@dead_letter.command("list")
def dead_letter_list() -> None:
    settings = _settings()
    runtime = _run(lambda: _runtime(settings))
    rows = runtime.ledger.jobs_in("dead", "rejected")
    for job in rows:
        click.echo(f"{job['job_id']}  {job['state']:<8} {job['tenant']:<20} {job['period']}  "
                   f"attempts={job['attempts']}  reason={job['last_reason']}")
    click.echo(f"{len(rows)} job(s)")


@main.command()
@click.argument("job_id")
@click.option("--reason", required=True, help="Why this job is retried (recorded in the ledger).")
@click.option("--by", "requested_by", default=lambda: os.environ.get("USER", "operator"), show_default="$USER")
def replay(job_id: str, reason: str, requested_by: str) -> None:
    """Reopen a rejected or dead job for a new attempt on the same pinned input; then re-materialize it."""
    settings = _settings()
    runtime = _run(lambda: _runtime(settings))
    job = _run(lambda: runtime.ledger.replay(job_id, requested_by, reason))
    click.echo(f"job {job['job_id']} reopened ({job['tenant']} {job['period']}); materialize the partition to run it")


@main.command()
def sweep() -> None:
    """Remove abandoned attempt directories (older than the lease, lease not live)."""
    settings = _settings()
    runtime = _run(lambda: _runtime(settings))
    click.echo(f"swept {len(_run(lambda: sweep_attempts(runtime)))} abandoned attempt directories")


class _Since(click.ParamType):
    name = "ISO-DATE-OR-DATETIME"

    def convert(self, value, param, ctx) -> datetime:
        try:
            return parse_since(value)
        except ValueError as error:
            self.fail(str(error), param, ctx)


def _tenant_option(ctx, param, value: str | None) -> str | None:
    try:
        return None if value is None else validate_tenant_id(value)
    except EvidenceError as error:
        raise click.BadParameter(str(error), ctx, param) from None


def _oldest_queued_run_age(settings: Settings) -> float | None:
    if "DAGSTER_HOME" not in os.environ and not settings.dagster_home.is_dir():
        return None  # nothing has run through Dagster here yet: do not create an instance just to look
    if not _use_dagster_home(settings).is_dir():
        return None  # $DAGSTER_HOME names a directory that does not exist: no instance, so no queue
    from evidence_pipeline.defs.queue import oldest_queued_run_age_in_dagster_home  # imports Dagster

    try:
        return oldest_queued_run_age_in_dagster_home()
    except Exception as error:  # Dagster's storage raises its own types (PostgreSQL down, bad URL, ...)
        raise EvidenceError("DAGSTER_UNAVAILABLE", f"the Dagster instance could not be read ({type(error).__name__})") from None


@main.command()
@click.option("--tenant", callback=_tenant_option, help="Only this tenant's events.")
@click.option("--since", type=_Since(), help="Only events recorded at or after this date or time (UTC unless an "
              "offset is given).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def stats(tenant: str | None, since: datetime | None, as_json: bool) -> None:
    """Stage latency percentiles (ms, nearest-rank) from the ledger's stages.timed events, and the age of the
    oldest queued Dagster run (any tenant)."""
    settings = _settings()
    ledger = _run(lambda: Ledger(settings.ledger_url))
    result = _run(lambda: stage_stats(ledger, tenant, since))
    admission = _run(lambda: admission_stats(ledger, tenant, since))
    unstarted_age = _run(lambda: DocumentLedger(ledger).oldest_unstarted_age())
    queued_age = _run(lambda: _oldest_queued_run_age(settings))
    if as_json:
        click.echo(json.dumps({
            "tenant": tenant, "since": since.isoformat() if since else None, "unit": "ms",
            "percentile_method": "nearest-rank", **result.as_dict(), "admission": admission.as_dict(),
            "oldest_unstarted_document_job_age_seconds": unstarted_age, "oldest_queued_run_age_seconds": queued_age,
        }, indent=2))
        return
    scope = f"tenant {tenant}" if tenant else "all tenants"
    click.echo(f"{result.events} stages.timed events, {scope}" + (f", since {since.isoformat()}" if since else ""))
    click.echo(f"{'lane':<9} {'stage':<11} {'count':>6}" + "".join(f" {f'p{p} ms':>10}" for p in PERCENTILES))
    for lane, summaries in [("all", result.stages), *result.lanes.items()]:
        for summary in summaries:
            click.echo(f"{lane:<9} {summary.stage:<11} {summary.count:>6}" + _percentile_cells(summary))
    click.echo(f"{'intake':<9} {admission.stage:<11} {admission.count:>6}" + _percentile_cells(admission))
    click.echo("no unstarted document jobs" if unstarted_age is None
               else f"oldest unstarted document job: {unstarted_age:.0f} s")
    click.echo("no queued runs" if queued_age is None else f"oldest queued run: {queued_age:.0f} s")


def _percentile_cells(summary: StageSummary) -> str:
    values = (getattr(summary, f"p{p}") for p in PERCENTILES)
    return "".join(f" {'-' if value is None else f'{value:.1f}':>10}" for value in values)


@main.group()
def tenant() -> None:
    """Tenants: API tokens for intake."""


@tenant.group("token")
def tenant_token() -> None:
    """Per-tenant API tokens (only their sha256 is stored)."""


@tenant_token.command("issue")
@click.argument("tenant_id", metavar="TENANT", callback=_tenant_option)
def tenant_token_issue(tenant_id: str) -> None:
    """Issue a new API token for TENANT and print it, once."""
    from evidence_pipeline.intake import open_documents

    documents = _run(lambda: open_documents(_settings()))
    token_id, token = _run(lambda: documents.ledger.issue_token(tenant_id, os.environ.get("USER", "operator")))
    click.echo(f"token id: {token_id}")
    click.echo(f"token:    {token}")
    click.echo("The token is shown only this once; store it now. Send it as `Authorization: Bearer <token>`.")


@tenant_token.command("revoke")
@click.argument("token_id")
def tenant_token_revoke(token_id: str) -> None:
    """Revoke a token by its id: every request with it is refused from now on."""
    from evidence_pipeline.intake import open_documents

    documents = _run(lambda: open_documents(_settings()))
    tenant_id = _run(lambda: documents.ledger.revoke_token(token_id, os.environ.get("USER", "operator")))
    click.echo(f"token {token_id} of tenant {tenant_id} revoked")


@main.group()
def intake() -> None:
    """The HTTP front door for tenants' documents and jobs."""


@intake.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
def intake_serve(host: str, port: int) -> None:
    """Serve the intake API (Starlette on uvicorn)."""
    from evidence_pipeline.intake.app import serve

    settings = _settings()
    _run(lambda: serve(settings, host, port))


@main.command()
def ui() -> None:
    """Start the Dagster UI and daemon (dagster dev) on this project's instance."""
    settings = _settings()
    _use_dagster_home(settings)
    # Same interpreter as this command, so it works without an activated virtualenv.
    os.execv(sys.executable, [sys.executable, "-m", "dagster", "dev", "-w", str(_REPO_ROOT / "workspace.yaml")])
