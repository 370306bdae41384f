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


json_option = click.option("--json", "as_json", is_flag=True, callback=_remember_json, is_eager=True,
                           help="Print the result as JSON (errors as {\"error\": {\"code\", \"message\"}}).")


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
    """``--witness VKEY...`` and ``--witness-policy N`` (read with witness_policy), for `verify --package` and
    `ledger verify`; ``scope`` starts their help ("With --package: ")."""
    def decorate(command):
        command = click.option("--witness-policy", "policy", type=click.IntRange(min=1), metavar="N",
                               help="With --witness: the newest checkpoint must carry valid cosignatures of N of the "
                               "given witnesses, and every checkpoint's cosignatures by them must verify "
                               "[default: all of them].")(command)
        return click.option("--witness", "witnesses", multiple=True, metavar="VKEY", help=f"{scope}a witness whose "
                            "cosignature counts towards --witness-policy (its vkey, `evidence witness vkey`; "
                            "repeatable).")(command)
    return decorate


def witness_policy(witnesses: tuple[str, ...], required: int | None):
    """--witness VKEY... --witness-policy N as a WitnessPolicy (None without --witness)."""
    if not witnesses:
        if required is not None:
            raise click.UsageError("--witness-policy N counts the witnesses given with --witness VKEY")
        return None
    from evidence_pipeline.audit.witnessing import WitnessPolicy
    from evidence_pipeline.witness.note import COSIGNATURE_V1, NoteError, parse_vkey

    try:
        parsed = [parse_vkey(vkey, COSIGNATURE_V1) for vkey in witnesses]
        keys = tuple({key.vkey(): key for key in parsed}.values())  # a witness given twice counts once
    except NoteError as error:
        raise click.UsageError(f"--witness: {error}") from None
    if (required or len(keys)) > len(keys):
        raise click.UsageError(f"--witness-policy {required} needs at least {required} different --witness keys")
    return WitnessPolicy(keys, required or len(keys))
