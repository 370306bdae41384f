"""Signing a privileged action from the command line: the `--key` / `--actor` options every signing command takes,
the signed request it builds (actors/requests.py) and the gate the service checks it at (actors/authorize.py).

The key is the acting person's own (`--key FILE`, else EVIDENCE_ACTOR_KEY; never a service key); the actor name is
`--actor NAME`, else EVIDENCE_ACTOR, else the key file's name without `.pem` (`actor keygen` suggests naming the
file after the actor, as the demo's $EVIDENCE_HOME/actors/<name>.pem are).
"""

from __future__ import annotations

from pathlib import Path

import click

from evidence_pipeline.config import Settings
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.models import TENANT_ID


def signer_options(command):
    """--key and --actor, passed to the command as ``key`` and ``actor``."""
    command = click.option(
        "--actor",
        "actor",
        metavar="NAME",
        help="The actor to act as  [default: EVIDENCE_ACTOR, else the key file's name without .pem]",
    )(command)
    return click.option(
        "--key",
        "key",
        type=click.Path(dir_okay=False, path_type=Path),
        metavar="FILE",
        help="The actor's own private key (PEM)  [default: EVIDENCE_ACTOR_KEY]",
    )(command)


def signed(
    settings: Settings, *, key: Path | None, actor: str | None, action: str, args: dict, tenant: str | None = None
) -> dict:
    """The envelope of ``action`` with ``args``, signed now with the actor's key under a fresh nonce."""
    from evidence_pipeline.actors.keyfiles import load_actor_key
    from evidence_pipeline.actors.requests import sign_request

    private = load_actor_key(key, settings)
    return sign_request(private, actor_name(settings, key, actor), action, args=args, tenant=tenant)


def actor_name(settings: Settings, key: Path | None, actor: str | None) -> str:
    key_file = key or settings.actor_key
    name = actor or settings.actor or (key_file.name.removesuffix(".pem") if key_file else None)
    if not name or not TENANT_ID.fullmatch(name):
        raise EvidenceError(
            ReasonCode.ACTION_REQUEST_INVALID,
            "name the actor: --actor NAME or EVIDENCE_ACTOR (a slug), or a key file named <actor>.pem",
        )
    return name


def gate(settings: Settings):
    """The gate of the service's ledger (the intake's is the same database)."""
    from evidence_pipeline.actors.authorize import ActionGate
    from evidence_pipeline.runtime import runtime_for

    return ActionGate(runtime_for(settings).actors, settings.action_max_age_seconds)
