"""`evidence verify`: bundles, archive prefixes or document artifacts offline, or an audit package (--package);
the result lines, the summary and a progress line on a terminal.

Over 400 lines because the four things `evidence verify` checks share one option set, one result line and one
summary; the package check is the long part and reads the same outcomes."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Collection
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from evidence_pipeline.cli.lineage import is_artifact_id, walk_lineage
from evidence_pipeline.cli.options import json_option, parse_moment, witness_options, witness_policy
from evidence_pipeline.cli.resources import load_settings, open_archive
from evidence_pipeline.errors import EXIT_CHECK_FAILED, EXIT_OK, EvidenceError, ReasonCode

if TYPE_CHECKING:
    from evidence_pipeline.audit.verify_many import Outcome


@click.command()
@click.argument("locations", nargs=-1, metavar="[LOCATION...]")
@click.option(
    "--package",
    "package",
    metavar="FOLDER",
    help="Verify an audit package (`evidence export`) instead of "
    "archive locations: every bundle, checkpoint and proof in it, with nothing else.",
)
@click.option(
    "--require-witness",
    "witness",
    metavar="PUB.pem|KEY_ID",
    help="With --package: every checkpoint must "
    "carry a valid signature by this witness key (a PEM file, or the id of the copy in the package).",
)
@witness_options("With --package: ")
@click.option(
    "--origin",
    metavar="ORIGIN",
    help="With --package or a bundle file: the log's origin (`evidence ledger "
    "vkey` names it before its first '+'): every checkpoint note must state it [default: the one origin "
    "of the --policy file's, else the package's or bundle file's tlog-policy `log` lines].",
)
@click.option(
    "--allow-unsigned-index",
    is_flag=True,
    help="With --package: accept a package of format version 1, "
    "whose package.json is unsigned (a removed bundle and its index entry then go unnoticed).",
)
@json_option
@click.option("--key-id", "key_ids", multiple=True, help="Only trust these statement key ids (repeatable).")
@click.option("--root-id", "root_ids", multiple=True, help="Only trust these PAdES trust root ids (repeatable).")
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    help="Worker processes for many bundles [default: EVIDENCE_WORKERS, one per CPU].",
)
@click.option(
    "--at",
    "at",
    callback=parse_moment,
    metavar="TIME",
    help="Validate the PAdES signatures at this ISO 8601 time (UTC unless it says) instead of now.",
)
@click.option(
    "--report",
    "reports",
    nargs=2,
    multiple=True,
    metavar="KIND DIR",
    type=(click.Choice(["etsi", "oscal"]), click.Path(file_okay=False, path_type=Path)),
    help="Also write each bundle's reports of KIND under DIR (repeatable): etsi, an ETSI TS 119 102-2 "
    "validation report per PDF signature, DIR/<tenant>/<period>/<identity>/<field>.xml; oscal, the "
    "tenant-month's OSCAL Assessment Results, DIR/<tenant>/<period>/<identity>/assessment-results.json.",
)
@click.option(
    "--controls",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    metavar="FILE",
    help="With --report oscal: the controls mapping (JSON) [default: the documented one].",
)
def verify(
    locations: tuple[str, ...],
    package: str | None,
    witness: str | None,
    witnesses: tuple[str, ...],
    policy: int | None,
    policy_file: str | None,
    allow_unsigned_index: bool,
    as_json: bool,
    key_ids: tuple[str, ...],
    root_ids: tuple[str, ...],
    workers: int | None,
    at: datetime | None,
    origin: str | None,
    reports: tuple[tuple[str, Path], ...],
    controls: Path | None,
) -> None:
    """Verify bundles offline. Exit 0 only if every check of every bundle passes.

    A LOCATION is one bundle, <archive>/bundles/<tenant>/<period>/<identity>, or a prefix whose bundles are all
    verified: <archive>/bundles[/<tenant>[/<period>]] or the archive itself; a folder or s3://bucket/prefix.
    For several bundles, --json prints one JSON object per bundle (JSON lines).

    --package FOLDER verifies an audit package instead (no database, no network): its bundles, their inclusion
    proofs, the signed checkpoints and the consistency between them, who authorized each privileged action of the
    tenant (each signed request re-checked), and each document artifact walked back to its upload's digest as
    `evidence lineage` walks it; package.json must be signed by a statement key of the package and list exactly
    the package's files (a version 1 package, unsigned, only with --allow-unsigned-index); --json prints one JSON
    document.

    Keys come from the archive's keys/ folder: the statement keys and signer certificates that the newest keyring
    document (keys/keyring-*.json), signed by the trust root, lists. Pin the trust root id you received out of band
    with --root-id, otherwise whoever can write the archive could publish a root and keyring of their own. An
    archive from before key rotation has no keyring: pin its statement keys with --key-id too.

    A LOCATION may also be one bundle file, as `GET /v1/evidence/{period}/bundle` downloads it (a tar holding the
    bundle and the archive's keys/), verified as it is, without unpacking.

    A LOCATION may also be a document artifact id (documents/<tenant>/…, as a job's status lists its outputs):
    it is verified as `evidence lineage` verifies it, back to the upload, with the configured ledger and stores.
    """
    request = _report_request(
        reports,
        controls=controls,
        root_ids=root_ids,
        at=at,
        witnesses=witnesses,
        policy=policy,
        policy_file=policy_file,
    )
    if package is not None and locations:
        raise click.UsageError("give either LOCATION... or --package, not both")
    if package is None and not locations:
        raise click.UsageError("Missing argument 'LOCATION...' (or --package FOLDER).")
    bundle_file = package is None and len(locations) == 1 and Path(locations[0]).is_file()
    if (witness is not None or allow_unsigned_index) and package is None:
        raise click.UsageError("--require-witness and --allow-unsigned-index check a package: use them with --package")
    if package is not None:  # reads no setting but EVIDENCE_WORKERS, and only when --workers is not given
        _verify_package(
            package,
            witness=witness,
            policy=witness_policy(witnesses, policy, policy_file),
            allow_unsigned_index=allow_unsigned_index,
            as_json=as_json,
            key_ids=frozenset(key_ids),
            root_ids=frozenset(root_ids),
            workers=workers or load_settings().worker_processes(),
            at=at,
            origin=origin,
            reports=reports,
            request=request,
        )
    if (witnesses or policy or policy_file or origin is not None) and not bundle_file:
        raise click.UsageError(
            "--witness, --witness-policy, --policy and --origin check checkpoint notes: use them "
            "with --package or a bundle file"
        )
    from evidence_pipeline.audit.locations import locate  # with verify_many: pyHanko, which only verify needs

    settings = load_settings()
    artifacts = [location for location in locations if is_artifact_id(location)]
    if artifacts:
        if len(artifacts) != len(locations):
            raise EvidenceError(ReasonCode.CONFIG_INVALID, "verify either bundles or document artifact ids, not both")
        sys.exit(max(walk_lineage(artifact, as_json) for artifact in artifacts))

    if bundle_file:  # as the tenant API serves it: the bundle, the keys, and its tlog proof once checkpointed
        from evidence_pipeline.audit.bundle_proof import check_bundle_log
        from evidence_pipeline.audit.verify import verify_bundle
        from evidence_pipeline.monthly.bundle_file import open_bundle_file

        store, prefix = open_bundle_file(locations[0])
        result = verify_bundle(store, prefix, frozenset(key_ids), frozenset(root_ids), at)
        logged = check_bundle_log(
            store,
            prefix,
            key_ids=frozenset(key_ids),
            root_ids=frozenset(root_ids),
            origin=origin,
            policy=witness_policy(witnesses, policy, policy_file),
        )
        result.checks.extend([logged] if logged is not None else [])
        _write_reports(reports, [(store, prefix, result)], request, as_json)
        _report_bundle(result, as_json, key_ids, root_ids, logged is not None)
    targets = [locate(location) for location in locations]
    if len(targets) == 1 and targets[0].is_bundle:
        from evidence_pipeline.audit.verify import verify_bundle

        target = targets[0]
        store = open_archive(target.archive)
        result = verify_bundle(store, target.prefix, frozenset(key_ids), frozenset(root_ids), at)
        _write_reports(reports, [(store, target.prefix, result)], request, as_json)
        _report_bundle(result, as_json, key_ids, root_ids)

    from evidence_pipeline.audit.verify_many import list_bundles, overall_exit_code, verify_all

    bundles = list_bundles(targets, open_archive)
    progress = _Progress(len(bundles)) if sys.stderr.isatty() else None
    outcomes = []
    for outcome in verify_all(
        bundles,
        open_archive,
        key_ids=frozenset(key_ids),
        root_ids=frozenset(root_ids),
        workers=workers or settings.worker_processes(),
        at=at,
    ):
        outcomes.append(outcome)
        if progress:
            progress.clear()
        click.echo(json.dumps(outcome.as_dict()) if as_json else _outcome_line(outcome))
        if progress:
            progress.show(outcomes)
    if progress:
        progress.clear()
    _write_reports(
        reports,
        [
            (open_archive(location.archive), prefix, outcome.verification)
            for (location, prefix), outcome in zip(bundles, outcomes)
        ],
        request,
        as_json,
    )
    if not as_json:
        _print_summary(outcomes, key_ids, root_ids)
    sys.exit(overall_exit_code(outcomes))


def _report_request(
    reports: tuple[tuple[str, Path], ...],
    *,
    controls: Path | None,
    root_ids: tuple[str, ...],
    at: datetime | None,
    witnesses: tuple[str, ...],
    policy: int | None,
    policy_file: str | None,
):
    """What --report's reports are made with; None without --report."""
    if controls is not None and not any(kind == "oscal" for kind, _ in reports):
        raise click.UsageError("--controls maps the controls of --report oscal: use them together")
    if not reports:
        return None
    from evidence_pipeline.audit.oscal import load_controls
    from evidence_pipeline.audit.reports import Request

    return Request(frozenset(root_ids), at, witness_policy(witnesses, policy, policy_file), load_controls(controls))


def _write_reports(reports: tuple[tuple[str, Path], ...], bundles: list, request, as_json: bool) -> None:
    """Each (store, prefix, verification) bundle's reports of each --report KIND DIR; a bundle whose report
    cannot be made (its PDF does not parse, it could not be read) is named on stderr with its reason code, the
    others are written."""
    if not reports:
        return
    from evidence_pipeline.audit.reports import write_reports

    for kind, directory in reports:
        for store, prefix, verification in bundles:
            if verification is None:  # the store did not answer: the outcome already says so
                continue
            try:
                written = write_reports(
                    kind, directory, store=store, prefix=prefix, verification=verification, request=request
                )
            except EvidenceError as error:
                click.echo(f"no {kind} report for {store.uri(prefix)}: {error.code}: {error.message}", err=True)
                continue
            if not as_json:
                for path, says in written:
                    click.echo(f"{kind} report {path}: {says}")


def _report_bundle(
    result, as_json: bool, key_ids: tuple[str, ...], root_ids: tuple[str, ...], in_log: bool | None = None
) -> None:
    """Print one bundle's verification and exit with its verdict (``in_log``: a bundle file's tlog proof was
    checked; False: the file holds none)."""
    if as_json:
        click.echo(json.dumps(result.as_dict(), indent=2))
    else:
        for check in result.checks:
            failure = "" if check.passed else f": {check.code}: {check.detail}"
            click.echo(f"{'ok  ' if check.passed else 'FAIL'} {check.name}{failure}")
        click.echo(
            f"statement key {result.statement_key_id}, trust root {result.trust_root_id}"
            + _vouched(result.keyring_sequence is not None, key_ids, root_ids)
        )
        for line in _chain_lines(result):
            click.echo(line)
        if in_log is False:
            click.echo(
                "NOTICE: the file holds no tlog proof (no co-signed checkpoint covered the bundle when it was "
                "downloaded): its place in the log is not checked"
            )
        verdict = "VERIFIED" if result.ok else f"NOT VERIFIED: {', '.join(result.codes)}"
        if result.superseded_by is not None:
            verdict += f" but SUPERSEDED by {result.current_bundle['identity']}: valid, not the current bundle"
        click.echo(verdict)
    sys.exit(EXIT_OK if result.ok else EXIT_CHECK_FAILED)


def _chain_lines(result) -> list[str]:
    """Where a verified bundle stands in its tenant-month's corrections chain, as `evidence verify` prints it."""
    lines = []
    if result.supersedes is not None:
        corrected = result.supersedes
        lines.append(
            f"supersedes {corrected['identity']} ({', '.join(corrected['reason'])})"
            + ("" if corrected["in_archive"] else ": that bundle is not in this archive")
        )
    if result.superseded_by is not None:
        lines.append(
            f"superseded by {result.superseded_by['identity']}; current bundle of the tenant-month: "
            f"{result.current_bundle['prefix']}"
        )
    elif result.current_bundle is not None:
        lines.append("current bundle of the tenant-month (nothing in this archive supersedes it)")
    return lines


def _verify_package(
    argument: str,
    *,
    witness: str | None,
    policy,
    allow_unsigned_index: bool,
    as_json: bool,
    key_ids: frozenset[str],
    root_ids: frozenset[str],
    workers: int,
    at: datetime | None,
    origin: str | None,
    reports: tuple[tuple[str, Path], ...],
    request,
) -> None:
    """`evidence verify --package`: the package-level checks, who authorized what and each document artifact's
    lineage, then every bundle in worker processes."""
    from evidence_pipeline.audit.package import check_package, open_package, verify_bundles, witness_public_key
    from evidence_pipeline.audit.package_authorizations import check_authorizations
    from evidence_pipeline.audit.package_documents import check_documents
    from evidence_pipeline.audit.verify_many import overall_exit_code
    from evidence_pipeline.audit.witnessing import package_policy, pinned_origin

    store, index, keys = open_package(argument, key_ids, root_ids)
    pinned_policy = policy is not None
    own = package_policy(store)
    stated, origin = origin is not None, pinned_origin(origin, policy, own)
    policy = policy or own  # the package's own: checked, though the operator wrote it
    pinned_witness = None if witness is None else witness_public_key(store, witness)
    checks = check_package(
        store,
        index,
        package_keys=keys,
        witness=pinned_witness,
        policy=policy,
        allow_unsigned_index=allow_unsigned_index,
        origin=origin,
        stated=stated,
    )
    authorizations = check_authorizations(store, index, checks)
    lineages = check_documents(store, index, checks, key_ids, root_ids)
    artifacts = len((index.documents or {}).get("artifacts", []))
    if not as_json:
        span = f"{index.first or 'first'}..{index.last or 'last'}"
        click.echo(
            f"package (format version {index.version}) of {len(index.bundles)} bundles of {index.tenant} "
            f"({span}), {artifacts} document artifacts, {len(index.checkpoints)} checkpoints, "
            f"{len(index.authorizations)} authorization events, exported {index.exported_at}"
        )
        if index.signed is None:
            click.echo(
                "NOTICE: package.json is an unsigned version 1 index: a file removed together with its index "
                "entry cannot be detected"
                + ("" if allow_unsigned_index else " (accept it knowingly with --allow-unsigned-index)")
            )
        for check in checks.checks:
            click.echo(
                f"{'ok  ' if check.passed else 'FAIL'} {check.name}"
                + ("" if check.passed else f": {check.code}: {check.detail}")
            )
        for authorization in authorizations:
            click.echo(
                "     event {seq} {event_type}: {action} by {actor} (key {key_id}) at {time}".format(**authorization)
            )
    progress = _Progress(len(index.bundles)) if sys.stderr.isatty() and not as_json else None
    outcomes = []
    for outcome in verify_bundles(
        argument, store, index=index, checks=checks, key_ids=key_ids, root_ids=root_ids, workers=workers, at=at
    ):
        outcomes.append(outcome)
        if not as_json:
            if progress:
                progress.clear()
            click.echo(_outcome_line(outcome))
            if progress:
                progress.show(outcomes)
    if progress:
        progress.clear()
    _write_reports(
        reports,
        [(store, bundle, outcome.verification) for bundle, outcome in zip(index.bundles, outcomes)],
        request,
        as_json,
    )
    code = EXIT_CHECK_FAILED if not checks.ok else overall_exit_code(outcomes)
    if as_json:
        verified = [o.verification for o in outcomes if o.verification is not None]
        click.echo(
            json.dumps(
                {
                    "package": argument,
                    "ok": code == EXIT_OK,
                    "tenant": index.tenant,
                    "from": index.first,
                    "to": index.last,
                    "codes": sorted(
                        set(checks.codes)
                        | {c for v in verified for c in v.codes}
                        | {o.error.code for o in outcomes if o.error is not None}
                    ),
                    "checkpoint_key_ids": sorted(checks.checkpoint_key_ids),
                    "witness_key_id": checks.witness_id,
                    "origin": origin,
                    "origin_pinned": stated,
                    "witness_policy": None
                    if policy is None
                    else {
                        "quorum": policy.describe(),
                        "witnesses": [key.vkey() for key in policy.witnesses.values()],
                        "logs": [key.vkey() for key in policy.logs],
                        "pinned": pinned_policy,
                    },
                    "format_version": index.version,
                    "index_signed": index.signed is not None,
                    "checks": [c.__dict__ for c in checks.checks],
                    "authorizations": authorizations,
                    "documents": lineages,
                    "bundles": [o.as_dict() for o in outcomes],
                },
                indent=2,
            )
        )
    else:
        _print_summary(outcomes, key_ids, root_ids, package_codes=checks.codes)
        click.echo(
            f"checkpoints signed by {', '.join(sorted(checks.checkpoint_key_ids)) or '-'}; "
            + (
                f"witness {checks.witness_id} required"
                if checks.witness_id
                else policy.describe()
                + (
                    ""
                    if pinned_policy
                    else " by the package's policy (not pinned: pass --policy FILE or --witness VKEY)"
                )
                if policy
                else "witness not checked (pass --policy FILE or --witness VKEY --witness-policy N)"
            )
            + (
                f"; log origin {origin}" + ("" if stated else " by the tlog-policy (pin it: pass --origin)")
                if origin
                else "; log origin not pinned (pass --origin)"
            )
        )
    sys.exit(code)


def _outcome_line(outcome: Outcome) -> str:
    if outcome.error is not None:
        return f"ERR  {outcome.bundle}: {outcome.error}"
    verification = outcome.verification
    failed = [check for check in verification.checks if not check.passed]
    superseded = (
        ""
        if verification.superseded_by is None
        else (f" (superseded; current: {verification.current_bundle['identity'][:12]})")
    )
    return f"{'ok  ' if not failed else 'FAIL'} {outcome.bundle}{superseded}" + "".join(
        f"{':' if i == 0 else ';'} {check.code} ({check.name}: {check.detail})" for i, check in enumerate(failed)
    )


def _vouched(keyring: bool, key_ids: Collection[str], root_ids: Collection[str]) -> str:
    """How the keys were vouched for, and what the auditor should pin."""
    if keyring:
        return ", listed in the keyring" + ("" if root_ids else "  (trust root not pinned: pass --root-id)")
    return ", no keyring" + ("" if key_ids and root_ids else "  (not pinned: pass --key-id and --root-id)")


def _print_summary(
    outcomes: list[Outcome], key_ids: Collection[str], root_ids: Collection[str], package_codes: Collection[str] = ()
) -> None:
    verified = sum(outcome.exit_code == EXIT_OK for outcome in outcomes)
    unchecked = sum(outcome.error is not None for outcome in outcomes)
    checked = [outcome.verification for outcome in outcomes if outcome.verification is not None]
    superseded = sum(v.ok and v.superseded_by is not None for v in checked)
    click.echo(
        f"{len(outcomes)} bundles: {verified} verified"
        + (f" ({superseded} of them superseded by a newer bundle)" if superseded else "")
        + f", {len(outcomes) - verified - unchecked} not verified"
        + (f", {unchecked} could not be checked" if unchecked else "")
    )
    keys = sorted({v.statement_key_id for v in checked if v.statement_key_id})
    roots = sorted({v.trust_root_id for v in checked if v.trust_root_id})
    keyring = bool(checked) and all(v.keyring_sequence is not None for v in checked)
    click.echo(
        f"statement keys {', '.join(keys) or '-'}, trust roots {', '.join(roots) or '-'}"
        + _vouched(keyring, key_ids, root_ids)
    )
    codes = sorted(
        {code for v in checked for code in v.codes}
        | {o.error.code for o in outcomes if o.error is not None}
        | set(package_codes)
    )
    click.echo("VERIFIED" if verified == len(outcomes) and not package_codes else f"NOT VERIFIED: {', '.join(codes)}")


class _Progress:
    """A progress line on a terminal's stderr, cleared while a result line is printed and redrawn after it."""

    def __init__(self, total: int):
        self.total = total
        self.started = time.monotonic()

    def show(self, outcomes: list[Outcome]) -> None:
        failed = sum(outcome.exit_code != EXIT_OK for outcome in outcomes)
        rate = len(outcomes) / max(time.monotonic() - self.started, 1e-3)
        click.echo(
            f"\rverifying {len(outcomes)}/{self.total} bundles, {failed} not verified, {rate:.0f}/s", err=True, nl=False
        )

    def clear(self) -> None:
        click.echo("\r\x1b[K", err=True, nl=False)
