"""`evidence …`: the command line for operators and auditors.

Each command imports what it needs in its body, so that `evidence --help` and `evidence verify` load neither the
ledger (SQLAlchemy, Alembic), the pipeline (pandas, reportlab) nor Dagster (test_verify_many checks which modules load).
"""

from __future__ import annotations

import errno
import getpass
import json
import os
import shutil
import sys
import time
from collections.abc import Collection
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import click

from evidence_pipeline.config import Settings
from evidence_pipeline.errors import EXIT_CHECK_FAILED, EXIT_OK, EvidenceError, ReasonCode, exit_code
from evidence_pipeline.models import validate_tenant_id
from evidence_pipeline.paths import private_dirs

if TYPE_CHECKING:
    from evidence_pipeline.audit.verify_many import Outcome
    from evidence_pipeline.ledger import Ledger
    from evidence_pipeline.stats import StageSummary
    from evidence_pipeline.store import ArtifactStore

_REPO_ROOT = Path(__file__).resolve().parent.parent


def _moment(value: str | None) -> datetime | None:
    """``--at``: an ISO 8601 time, UTC unless it names its offset."""
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter("not an ISO 8601 time, e.g. 2031-06-30T12:00:00Z") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _settings() -> Settings:
    return Settings.from_env()


def _use_dagster_home(settings: Settings) -> Path:
    """DAGSTER_HOME defaults to $EVIDENCE_HOME/dagster, seeded with the repository's dagster.yaml, or with
    dagster.production.yaml (PostgreSQL storage) when DAGSTER_PG_URL is set."""
    home = settings.dagster_home
    if settings.dagster_home_override is None:
        config = "dagster.production.yaml" if settings.dagster_pg_url else "dagster.yaml"
        private_dirs(home)  # Dagster's SQLite databases live here: owner-only
        shutil.copyfile(_REPO_ROOT / config, home / "dagster.yaml")
    # Dagster finds its instance through the environment, in this process and in those it starts (`evidence ui`).
    os.environ["DAGSTER_HOME"] = str(home)
    return home


_JSON = "evidence.json"  # ctx.meta key: the running command was asked for JSON


