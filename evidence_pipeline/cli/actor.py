"""`evidence actor …`: who may act. Generate an actor's key, bootstrap the first admin (once), register actors,
change their roles, add and revoke their keys, list them. Every change is an admin-signed ledger event
(actors/admin.py); the first admin's is signed by its own new key."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import click

from evidence_pipeline.cli.acting import gate, signed, signer_options
from evidence_pipeline.cli.options import json_option
from evidence_pipeline.cli.resources import load_settings
from evidence_pipeline.errors import EvidenceError, ReasonCode

ROLES = ("admin", "operator", "approver", "reviewer", "auditor")  # actors/roles.py's Role (test_actor_cli checks)

role_option = click.option(
    "--role",
    "roles",
    multiple=True,
    required=True,
    type=click.Choice(ROLES),
    help="A role of the actor (repeatable); see the roles table in the docs.",
)
public_key_option = click.option(
    "--public-key",
    "public_key",
    required=True,
    metavar="KEY",
    help="The actor's public key: 64 hex digits (what `actor keygen` prints) or a file holding its PEM.",
)


@click.group()
def actor() -> None:
    """Actors: the people and services who sign privileged actions, their roles and keys."""


def _admin(settings):
    from evidence_pipeline.actors.admin import ActorAdmin
    from evidence_pipeline.actors.keyfiles import service_key_ids

    return ActorAdmin(gate(settings), service_key_ids(settings))


def _public_key(value: str) -> str:
    """64 hex digits as given, or the raw key of a public key PEM file."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    from evidence_pipeline.actors.requests import public_key_from_hex, raw_public_key

    if len(value) == 64 and all(c in "0123456789abcdefABCDEF" for c in value):
        return raw_public_key(public_key_from_hex(value.lower())).hex()
    try:
        key = serialization.load_pem_public_key(Path(value).read_bytes())
    except (OSError, ValueError):
        raise EvidenceError(
            ReasonCode.ACTION_REQUEST_INVALID,
            "--public-key is 64 hex digits or a file holding an Ed25519 public key PEM",
        ) from None
    if not isinstance(key, ed25519.Ed25519PublicKey):
        raise EvidenceError(ReasonCode.ACTION_REQUEST_INVALID, "an actor's key is an Ed25519 key")
    return raw_public_key(key).hex()


def _done(event, as_json: bool, headline: str) -> None:
    if as_json:
        click.echo(
            json.dumps(
                {
                    "message": headline,
                    "event_id": event.body["event_id"],
                    "details": {k: v for k, v in event.body["details"].items() if k != "authorization"},
                },
                indent=2,
            )
        )
    else:
        click.echo(headline)


@actor.command("keygen")
@click.argument("path", metavar="FILE", type=click.Path(dir_okay=False, path_type=Path))
@json_option
def actor_keygen(path: Path, as_json: bool) -> None:
    """Generate an actor's Ed25519 key into FILE (created 0600, never overwritten; name it <actor>.pem) and print
    its public key, which an admin registers. The private key never leaves FILE."""
    from evidence_pipeline.actors.keyfiles import generate_actor_key, public_hex
    from evidence_pipeline.actors.requests import key_id

    key = generate_actor_key(path)
    found = {"key_id": key_id(key.public_key()), "public_key": public_hex(key)}
    if as_json:
        click.echo(json.dumps(found, indent=2))
        return
    click.echo(f"key id:     {found['key_id']}")
    click.echo(f"public key: {found['public_key']}")


@actor.command("bootstrap")
@click.argument("name")
@click.option(
    "--key",
    "key",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="The new admin's own private key (PEM)  [default: EVIDENCE_ACTOR_KEY]",
)
@json_option
def actor_bootstrap(name: str, key: Path | None, as_json: bool) -> None:
    """Register NAME as the first admin, signed by its own key: once per deployment, at install
    (ACTOR_ALREADY_BOOTSTRAPPED after that)."""
    from evidence_pipeline.actors.keyfiles import load_actor_key, public_hex
    from evidence_pipeline.actors.requests import sign_request
    from evidence_pipeline.actors.roles import Action

    settings = load_settings()
    private = load_actor_key(key, settings)
    public = public_hex(private)
    envelope = sign_request(private, name, Action.ACTOR_BOOTSTRAP, args={"name": name, "public_key": public})
    _done(_admin(settings).bootstrap(envelope, public), as_json, f"{name} is the first admin")


