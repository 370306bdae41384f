"""`evidence keys …`: the keyring document, key rotation and revocation."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import click

from evidence_pipeline.cli.acting import gate, signed, signer_options
from evidence_pipeline.cli.options import json_option, parse_moment
from evidence_pipeline.cli.resources import load_settings, open_runtime
from evidence_pipeline.config import Settings
from evidence_pipeline.errors import EvidenceError, ReasonCode


@click.group()
def keys() -> None:
    """Signing keys: the keyring document, rotation and revocation (EVIDENCE_KEYS_DIR)."""


root_key_option = click.option(
    "--root-key",
    "root_key",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The trust root's private key (PEM)  [default: pades-root.key in EVIDENCE_KEYS_DIR, where development "
    "keys keep it; production keeps it offline]",
)


def _key_directory(settings: Settings):
    return open_runtime(settings).keys


def _show_keyring(document, as_json: bool, headline: str) -> None:
    from evidence_pipeline.signing.keyring_document import keyring_key
    from evidence_pipeline.signing.rotation import describe

    if as_json:
        click.echo(
            json.dumps(
                {"message": headline, "published_as": keyring_key(document.sequence), **json.loads(document.payload())},
                indent=2,
            )
        )
        return
    click.echo(headline)
    click.echo(f"keyring {document.sequence} ({keyring_key(document.sequence)}), trust root {document.trust_root_id}")
    for line in describe(document):
        click.echo(f"  {line}")


@keys.command("list")
@json_option
def keys_list(as_json: bool) -> None:
    """Show the keyring: every generation's key ids, validity window and status."""
    document = _key_directory(load_settings(reads_only=True)).document
    if document is None:
        raise EvidenceError(
            ReasonCode.KEYRING_INVALID,
            "no keyring document yet: `evidence keys publish --root-key PATH` signs and publishes the first one",
        )
    _show_keyring(document, as_json, "the keyring in force")


@keys.command("publish")
@root_key_option
@json_option
def keys_publish(root_key: Path | None, as_json: bool) -> None:
    """Publish the keyring document of the keys as they are (once, for keys provisioned before key rotation;
    development keys publish theirs on first use), and every generation's public keys."""
    document = _key_directory(load_settings()).ensure_keyring(root_key)
    _show_keyring(document, as_json, "published")


@keys.command("rotate")
@root_key_option
@signer_options
@json_option
def keys_rotate(root_key: Path | None, key: Path | None, actor: str | None, as_json: bool) -> None:
    """Create a new statement key and PAdES signer certificate (issued by the trust root), make them active now,
    retire the previous ones and publish the keyring document signed by the trust root. Every process signing
    from this keys directory switches at its next bundle. An admin's signed action (`keys.rotated` event)."""
    from evidence_pipeline.actors.roles import Action
    from evidence_pipeline.operations.signing_keys import rotate_keys

    settings = load_settings()
    envelope = signed(settings, key=key, actor=actor, action=Action.KEYS_ROTATE, args={})
    document = rotate_keys(gate(settings), _key_directory(settings), envelope, root_key)
    active = document.active
    _show_keyring(
        document,
        as_json,
        f"generation {active.generation} is active since {active.not_before.isoformat(timespec='milliseconds')}",
    )


@keys.command("revoke")
@click.argument("key_id")
@click.option("--reason", required=True, help="Why (recorded in the keyring document).")
@click.option(
    "--at",
    "at",
    callback=parse_moment,
    metavar="TIME",
    help="Revoked as of this ISO 8601 time, e.g. when the key was compromised  [default: now]. "
    "Signatures made at or after it fail verification with KEY_REVOKED.",
)
@root_key_option
@signer_options
@json_option
def keys_revoke(
    key_id: str,
    reason: str,
    at: datetime | None,
    root_key: Path | None,
    key: Path | None,
    actor: str | None,
    as_json: bool,
) -> None:
    """Revoke the generation holding KEY_ID (a statement key id or a signer certificate id) and publish the
    keyring document. The active generation is rotated out first, in the same document. An admin's signed action
    (`keys.revoked` event)."""
    from evidence_pipeline.actors.roles import Action
    from evidence_pipeline.operations.signing_keys import revoke_keys

    settings = load_settings()
    envelope = signed(
        settings,
        key=key,
        actor=actor,
        action=Action.KEYS_REVOKE,
        args={"key_id": key_id, "reason": reason, "at": at.isoformat() if at else None},
    )
    document, rotated = revoke_keys(gate(settings), _key_directory(settings), envelope, root_key)
    revoked = document.find(key_id)
    _show_keyring(
        document,
        as_json,
        f"generation {revoked.generation} revoked as of "
        f"{revoked.revoked_at.isoformat(timespec='milliseconds')}"
        + (f"; generation {document.active.generation} is active" if rotated else ""),
    )
