"""`evidence ledger …`: sign a checkpoint, verify the ledger against its checkpoints, prove a bundle's inclusion."""

from __future__ import annotations

import json
from pathlib import Path

import click

from evidence_pipeline.cli.options import witness_options, witness_policy
from evidence_pipeline.cli.resources import load_settings, open_archive, open_audit, open_runtime
from evidence_pipeline.errors import EvidenceError, ReasonCode


@click.group()
def ledger() -> None:
    """Audit ledger: signed checkpoints, verification, inclusion proofs."""


@ledger.command("checkpoint")
@click.option(
    "--witness-policy",
    "required",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="How many witnesses of EVIDENCE_WITNESSES must co-sign (default: all of them); fewer exits 1 "
    "with WITNESS_POLICY_NOT_MET, once the checkpoint is published and each outcome printed.",
)
def ledger_checkpoint(required: int | None) -> None:
    """Sign and publish a checkpoint of the current ledger (put-once under ledger/checkpoints/), and submit it to
    the witnesses of EVIDENCE_WITNESSES; a witness that is down catches up at the next checkpoint, but this one
    exits 1 when fewer than the policy's witnesses co-signed it."""
    from evidence_pipeline.audit.witnessing import checkpoint_witnessed

    runtime = open_runtime(load_settings())
    checkpoint, witnessed = checkpoint_witnessed(runtime)
    click.echo(f"checkpoint {checkpoint['size']} events, root {checkpoint['root_sha256']}")
    for name, outcome in witnessed.items():
        click.echo(f"witness {name}: {outcome}")
    cosigned, needed = sum(o == "cosigned" for o in witnessed.values()), required or len(witnessed)
    if cosigned < needed:
        raise EvidenceError(
            ReasonCode.WITNESS_POLICY_NOT_MET,
            f"checkpoint {checkpoint['size']} is co-signed by "
            f"{cosigned} of {len(witnessed)} witnesses; the policy needs {needed}",
        )
    if runtime.witness_key is not None:  # the in-process co-signer of earlier versions (EVIDENCE_WITNESS_KEY)
        from evidence_pipeline.audit.checkpoints import check_witness, checkpoint_key

        key = checkpoint_key(checkpoint["size"])
        try:
            witness = check_witness(runtime.archive.get(key), runtime.witness_key.public_key(), key)
            click.echo(f"co-signed by witness {witness}")
        except EvidenceError as error:  # published before the witness was configured: put-once, never re-signed
            click.echo(f"not witnessed: {error.message}")


@ledger.command("vkey")
def ledger_vkey() -> None:
    """Print the log's verifier key (C2SP vkey: EVIDENCE_LOG_ORIGIN and the active statement key), which a
    witness is started with (`evidence witness serve --log VKEY`)."""
    from evidence_pipeline.audit.witnessing import log_verifier

    runtime = open_runtime(load_settings())
    click.echo(log_verifier(runtime.settings.log_origin, runtime.keyring.statement_public_key).vkey())


@ledger.command("verify")
@click.option(
    "--require-witness",
    "witness",
    metavar="PUB.pem",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Every checkpoint must carry a valid signature by this witness key (its public key PEM).",
)
@witness_options("")
@click.option(
    "--origin",
    metavar="ORIGIN",
    help="The log's origin every checkpoint note must state "
    "[default: the one origin of the --policy file's `log` lines, else EVIDENCE_LOG_ORIGIN].",
)
def ledger_verify(
    witness: Path | None, witnesses: tuple[str, ...], policy: int | None, policy_file: str | None, origin: str | None
) -> None:
    """Recompute the hash chain, every checkpoint's Merkle root and the consistency between checkpoints, check
    every checkpoint's C2SP note (its origin, its root against the envelope's, its cosignatures by the --witness
    keys, the policy met by the newest), and re-check who authorized each privileged action (its signed request,
    against the actor registry as it stood)."""
    from evidence_pipeline.audit.authorizations import recheck_ledger
    from evidence_pipeline.audit.checkpoints import verify_ledger
    from evidence_pipeline.audit.witnessing import pinned_origin
    from evidence_pipeline.signing.keys import pinned_public_key

    pinned = None if witness is None else pinned_public_key(witness, "--require-witness")
    pins = witness_policy(witnesses, policy, policy_file)
    settings = load_settings(reads_only=True)
    ledger, archive = open_audit(settings)
    report = verify_ledger(
        ledger,
        archive,
        witness=pinned,
        origin=pinned_origin(origin, pins) or settings.log_origin,
        policy=pins,
        stated=origin is not None,
    )
    authorized = recheck_ledger(ledger, settings.action_max_age_seconds)
    click.echo(
        f"ledger verified: {report['events']} events, {len(report['checkpoints'])} checkpoints consistent "
        f"({report['unchecked_tail']} events after the newest checkpoint), {len(authorized)} signed actions "
        "authorized"
    )


@ledger.command("prove")
@click.argument("bundle")
def ledger_prove(bundle: str) -> None:
    """Print the inclusion proof of BUNDLE's publication event in the newest covering checkpoint."""
    from evidence_pipeline.audit.checkpoints import prove_bundle
    from evidence_pipeline.audit.locations import locate_bundle

    location = locate_bundle(bundle)
    ledger, _ = open_audit(load_settings(reads_only=True))
    click.echo(json.dumps(prove_bundle(ledger, open_archive(location.archive), location.prefix), indent=2))
