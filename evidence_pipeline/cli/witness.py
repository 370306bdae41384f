"""`evidence witness …`: an outside witness for a ledger's checkpoints (C2SP tlog-witness), run by an auditor or
any party apart from the operator: its own process, its own key, its own state."""

from __future__ import annotations

from pathlib import Path

import click

from evidence_pipeline.errors import EvidenceError, ReasonCode

_NAME = click.option(
    "--name",
    required=True,
    help="The witness's key name, a schema-less URL such as "
    "`witness.example.org/auditor-1` (part of its key id: the same name every time).",
)
_KEY = click.option(
    "--key",
    "key_path",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The witness's Ed25519 private key (PKCS#8 PEM, 0600), from `evidence witness keygen`.",
)


@click.group()
def witness() -> None:
    """An outside witness that co-signs a ledger's checkpoints only when they extend what it co-signed."""


def _verifier(name: str, key_path: Path):
    from evidence_pipeline.signed_note import COSIGNATURE_V1, NoteError, verifier
    from evidence_pipeline.signing.keys import load_private_ed25519

    try:
        return verifier(name, COSIGNATURE_V1, load_private_ed25519(key_path, "the witness key"))
    except NoteError as error:
        raise EvidenceError(ReasonCode.CONFIG_INVALID, f"--name: {error}") from None


@witness.command("keygen")
@_NAME
@_KEY
def witness_keygen(name: str, key_path: Path) -> None:
    """Create the witness's key (never overwrites one) and print its verifier key (vkey)."""
    from evidence_pipeline.actors.keyfiles import generate_actor_key

    generate_actor_key(key_path, "a witness key")
    click.echo(_verifier(name, key_path).vkey())


@witness.command("vkey")
@_NAME
@_KEY
def witness_vkey(name: str, key_path: Path) -> None:
    """Print the witness's verifier key (vkey), which logs configure (EVIDENCE_WITNESSES) and auditors pin
    (`evidence verify --package … --witness VKEY`)."""
    click.echo(_verifier(name, key_path).vkey())


@witness.command("serve")
@_NAME
@_KEY
@click.option(
    "--state",
    "state",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder of the witness's durable state: the newest checkpoint it co-signed, per log.",
)
@click.option(
    "--log",
    "logs",
    required=True,
    multiple=True,
    metavar="VKEY",
    help="A log key this witness trusts (`evidence ledger vkey`); its name is the log's origin "
    "(repeatable: several logs, or a log's keys before and after a rotation).",
)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8090, show_default=True, type=click.IntRange(0, 65535))
def witness_serve(name: str, key_path: Path, state: Path, logs: tuple[str, ...], host: str, port: int) -> None:
    """Serve POST /add-checkpoint (C2SP tlog-witness)."""
    from evidence_pipeline.cli.resources import load_settings
    from evidence_pipeline.signed_note import NoteError
    from evidence_pipeline.witness.server import load_witness, serve

    try:
        loaded = load_witness(name, key_path, state, list(logs))
        loaded.verifier  # the name is checked before the server starts
    except NoteError as error:
        raise EvidenceError(ReasonCode.CONFIG_INVALID, f"--name or --log: {error}") from None
    serve(loaded, load_settings(), host, port)