class _ErrorBoundary(click.Group):
    """The one place where a foreseeable failure becomes an exit code and a message (or, with --json, a JSON
    error body): EvidenceError by its reason code (errors.exit_code), OS errors as LOCAL_IO_FAILED. Never a
    traceback, never a local path."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except EvidenceError as error:
            _exit_with(ctx, error)
        except OSError as error:
            reason = errno.errorcode.get(error.errno or 0, type(error).__name__)
            _exit_with(ctx, EvidenceError(ReasonCode.LOCAL_IO_FAILED, f"a local file could not be used ({reason})"))


def _exit_with(ctx: click.Context, error: EvidenceError):
    if ctx.meta.get(_JSON):
        click.echo(json.dumps({"error": {"code": error.code, "message": error.message}}, indent=2))
    else:
        click.echo(f"Error: {error}", err=True)
    ctx.exit(exit_code(error.code))


def _remember_json(ctx: click.Context, _param, value: bool) -> bool:
    ctx.meta[_JSON] = value
    return value


json_option = click.option("--json", "as_json", is_flag=True, callback=_remember_json, is_eager=True,
                           help="Print the result as JSON (errors as {\"error\": {\"code\", \"message\"}}).")


@click.group(cls=_ErrorBoundary)
def main() -> None:
    """Signed, tamper-evident monthly compliance evidence.

    Exit codes: 0 ok, 1 a check failed, 2 usage or not found, 3 infrastructure unavailable.
    """


@main.command()
@click.option("--months", default=3, show_default=True, help="Complete months to materialize per demo tenant.")
def demo(months: int) -> None:
    """Submit the demo tenants' documents and work them, then materialize their last complete months through
    Dagster."""
    from evidence_pipeline.defs.demo import run_demo  # imports Dagster: only when asked for
    from evidence_pipeline.monthly import document_outcomes

    settings = _settings()
    _use_dagster_home(settings)
    demo = run_demo(months, datetime.now(timezone.utc).date(), say=lambda line: click.echo(line, err=True))
    if demo.documents:
        click.echo(f"document jobs, filed under {demo.documents_period} (its report lists them):")
        click.echo(f"{'tenant':<18} {'operation':<46} {'jobs':>4}  outcome")
        for tenant in sorted({job["tenant"] for job in demo.documents}):
            jobs = [document_outcomes.outcome(job) for job in demo.documents if job["tenant"] == tenant]
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
    click.echo(f"\n{len(published)} bundles ({created} newly published, {len(published) - created} already "
               f"published), {failed} failed")
    if published:
        example = published[0].location
        if not settings.archive_uri.startswith("s3://"):
            example = str(Path(settings.archive_uri) / example.removeprefix("archive://"))
        click.echo(f"archive: {settings.archive_uri}")
        click.echo(f"verify a bundle:  .venv/bin/evidence verify {example}")
        click.echo(f"prove it is in the signed ledger:  .venv/bin/evidence ledger prove {example}")
        click.echo("open the UI:      .venv/bin/evidence ui   (then http://127.0.0.1:3000; auditors: --read-only)")
    if failed:
        reasons = sorted({o.reason for o in outcomes if not o.ok})
        raise click.ClickException(f"{failed} tenant-month(s) failed: {', '.join(reasons)} "
                                   "(see `evidence dead-letter list`)")


@main.command()
@click.argument("locations", nargs=-1, metavar="[LOCATION...]")
@click.option("--package", "package", metavar="FOLDER", help="Verify an audit package (`evidence export`) instead of "
              "archive locations: every bundle, checkpoint and proof in it, with nothing else.")
@click.option("--require-witness", "witness", metavar="PUB.pem|KEY_ID", help="With --package: every checkpoint must "
              "carry a valid signature by this witness key (a PEM file, or the id of the copy in the package).")
@json_option
@click.option("--key-id", "key_ids", multiple=True, help="Only trust these statement key ids (repeatable).")
@click.option("--root-id", "root_ids", multiple=True, help="Only trust these PAdES trust root ids (repeatable).")
@click.option("--workers", type=click.IntRange(min=1), help="Worker processes for many bundles "
              "[default: EVIDENCE_WORKERS, one per CPU].")
@click.option("--at", "at", callback=lambda _ctx, _param, value: _moment(value), metavar="TIME",
              help="Validate the PAdES signatures at this ISO 8601 time (UTC unless it says) instead of now.")
def verify(locations: tuple[str, ...], package: str | None, witness: str | None, as_json: bool,
           key_ids: tuple[str, ...], root_ids: tuple[str, ...], workers: int | None, at: datetime | None) -> None:
    """Verify bundles offline. Exit 0 only if every check of every bundle passes.

    A LOCATION is one bundle, <archive>/bundles/<tenant>/<period>/<identity>, or a prefix whose bundles are all
    verified: <archive>/bundles[/<tenant>[/<period>]] or the archive itself; a folder or s3://bucket/prefix.
    For several bundles, --json prints one JSON object per bundle (JSON lines).

    --package FOLDER verifies an audit package instead (no database, no network): its bundles, their inclusion
    proofs, the signed checkpoints and the consistency between them; --json prints one JSON document.

    Keys come from the archive's keys/ folder: the statement keys and signer certificates that the newest keyring
    document (keys/keyring-*.json), signed by the trust root, lists. Pin the trust root id you received out of band
    with --root-id, otherwise whoever can write the archive could publish a root and keyring of their own. An
    archive from before key rotation has no keyring: pin its statement keys with --key-id too.

    A LOCATION may also be a document artifact id (documents/<tenant>/…, as a job's status lists its outputs):
    it is verified as `evidence lineage` verifies it, back to the upload, with the configured ledger and stores.
    """
    if package is not None and locations:
        raise click.UsageError("give either LOCATION... or --package, not both")
    if package is None and not locations:
        raise click.UsageError("Missing argument 'LOCATION...' (or --package FOLDER).")
    if witness is not None and package is None:
        raise click.UsageError("--require-witness checks the checkpoints of a package: use it with --package")
    if package is not None:  # reads no setting but EVIDENCE_WORKERS, and only when --workers is not given
        _verify_package(package, witness, as_json, frozenset(key_ids), frozenset(root_ids),
                        workers or _settings().worker_processes(), at)
    from evidence_pipeline.audit.locations import locate  # with verify_many: pyHanko, which only verify needs

    settings = _settings()
    artifacts = [location for location in locations if _is_artifact_id(location)]
    if artifacts:
        if len(artifacts) != len(locations):
            raise EvidenceError(ReasonCode.CONFIG_INVALID, "verify either bundles or document artifact ids, not both")
        sys.exit(max(_walk_lineage(artifact, as_json) for artifact in artifacts))

    targets = [locate(location) for location in locations]
    if len(targets) == 1 and targets[0].is_bundle:
        from evidence_pipeline.audit.verify import verify_bundle

        target = targets[0]
        result = verify_bundle(_open_archive(target.archive), target.prefix, frozenset(key_ids), frozenset(root_ids),
                               at)
        if as_json:
            click.echo(json.dumps(result.as_dict(), indent=2))
        else:
            for check in result.checks:
                failure = "" if check.passed else f": {check.code}: {check.detail}"
                click.echo(f"{'ok  ' if check.passed else 'FAIL'} {check.name}{failure}")
            click.echo(f"statement key {result.statement_key_id}, trust root {result.trust_root_id}"
                       + _vouched(result.keyring_sequence is not None, key_ids, root_ids))
            for line in _chain_lines(result):
                click.echo(line)
            verdict = "VERIFIED" if result.ok else f"NOT VERIFIED: {', '.join(result.codes)}"
            if result.superseded_by is not None:
                verdict += f" but SUPERSEDED by {result.current_bundle['identity']}: valid, not the current bundle"
            click.echo(verdict)
        sys.exit(EXIT_OK if result.ok else EXIT_CHECK_FAILED)

    from evidence_pipeline.audit.verify_many import list_bundles, overall_exit_code, verify_all

    bundles = list_bundles(targets, _open_archive)
    progress = _Progress(len(bundles)) if sys.stderr.isatty() else None
    outcomes = []
    for outcome in verify_all(bundles, _open_archive, frozenset(key_ids), frozenset(root_ids),
                              workers or settings.worker_processes(), at):
        outcomes.append(outcome)
        if progress:
            progress.clear()
        click.echo(json.dumps(outcome.as_dict()) if as_json else _outcome_line(outcome))
        if progress:
            progress.show(outcomes)
    if progress:
        progress.clear()
    if not as_json:
        _print_summary(outcomes, key_ids, root_ids)
    sys.exit(overall_exit_code(outcomes))


def _chain_lines(result) -> list[str]:
    """Where a verified bundle stands in its tenant-month's corrections chain, as `evidence verify` prints it."""
    lines = []
    if result.supersedes is not None:
        corrected = result.supersedes
        lines.append(f"supersedes {corrected['identity']} ({', '.join(corrected['reason'])})"
                     + ("" if corrected["in_archive"] else ": that bundle is not in this archive"))
    if result.superseded_by is not None:
        lines.append(f"superseded by {result.superseded_by['identity']}; current bundle of the tenant-month: "
                     f"{result.current_bundle['prefix']}")
    elif result.current_bundle is not None:
        lines.append("current bundle of the tenant-month (nothing in this archive supersedes it)")
    return lines


def _verify_package(argument: str, witness: str | None, as_json: bool, key_ids: frozenset[str],
                    root_ids: frozenset[str], workers: int, at: datetime | None) -> None:
    """`evidence verify --package`: the package-level checks, then every bundle in worker processes."""
    from evidence_pipeline.audit.package import check_package, open_package, verify_bundles, witness_public_key
    from evidence_pipeline.audit.verify_many import overall_exit_code

    store, index = open_package(argument)
    pinned_witness = None if witness is None else witness_public_key(store, witness)
    checks = check_package(store, index, key_ids, root_ids, pinned_witness)
    if not as_json:
        span = f"{index.first or 'first'}..{index.last or 'last'}"
        click.echo(f"package of {len(index.bundles)} bundles of {index.tenant} ({span}), "
                   f"{len(index.checkpoints)} checkpoints, exported {index.exported_at}")
        for check in checks.checks:
            click.echo(f"{'ok  ' if check.passed else 'FAIL'} {check.name}"
                       + ("" if check.passed else f": {check.code}: {check.detail}"))
    progress = _Progress(len(index.bundles)) if sys.stderr.isatty() and not as_json else None
    outcomes = []
    for outcome in verify_bundles(argument, store, index, checks, key_ids, root_ids, workers, at):
        outcomes.append(outcome)
        if not as_json:
            if progress:
                progress.clear()
            click.echo(_outcome_line(outcome))
            if progress:
                progress.show(outcomes)
    if progress:
        progress.clear()
    code = EXIT_CHECK_FAILED if not checks.ok else overall_exit_code(outcomes)
    if as_json:
        verified = [o.verification for o in outcomes if o.verification is not None]
        click.echo(json.dumps({
            "package": argument, "ok": code == EXIT_OK, "tenant": index.tenant, "from": index.first, "to": index.last,
            "codes": sorted(set(checks.codes) | {c for v in verified for c in v.codes}
                            | {o.error.code for o in outcomes if o.error is not None}),
            "checkpoint_key_ids": sorted(checks.checkpoint_key_ids), "witness_key_id": checks.witness_id,
            "checks": [c.__dict__ for c in checks.checks], "bundles": [o.as_dict() for o in outcomes],
        }, indent=2))
    else:
        _print_summary(outcomes, key_ids, root_ids, package_codes=checks.codes)
        click.echo(f"checkpoints signed by {', '.join(sorted(checks.checkpoint_key_ids)) or '-'}; "
                   + (f"witness {checks.witness_id} required" if checks.witness_id
                      else "witness not checked (pass --require-witness)"))
    sys.exit(code)


def _outcome_line(outcome: Outcome) -> str:
    if outcome.error is not None:
        return f"ERR  {outcome.bundle}: {outcome.error}"
    verification = outcome.verification
    failed = [check for check in verification.checks if not check.passed]
    superseded = "" if verification.superseded_by is None else (
        f" (superseded; current: {verification.current_bundle['identity'][:12]})")
    return f"{'ok  ' if not failed else 'FAIL'} {outcome.bundle}{superseded}" + "".join(
        f"{':' if i == 0 else ';'} {check.code} ({check.name}: {check.detail})" for i, check in enumerate(failed))


def _vouched(keyring: bool, key_ids: Collection[str], root_ids: Collection[str]) -> str:
    """How the keys were vouched for, and what the auditor should pin."""
    if keyring:
        return ", listed in the keyring" + ("" if root_ids else "  (trust root not pinned: pass --root-id)")
    return ", no keyring" + ("" if key_ids and root_ids else "  (not pinned: pass --key-id and --root-id)")


def _print_summary(outcomes: list[Outcome], key_ids: Collection[str], root_ids: Collection[str],
                   package_codes: Collection[str] = ()) -> None:
    verified = sum(outcome.exit_code == EXIT_OK for outcome in outcomes)
    unchecked = sum(outcome.error is not None for outcome in outcomes)
    checked = [outcome.verification for outcome in outcomes if outcome.verification is not None]
    superseded = sum(v.ok and v.superseded_by is not None for v in checked)
    click.echo(f"{len(outcomes)} bundles: {verified} verified"
               + (f" ({superseded} of them superseded by a newer bundle)" if superseded else "")
               + f", {len(outcomes) - verified - unchecked} not verified"
               + (f", {unchecked} could not be checked" if unchecked else ""))
    keys = sorted({v.statement_key_id for v in checked if v.statement_key_id})
    roots = sorted({v.trust_root_id for v in checked if v.trust_root_id})
    keyring = bool(checked) and all(v.keyring_sequence is not None for v in checked)
    click.echo(f"statement keys {', '.join(keys) or '-'}, trust roots {', '.join(roots) or '-'}"
               + _vouched(keyring, key_ids, root_ids))
    codes = sorted({code for v in checked for code in v.codes}
                   | {o.error.code for o in outcomes if o.error is not None} | set(package_codes))
    click.echo("VERIFIED" if verified == len(outcomes) and not package_codes else f"NOT VERIFIED: {', '.join(codes)}")


class _Progress:
    """A progress line on a terminal's stderr, cleared while a result line is printed and redrawn after it."""

    def __init__(self, total: int):
        self.total = total
        self.started = time.monotonic()

    def show(self, outcomes: list[Outcome]) -> None:
        failed = sum(outcome.exit_code != EXIT_OK for outcome in outcomes)
        rate = len(outcomes) / max(time.monotonic() - self.started, 1e-3)
        click.echo(f"\rverifying {len(outcomes)}/{self.total} bundles, {failed} not verified, {rate:.0f}/s",
                   err=True, nl=False)

    def clear(self) -> None:
        click.echo("\r\x1b[K", err=True, nl=False)


def _open_archive(root: str) -> ArtifactStore:
    """The store of an archive root that `locations.locate` found (each worker process opens its own)."""
    if root.startswith("s3://"):
        from evidence_pipeline.store.uri import open_store  # boto3: only for an archive on S3

        return open_store(root, _s3_client(_settings()))
    from evidence_pipeline.store.local import LocalStore

    return LocalStore(Path(root))


def _s3_client(settings: Settings):
    from evidence_pipeline.runtime import s3_client  # the runtime (ledger, boto3) only when a command needs it

    return s3_client(settings)


def _runtime(settings: Settings):
    from evidence_pipeline.runtime import runtime_for  # the ledger and the stores only when a command needs them

    return runtime_for(settings)


@main.group()
def ledger() -> None:
    """Audit ledger: signed checkpoints, verification, inclusion proofs."""


@ledger.command("checkpoint")
def ledger_checkpoint() -> None:
    """Sign and publish a checkpoint of the current ledger (put-once under ledger/checkpoints/)."""
    from evidence_pipeline.audit.checkpoints import publish_checkpoint

    settings = _settings()
    runtime = _runtime(settings)
    checkpoint = publish_checkpoint(runtime.ledger, runtime.archive, runtime.keyring, runtime.witness_key)
    click.echo(f"checkpoint {checkpoint['size']} events, root {checkpoint['root_sha256']}")
    if runtime.witness_key is not None:
        from evidence_pipeline.audit.checkpoints import check_witness, checkpoint_key

        key = checkpoint_key(checkpoint["size"])
        try:
            witness = check_witness(runtime.archive.get(key), runtime.witness_key.public_key(), key)
            click.echo(f"co-signed by witness {witness}")
        except EvidenceError as error:  # published before the witness was configured: put-once, never re-signed
            click.echo(f"not witnessed: {error.message}")


def _audit(settings: Settings) -> tuple[Ledger, ArtifactStore]:
    """The ledger, opened read-only, and the archive: what verification and proofs read, and never write."""
    from evidence_pipeline.ledger import Ledger

    return Ledger(settings.ledger_url, read_only=True), _open_archive(settings.archive_uri)


@ledger.command("verify")
@click.option("--require-witness", "witness", metavar="PUB.pem", type=click.Path(dir_okay=False, path_type=Path),
              help="Every checkpoint must carry a valid signature by this witness key (its public key PEM).")
def ledger_verify(witness: Path | None) -> None:
    """Recompute the hash chain, every checkpoint's Merkle root and the consistency between checkpoints."""
    from evidence_pipeline.audit.checkpoints import verify_ledger
    from evidence_pipeline.signing.keys import pinned_public_key

    pinned = None if witness is None else pinned_public_key(witness, "--require-witness")
    settings = _settings()
    ledger, archive = _audit(settings)
    report = verify_ledger(ledger, archive, pinned)
    click.echo(
        f"ledger verified: {report['events']} events, {len(report['checkpoints'])} checkpoints consistent "
        f"({report['unchecked_tail']} events after the newest checkpoint)"
    )


@ledger.command("prove")
@click.argument("bundle")
def ledger_prove(bundle: str) -> None:
    """Print the inclusion proof of BUNDLE's publication event in the newest covering checkpoint."""
    from evidence_pipeline.audit.checkpoints import prove_bundle
    from evidence_pipeline.audit.locations import locate_bundle

    location = locate_bundle(bundle)
    ledger, _ = _audit(_settings())
    click.echo(json.dumps(prove_bundle(ledger, _open_archive(location.archive), location.prefix), indent=2))


@main.group()
def keys() -> None:
    """Signing keys: the keyring document, rotation and revocation (EVIDENCE_KEYS_DIR)."""


root_key_option = click.option(
    "--root-key", "root_key", type=click.Path(dir_okay=False, path_type=Path),
    help="The trust root's private key (PEM)  [default: pades-root.key in EVIDENCE_KEYS_DIR, where development "
         "keys keep it; production keeps it offline]")


def _key_directory(settings: Settings):
    return _runtime(settings).keys


def _show_keyring(document, as_json: bool, headline: str) -> None:
    from evidence_pipeline.signing.keyring_document import keyring_key
    from evidence_pipeline.signing.rotation import describe

    if as_json:
        click.echo(json.dumps({"message": headline, "published_as": keyring_key(document.sequence),
                               **json.loads(document.payload())}, indent=2))
        return
    click.echo(headline)
    click.echo(f"keyring {document.sequence} ({keyring_key(document.sequence)}), trust root {document.trust_root_id}")
    for line in describe(document):
        click.echo(f"  {line}")


@keys.command("list")
@json_option
def keys_list(as_json: bool) -> None:
    """Show the keyring: every generation's key ids, validity window and status."""
    document = _key_directory(_settings()).document
    if document is None:
        raise EvidenceError(ReasonCode.KEYRING_INVALID, "no keyring document yet: `evidence keys publish --root-key "
                            "PATH` signs and publishes the first one")
    _show_keyring(document, as_json, "the keyring in force")


@keys.command("publish")
@root_key_option
@json_option
def keys_publish(root_key: Path | None, as_json: bool) -> None:
    """Publish the keyring document of the keys as they are (once, for keys provisioned before key rotation;
    development keys publish theirs on first use), and every generation's public keys."""
    document = _key_directory(_settings()).ensure_keyring(root_key)
    _show_keyring(document, as_json, "published")


@keys.command("rotate")
@root_key_option
@json_option
def keys_rotate(root_key: Path | None, as_json: bool) -> None:
    """Create a new statement key and PAdES signer certificate (issued by the trust root), make them active now,
    retire the previous ones and publish the keyring document signed by the trust root. Every process signing
    from this keys directory switches at its next bundle."""
    document = _key_directory(_settings()).rotate(root_key)
    active = document.active
    _show_keyring(document, as_json, f"generation {active.generation} is active since "
                  f"{active.not_before.isoformat(timespec='milliseconds')}")


@keys.command("revoke")
@click.argument("key_id")
@click.option("--reason", required=True, help="Why (recorded in the keyring document).")
@click.option("--at", "at", callback=lambda _ctx, _param, value: _moment(value), metavar="TIME",
              help="Revoked as of this ISO 8601 time, e.g. when the key was compromised  [default: now]. "
                   "Signatures made at or after it fail verification with KEY_REVOKED.")
@root_key_option
@json_option
def keys_revoke(key_id: str, reason: str, at: datetime | None, root_key: Path | None, as_json: bool) -> None:
    """Revoke the generation holding KEY_ID (a statement key id or a signer certificate id) and publish the
    keyring document. The active generation is rotated out first, in the same document."""
    document, rotated = _key_directory(_settings()).revoke(key_id, reason, at, root_key)
    revoked = document.find(key_id)
    _show_keyring(document, as_json, f"generation {revoked.generation} revoked as of "
                  f"{revoked.revoked_at.isoformat(timespec='milliseconds')}"
                  + (f"; generation {document.active.generation} is active" if rotated else ""))


@main.group("dead-letter")
def dead_letter() -> None:
    """Jobs that need a human: rejected (terminal failure) or dead (retries exhausted)."""


@dead_letter.command("list")
def dead_letter_list() -> None:
    settings = _settings()
    runtime = _runtime(settings)
    rows = runtime.ledger.jobs_in("dead", "rejected")
    for job in rows:
        click.echo(
            f"{job['job_id']}  {job['state']:<8} {job['tenant']:<20} {job['period']}  "
            f"attempts={job['attempts']}  reason={job['last_reason']}"
            + (f"  message={job['last_message']}" if job["last_message"] else "")
        )
    click.echo(f"{len(rows)} job(s)")


@main.command()
@click.argument("job_id")
@click.option("--reason", required=True, help="Why this job is retried (recorded in the ledger).")
@click.option("--by", "requested_by", default=lambda: getpass.getuser(), show_default="the login name")
def replay(job_id: str, reason: str, requested_by: str) -> None:
    """Reopen a rejected or dead job for a new attempt on the same pinned input; then re-materialize it."""
    settings = _settings()
    runtime = _runtime(settings)
    job = runtime.ledger.replay(job_id, requested_by, reason)
    click.echo(f"job {job['job_id']} reopened ({job['tenant']} {job['period']}); materialize the partition to run it")


@main.command()
def sweep() -> None:
    """Remove abandoned attempt directories (older than the lease, lease not live)."""
    from evidence_pipeline.maintenance import sweep_attempts

    settings = _settings()
    runtime = _runtime(settings)
    click.echo(f"swept {len(sweep_attempts(runtime))} abandoned attempt directories")


class _Since(click.ParamType):
    name = "ISO-DATE-OR-DATETIME"

    def convert(self, value, param, ctx) -> datetime:
        from evidence_pipeline.stats import parse_since

        try:
            return parse_since(value)
        except ValueError as error:
            self.fail(str(error), param, ctx)


def _tenant_option(ctx, param, value: str | None) -> str | None:
    try:
        return None if value is None else validate_tenant_id(value)
    except EvidenceError as error:
        raise click.BadParameter(str(error), ctx, param) from None


def _period_option(ctx, param, value: str | None) -> str | None:
    from evidence_pipeline.models import validate_period

    try:
        return None if value is None else validate_period(value)
    except EvidenceError as error:
        raise click.BadParameter(str(error), ctx, param) from None


@main.command()
@click.option("--tenant", "tenant_id", required=True, callback=_tenant_option, help="Whose bundles to export.")
@click.option("--from", "first", callback=_period_option, metavar="YYYY-MM", help="First period (inclusive).")
@click.option("--to", "last", callback=_period_option, metavar="YYYY-MM", help="Last period (inclusive).")
@click.argument("out", type=click.Path(path_type=Path))
def export(tenant_id: str, first: str | None, last: str | None, out: Path) -> None:
    """Write an offline audit package of a tenant's bundles to the folder OUT (which must not exist).

    The package holds the bundles, the archive's keys/, the signed checkpoints, each bundle's ledger event with its
    inclusion proof and the consistency proofs between the checkpoints: `evidence verify --package OUT` (or a
    short script, see the README) checks it with no database and no network. Reads the ledger and the archive;
    writes neither.
    """
    from evidence_pipeline.audit.export import export_package

    ledger, archive = _audit(_settings())
    exported = export_package(ledger, archive, tenant_id, first, last, out)
    index = exported.index
    click.echo(f"exported {len(index.bundles)} bundle(s) of {tenant_id} ({first or 'first'}..{last or 'last'}) to "
               f"{out}; checkpoints: {len(index.checkpoints)}, witnessed: {exported.witnessed}")
    click.echo(f"verify it:  evidence verify --package {out} [--key-id …] [--root-id …] [--require-witness PUB.pem]")


def _oldest_queued_run_age(settings: Settings) -> float | None:
    if not settings.dagster_home.is_dir():
        return None  # nothing has run through Dagster here yet: do not create an instance just to look
    _use_dagster_home(settings)
    from evidence_pipeline.defs.queue import oldest_queued_run_age_in_dagster_home  # imports Dagster

    try:
        return oldest_queued_run_age_in_dagster_home()
    except Exception as error:  # Dagster's storage raises its own types (PostgreSQL down, bad URL, ...)
        raise EvidenceError(
            ReasonCode.DAGSTER_UNAVAILABLE, f"the Dagster instance could not be read ({type(error).__name__})"
        ) from None


@main.command()
@click.option("--tenant", callback=_tenant_option, help="Only this tenant's events.")
@click.option(
    "--since", type=_Since(), help="Only events recorded at or after this date or time (UTC unless an offset is given)."
)
@json_option
def stats(tenant: str | None, since: datetime | None, as_json: bool) -> None:
    """Stage latency percentiles (ms, nearest-rank) from the ledger's stages.timed events, and the age of the
    oldest queued Dagster run (any tenant)."""
    from evidence_pipeline.ledger import Ledger
    from evidence_pipeline.ledger.submissions import Submissions
    from evidence_pipeline.stats import PERCENTILES, admission_stats, stage_stats

    settings = _settings()
    ledger = Ledger(settings.ledger_url)
    result = stage_stats(ledger, tenant, since)
    admission = admission_stats(ledger, tenant, since)
    unstarted_age = Submissions(ledger).oldest_unstarted_age()
    queued_age = _oldest_queued_run_age(settings)
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
    from evidence_pipeline.stats import PERCENTILES

    values = (getattr(summary, f"p{p}") for p in PERCENTILES)
    return "".join(f" {'-' if value is None else f'{value:.1f}':>10}" for value in values)


@main.group()
def tenant() -> None:
    """Tenants: the registry, API tokens for intake, offboarding."""


@tenant.command("add")
@click.argument("tenant_ids", nargs=-1, metavar="[TENANT...]",
                callback=lambda ctx, param, values: [_tenant_option(ctx, param, value) for value in values])
@click.option("--from-file", "from_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Also register the tenant ids of this file: one per line, `#` starts a comment.")
@json_option
def tenant_add(tenant_ids: list[str], from_file: Path | None, as_json: bool) -> None:
    """Register tenants in the registry (the ledger's database); tenant_registry_sensor makes them partitions.

    Records one `tenant.registered` event per new tenant. Registered tenants stay as they are; an offboarded tenant
    is refused (TENANT_OFFBOARDED, exit 1) and the others are registered. A file with a line that is not a tenant
    id registers nothing (TENANT_ID_INVALID, the line numbers)."""
    from evidence_pipeline.ledger.tenants import OFFBOARDED, TenantRegistry
    from evidence_pipeline.tenants import read_tenant_file

    if from_file is not None:
        listed, rejected = read_tenant_file(from_file)
        if rejected:
            lines = ", ".join(str(line.line) for line in rejected)
            raise EvidenceError(rejected[0].code, f"lines {lines} of the file are not tenant ids: nothing registered")
        tenant_ids = [*tenant_ids, *listed]
    if not tenant_ids:
        raise click.UsageError("name at least one TENANT or --from-file")
    outcome = TenantRegistry(_runtime(_settings()).ledger).register(tenant_ids, getpass.getuser())
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
    from evidence_pipeline.ledger.tenants import TenantRegistry

    rows = [row for row in TenantRegistry(_runtime(_settings()).ledger).listing()
            if everyone or row["offboarded_seq"] is None]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        state = "" if row["offboarded_seq"] is None else "  offboarded"
        click.echo(f"{row['tenant']}  registered {row['registered_at']}{state}")


@tenant.group("token")
def tenant_token() -> None:
    """Per-tenant API tokens (only their sha256 is stored)."""


@tenant_token.command("issue")
@click.argument("tenant_id", metavar="TENANT", callback=_tenant_option)
def tenant_token_issue(tenant_id: str) -> None:
    """Issue a new API token for TENANT and print it, once."""
    from evidence_pipeline.intake import open_documents

    documents = open_documents(_settings())
    token_id, token = documents.tokens.issue_token(tenant_id, getpass.getuser())
    click.echo(f"token id: {token_id}")
    click.echo(f"token:    {token}")
    click.echo("The token is shown only this once; store it now. Send it as `Authorization: Bearer <token>`.")


@tenant_token.command("revoke")
@click.argument("token_id")
def tenant_token_revoke(token_id: str) -> None:
    """Revoke a token by its id: every request with it is refused from now on."""
    from evidence_pipeline.intake import open_documents

    documents = open_documents(_settings())
    tenant_id = documents.tokens.revoke_token(token_id, getpass.getuser())
    click.echo(f"token {token_id} of tenant {tenant_id} revoked")


def _reason_option(_ctx, _param, value: str) -> str:
    value = value.strip()
    if not value or len(value) > 500 or not value.isprintable():
        raise click.BadParameter("give 1-500 printable characters")
    return value


@tenant.command("offboard")
@click.argument("tenant_id", metavar="TENANT", callback=_tenant_option)
@click.option("--reason", required=True, callback=_reason_option, help="Why (recorded in the ledger).")
@json_option
def tenant_offboard(tenant_id: str, reason: str, as_json: bool) -> None:
    """Offboard TENANT: stop its new work, erase what is not evidence, keep its bundles and the ledger.

    Safe to run again: it converges, and erases what retention kept once that retention has ended."""
    from evidence_pipeline.intake import open_documents
    from evidence_pipeline.offboarding import offboard_tenant

    result = offboard_tenant(open_documents(_settings()), tenant_id, reason, getpass.getuser())
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    click.echo(f"tenant {tenant_id} offboarded at {result['offboarded_at']}"
               + ("" if result["first_run"] else " (an earlier run; this one converged)"))
    click.echo(f"tokens revoked: {result['tokens_revoked']}, batches cancelled: {result['batches_cancelled']}, "
               f"jobs rejected: {result['jobs_rejected']}")
    click.echo("erased: " + ", ".join(f"{name} {count}" for name, count in result["erased"].items()))
    kept = sum(len(keys) for keys in result["kept_until_retention"].values())
    if kept:
        click.echo(f"kept under retention: {kept} objects; run again after their retention ends")
    evidence = result["evidence"]
    until = evidence["retained_until"] or "an operator removes them (the archive has no Object Lock)"
    click.echo(f"evidence kept: {evidence['bundles']} bundles, {evidence['document_job_outputs']} document job "
               f"outputs, until {until}")


@main.group()
def template() -> None:
    """Redaction templates: submit an organization + program template as a version, approve it, list, show."""


def _intake_ledger():
    from evidence_pipeline.intake import open_documents

    return open_documents(_settings()).runtime.ledger


def _print_version(found: dict, as_json: bool, rules: bool = False) -> None:
    if as_json:
        click.echo(json.dumps(found if rules else {k: v for k, v in found.items() if k != "template"}, indent=2))
        return
    approval = f"approved by {found['approved_by']} at {found['approved_at']}" if found["approved_by"] else "unapproved"
    template = found["template"]
    click.echo(f"{found['version_id']}  {template['organization']}/{template['program']}  "
               f"by {found['author']}  effective {found['effective_at']}  {approval}")
    if rules:
        for rule in template["rules"]:
            kind = next(k for k in ("pattern", "field", "region") if k in rule)
            click.echo(f"  {rule['id']:<24} {rule['label']:<16} {kind}: {json.dumps(rule[kind])}")


@template.command("submit")
@click.argument("tenant_id", metavar="TENANT", callback=_tenant_option)
@click.option("--organization", type=click.File("rb"), required=True, help="The organization template (JSON).")
@click.option("--program", type=click.File("rb"), required=True, help="The program template (JSON).")
@click.option("--effective-at", "effective_at", callback=lambda _ctx, _param, value: _moment(value), metavar="TIME",
              help="When the version takes effect once approved (ISO 8601)  [default: now]")
@click.option("--by", "author", default=lambda: getpass.getuser(), show_default="the login name")
@json_option
def template_submit(tenant_id: str, organization, program, effective_at: datetime | None, author: str,
                    as_json: bool) -> None:
    """Merge ORGANIZATION and PROGRAM into a template version of TENANT (the same rules: the same version)."""
    from evidence_pipeline.documents import templates

    limit = templates.MAX_TEMPLATE_BYTES + 1  # one byte over the limit is enough to refuse it
    found, created = templates.submit(_intake_ledger(), tenant_id, organization.read(limit), program.read(limit),
                                      author, effective_at)
    if not as_json:
        click.echo("submitted" if created else "already submitted")
    _print_version(found, as_json)


@template.command("approve")
@click.argument("tenant_id", metavar="TENANT", callback=_tenant_option)
@click.argument("version_id", metavar="VERSION")
@click.option("--by", "approver", default=lambda: getpass.getuser(), show_default="the login name")
@json_option
def template_approve(tenant_id: str, version_id: str, approver: str, as_json: bool) -> None:
    """Approve VERSION of TENANT's templates (not by its author): recorded as a ledger event."""
    from evidence_pipeline.documents import templates

    found, created = templates.approve(_intake_ledger(), tenant_id, version_id, approver)
    if not as_json:
        click.echo("approved" if created else "already approved")
    _print_version(found, as_json)


@template.command("list")
@click.argument("tenant_id", metavar="TENANT", callback=_tenant_option)
@json_option
def template_list(tenant_id: str, as_json: bool) -> None:
    """TENANT's template versions, oldest first, and which one is in effect now."""
    from evidence_pipeline.documents import templates

    ledger = _intake_ledger()
    found = templates.versions(ledger, tenant_id)
    try:
        current = templates.in_effect(ledger, tenant_id)["version_id"]
    except EvidenceError:
        current = None
    if as_json:
        click.echo(json.dumps({"in_effect": current, "versions": [
            {k: v for k, v in version.items() if k != "template"} for version in found]}, indent=2))
        return
    for version in found:
        click.echo(("* " if version["version_id"] == current else "  "), nl=False)
        _print_version(version, False)
    if current is None:
        click.echo("no approved version is in effect: redact jobs are refused (TEMPLATE_NOT_IN_EFFECT)")


@template.command("show")
@click.argument("tenant_id", metavar="TENANT", callback=_tenant_option)
@click.argument("version_id", metavar="VERSION")
@json_option
def template_show(tenant_id: str, version_id: str, as_json: bool) -> None:
    """One version with its merged rules."""
    from evidence_pipeline.documents import templates

    _print_version(templates.version(_intake_ledger(), tenant_id, version_id), as_json, rules=True)


@template.command("shadow")
@click.argument("tenant_id", metavar="TENANT", callback=_tenant_option)
@click.argument("candidate", metavar="CANDIDATE")
@click.option("--sample", default=20, show_default=True, type=click.IntRange(1, 200),
              help="How many of the tenant's latest redaction inputs to compare on.")
@json_option
def template_shadow(tenant_id: str, candidate: str, sample: int, as_json: bool) -> None:
    """What CANDIDATE would remove beside the version in effect, per label, on a sample of TENANT's latest
    redaction inputs. Counts only; nothing is written or published."""
    from evidence_pipeline.documents.template_shadow import shadow
    from evidence_pipeline.intake import open_documents

    result = shadow(open_documents(_settings()), tenant_id, candidate, sample)
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    click.echo(f"current {result['current'][:12]}, candidate {result['candidate'][:12]}, "
               f"{len(result['documents'])} documents compared" + (f", refused {result['refused']}"
                                                                    if result["refused"] else ""))
    labels = sorted({label for counts in result["totals"].values() for label in counts})
    click.echo(f"  {'label':<20} {'both':>8} {'only current':>14} {'only candidate':>16}")
    for label in labels:
        totals = result["totals"]
        click.echo(f"  {label:<20} {totals['both'].get(label, 0):>8} {totals['only_current'].get(label, 0):>14} "
                   f"{totals['only_candidate'].get(label, 0):>16}")


@main.group()
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
@click.option("--by", "actor", default=lambda: getpass.getuser(), show_default="the login name")
@json_option
def ruleset_canary(candidate: str, tenants: tuple[str, ...], actor: str, as_json: bool) -> None:
    """Route the new contract reviews of the chosen tenants to CANDIDATE (a registered version): jobs they submit
    without naming a ruleset pin it from now on. Recorded as a `ruleset.canary` event per tenant."""
    from evidence_pipeline.documents import canary
    from evidence_pipeline.documents import ruleset as rulesets

    _print_routes(rulesets.IN_FORCE, canary.start(_intake_ledger(), candidate, list(tenants), actor), as_json)


@ruleset.command("rollback")
@click.option("--by", "actor", default=lambda: getpass.getuser(), show_default="the login name")
@json_option
def ruleset_rollback(actor: str, as_json: bool) -> None:
    """Stop routing tenants to the candidate: their new jobs pin the version in force again. Jobs already
    accepted keep the ruleset they pinned (leased ones finish under it); no job or event is deleted."""
    from evidence_pipeline.documents import canary
    from evidence_pipeline.documents import ruleset as rulesets

    stopped = canary.rollback(_intake_ledger(), actor)
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

    _print_routes(rulesets.IN_FORCE, canary.routes(_intake_ledger()), as_json)


@ruleset.command("shadow")
@click.argument("candidate")
@click.option("--sample", default=100, show_default=True, type=click.IntRange(1, 10_000),
              help="How many of the most recent contract reviews to re-evaluate.")
@json_option
def ruleset_shadow(candidate: str, sample: int, as_json: bool) -> None:
    """Re-evaluate recent contract reviews under CANDIDATE (a ruleset file, or a registered version) and print
    where its decision differs from the committed one. Reads only: nothing is signed, stored or recorded."""
    from evidence_pipeline.documents import ruleset as rulesets
    from evidence_pipeline.documents.shadow import shadow
    from evidence_pipeline.intake import open_documents

    if candidate in rulesets.REGISTERED:
        chosen = rulesets.load(candidate, rulesets.REGISTERED[candidate])
    else:
        chosen = rulesets.load_candidate(Path(candidate))
    results = shadow(open_documents(_settings()), chosen, sample)
    changed = [r for r in results if r.changed]
    if as_json:
        jobs = [{"job_id": r.job_id, "tenant": r.tenant, "current": r.current, "candidate": r.candidate,
                 "changed": r.changed} for r in results]
        click.echo(json.dumps({"candidate": {"version": chosen.version, "sha256": chosen.sha256},
                               "jobs": jobs, "changed": len(changed)}, indent=2))
        return
    for r in results:
        line = f"{r.job_id[:12]}  {r.tenant:<20} {r.current['decision']}"
        if r.changed:
            line += f" -> {r.candidate['decision']}" + "".join(
                f"  {key}: {','.join(r.candidate[key]) or '-'} (was {','.join(r.current[key]) or '-'})"
                for key in ("missing", "failed_rules") if r.candidate[key] != r.current[key]
            )
        click.echo(("CHANGED " if r.changed else "same    ") + line)
    click.echo(f"{len(results)} review(s) under {chosen.version} (sha256 {chosen.sha256[:12]}): "
               f"{len(changed)} changed; nothing was signed or recorded")


@main.command()
@click.argument("artifact_id")
@json_option
def lineage(artifact_id: str, as_json: bool) -> None:
    """Walk from ARTIFACT_ID (an archive key, as a job's status lists its outputs) back to the uploaded bytes,
    checking every digest, DSSE statement and ledger event on the way. Exit 0 only when the whole chain holds;
    otherwise the reason code names the link that does not."""
    code = _walk_lineage(artifact_id, as_json)
    if code != EXIT_OK:
        click.get_current_context().exit(code)


def _is_artifact_id(location: str) -> bool:
    return location.startswith("documents/") and not Path(location).exists()


def _walk_lineage(artifact_id: str, as_json: bool) -> int:
    """Walk one artifact's lineage, print the report; its exit code."""
    from evidence_pipeline.documents.lineage import lineage as walk
    from evidence_pipeline.intake import open_documents

    report = walk(open_documents(_settings()), artifact_id)
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        for link in report["links"]:
            named = link.get("artifact_id") or link.get("signature_check_id") or link.get("document_id")
            click.echo(f"ok  {link['link']:<16} {named}")
        failed = f"FAILED {report['code']}: {report['link']}: {report['message']}"
        click.echo("LINEAGE HOLDS" if report["ok"] else failed)
    return EXIT_OK if report["ok"] else exit_code(report["code"])


@main.group()
def intake() -> None:
    """The HTTP front door for tenants' documents and jobs."""


@intake.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
@click.option("--workers", type=click.IntRange(1), help="server processes  [default: the CPUs this process may use]")
def intake_serve(host: str, port: int, workers: int | None) -> None:
    """Serve the intake API (Starlette on uvicorn)."""
    from evidence_pipeline.intake.app import serve

    settings = _settings()
    serve(settings, host, port, workers or len(os.sched_getaffinity(0)))


@main.command()
@click.option("--read-only", is_flag=True,
              help="Serve the UI alone (dagster-webserver --read-only) for auditors: browse assets, partitions, "
                   "metadata and check results; nothing can be launched, changed or wiped, and no daemon runs.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=3000, show_default=True, type=click.IntRange(0, 65535))
def ui(read_only: bool, host: str, port: int) -> None:
    """Start the Dagster UI on this project's instance: with the daemon (dagster dev), or --read-only."""
    settings = _settings()
    _use_dagster_home(settings)
    workspace = str(_REPO_ROOT / "workspace.yaml")
    # Same interpreter as this command, so it works without an activated virtualenv.
    if read_only:
        argv = ["-m", "dagster_webserver", "--read-only", "-w", workspace, "-h", host, "-p", str(port)]
    else:
        argv = ["-m", "dagster", "dev", "-w", workspace, "-h", host, "-p", str(port)]
    os.execv(sys.executable, [sys.executable, *argv])
