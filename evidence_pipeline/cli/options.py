"""Options and argument checks that several command groups share: --json, ISO 8601 times, tenant ids, periods."""

from __future__ import annotations

from datetime import datetime, timezone

import click

from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.models import validate_tenant_id

JSON_REQUESTED = "evidence.json"  # ctx.meta key: the running command was asked for JSON (the error boundary reads it)


def _remember_json(ctx: click.Context, _param, value: bool) -> bool:
    ctx.meta[JSON_REQUESTED] = value
    return value


json_option = click.option(
    "--json",
    "as_json",
    is_flag=True,
    callback=_remember_json,
    is_eager=True,
    help="Print the result as JSON (errors as {\"error\": {\"code\", \"message\"}}).",
)


def parse_moment(_ctx, _param, value: str | None) -> datetime | None:
    """The callback of ``--at`` and its kin: an ISO 8601 time, UTC unless it names its offset."""
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter("not an ISO 8601 time, e.g. 2031-06-30T12:00:00Z") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def check_tenant_id(ctx, param, value: str | None) -> str | None:
    try:
        return None if value is None else validate_tenant_id(value)
    except EvidenceError as error:
        raise click.BadParameter(str(error), ctx, param) from None


def check_period(ctx, param, value: str | None) -> str | None:
    from evidence_pipeline.models import validate_period

    try:
        return None if value is None else validate_period(value)
    except EvidenceError as error:
        raise click.BadParameter(str(error), ctx, param) from None


def witness_options(scope: str):
    """``--witness VKEY...`` and ``--witness-policy N``, or ``--policy FILE`` (read with witness_policy), for
    `verify --package` and `ledger verify`; ``scope`` starts their help ("With --package: ")."""

    def decorate(command):
        command = click.option(
            "--policy",
            "policy_file",
            metavar="FILE",
            type=click.Path(dir_okay=False),
            help=f"{scope}a c2sp.org/tlog-policy file (log, witness, group, quorum lines): the "
            "logs whose notes count, the witnesses and the quorum the newest checkpoint must "
            "meet; instead of --witness.",
        )(command)
        command = click.option(
            "--witness-policy",
            "policy",
            type=click.IntRange(min=1),
            metavar="N",
            help="With --witness: the newest checkpoint must carry valid cosignatures of N of the "
            "given witnesses, and every checkpoint's cosignatures by them must verify "
            "[default: all of them].",
        )(command)
        return click.option(
            "--witness",
            "witnesses",
            multiple=True,
            metavar="VKEY",
            help=f"{scope}a witness whose "
            "cosignature counts towards --witness-policy (its vkey, `evidence witness vkey`; "
            "repeatable).",
        )(command)

    return decorate


def witness_policy(witnesses: tuple[str, ...], required: int | None, policy_file: str | None = None):
    """--witness VKEY... --witness-policy N, or --policy FILE, as a TlogPolicy (None without either)."""
    from evidence_pipeline.signed_note import COSIGNATURE_V1, NoteError, parse_vkey
    from evidence_pipeline.witness.policy import MAX_POLICY_BYTES, TlogPolicy, parse_policy

    if policy_file is not None:
        if witnesses or required is not None:
            raise click.UsageError("give either --policy FILE or --witness VKEY … --witness-policy N")
        try:
            with open(policy_file, "rb") as file:
                return parse_policy(file.read(MAX_POLICY_BYTES + 1))
        except OSError as error:
            raise click.UsageError(f"--policy: {error.strerror}") from None
        except NoteError as error:
            raise click.UsageError(f"--policy: {error}") from None
    if not witnesses:
        if required is not None:
            raise click.UsageError("--witness-policy N counts the witnesses given with --witness VKEY")
        return None

    try:
        parsed = [parse_vkey(vkey, COSIGNATURE_V1) for vkey in witnesses]
        keys = tuple({key.vkey(): key for key in parsed}.values())  # a witness given twice counts once
    except NoteError as error:
        raise click.UsageError(f"--witness: {error}") from None
    if (required or len(keys)) > len(keys):
        raise click.UsageError(f"--witness-policy {required} needs at least {required} different --witness keys")
    return TlogPolicy.of_count(keys, required or len(keys))