@actor.command("register")
@click.argument("name")
@role_option
@public_key_option
@signer_options
@json_option
def actor_register(
    name: str, roles: tuple[str, ...], public_key: str, key: Path | None, actor: str | None, as_json: bool
) -> None:
    """Register NAME with its roles and first public key (an admin's action)."""
    from evidence_pipeline.actors.roles import Action

    settings = load_settings()
    envelope = signed(
        settings,
        key=key,
        actor=actor,
        action=Action.ACTOR_REGISTER,
        args={"name": name, "roles": sorted(set(roles)), "public_key": _public_key(public_key)},
    )
    _done(_admin(settings).register(envelope), as_json, f"{name} registered as {', '.join(sorted(set(roles)))}")


@actor.command("roles")
@click.argument("name")
@role_option
@signer_options
@json_option
def actor_roles(name: str, roles: tuple[str, ...], key: Path | None, actor: str | None, as_json: bool) -> None:
    """Give NAME exactly these roles from now on (an admin's action)."""
    from evidence_pipeline.actors.roles import Action

    settings = load_settings()
    envelope = signed(
        settings, key=key, actor=actor, action=Action.ACTOR_ROLES, args={"name": name, "roles": sorted(set(roles))}
    )
    _done(_admin(settings).change_roles(envelope), as_json, f"{name} holds {', '.join(sorted(set(roles)))}")


@actor.group("key")
def actor_key() -> None:
    """An actor's keys: add one (to rotate: add the new, then revoke the old), revoke one."""


@actor_key.command("add")
@click.argument("name")
@public_key_option
@signer_options
@json_option
def actor_key_add(name: str, public_key: str, key: Path | None, actor: str | None, as_json: bool) -> None:
    """Add a public key to NAME (an admin's action)."""
    from evidence_pipeline.actors.roles import Action

    settings = load_settings()
    envelope = signed(
        settings,
        key=key,
        actor=actor,
        action=Action.ACTOR_KEY_ADD,
        args={"name": name, "public_key": _public_key(public_key)},
    )
    event = _admin(settings).add_key(envelope)
    _done(event, as_json, f"key {event.body['details']['key']['key_id']} added to {name}")


@actor_key.command("revoke")
@click.argument("name")
@click.argument("key_id")
@signer_options
@json_option
def actor_key_revoke(name: str, key_id: str, key: Path | None, actor: str | None, as_json: bool) -> None:
    """Revoke NAME's key KEY_ID: from now on it authorizes nothing; what it signed before stays authorized."""
    from evidence_pipeline.actors.roles import Action

    settings = load_settings()
    envelope = signed(
        settings, key=key, actor=actor, action=Action.ACTOR_KEY_REVOKE, args={"name": name, "key_id": key_id}
    )
    _done(_admin(settings).revoke_key(envelope), as_json, f"key {key_id} of {name} revoked")


@actor.command("list")
@json_option
def actor_list(as_json: bool) -> None:
    """The registered actors, their roles and keys (revoked keys with the time of their revocation)."""
    from evidence_pipeline.runtime import runtime_for

    registry = runtime_for(load_settings(reads_only=True)).actors.read_snapshot()
    if as_json:
        shown = {name: dataclasses.asdict(found) for name, found in registry.items()}
        click.echo(json.dumps(shown, indent=2, sort_keys=True))
        return
    for name, found in sorted(registry.items()):
        click.echo(f"{name}  {', '.join(found.roles)}")
        for kid, key in sorted(found.keys.items()):
            state = f"revoked {key.revoked_at}" if key.revoked_at else f"valid from {key.valid_from}"
            click.echo(f"  {kid}  {state}")
    if not registry:
        click.echo("no actor yet: `evidence actor bootstrap NAME --key FILE` registers the first admin")
