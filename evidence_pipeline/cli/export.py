"""`evidence export`: a tenant's offline audit package."""

from __future__ import annotations

from pathlib import Path

import click

from evidence_pipeline.cli.options import check_period, check_tenant_id
from evidence_pipeline.cli.resources import load_settings, open_audit


@click.command()
@click.option("--tenant", "tenant_id", required=True, callback=check_tenant_id, help="Whose bundles to export.")
@click.option("--from", "first", callback=check_period, metavar="YYYY-MM", help="First period (inclusive).")
@click.option("--to", "last", callback=check_period, metavar="YYYY-MM", help="Last period (inclusive).")
@click.argument("out", type=click.Path(path_type=Path))
def export(tenant_id: str, first: str | None, last: str | None, out: Path) -> None:
    """Write an offline audit package of a tenant's bundles to the folder OUT (which must not exist).

    The package holds the bundles, the archive's keys/, the signed checkpoints, each bundle's ledger event with its
    inclusion proof, the events that record who authorized the tenant's privileged actions (and the actor events
    they are checked against) with theirs, and the consistency proofs between the checkpoints: `evidence verify
    --package OUT` (or a short script, see the README) checks it with no database and no network. Reads the
    ledger and the archive; writes neither.
    """
    from evidence_pipeline.audit.export import export_package

    settings = load_settings(reads_only=True)
    ledger, archive = open_audit(settings)
    exported = export_package(ledger, archive, tenant_id, first, last, out, settings.action_max_age_seconds)
    index = exported.index
    click.echo(f"exported {len(index.bundles)} bundle(s) of {tenant_id} ({first or 'first'}..{last or 'last'}) and "
               f"{len(index.authorizations)} authorization event(s) to {out}; checkpoints: {len(index.checkpoints)}, "
               f"witnessed: {exported.witnessed}; the newest co-signed by {_cosigners(out, index)} outside witness(es)")
    if exported.unproved:
        click.echo(f"left out {exported.unproved} authorization event(s) recorded after the newest checkpoint: run "
                   "`evidence ledger checkpoint` and export again to include them")
    click.echo(f"verify it:  evidence verify --package {out} [--key-id …] [--root-id …] "
               "[--witness VKEY … --witness-policy N]")


def _cosigners(out: Path, index) -> int:
    """How many cosignature lines the package's newest checkpoint note carries (the statement key's line aside)."""
    from evidence_pipeline.audit.package import checkpoint_size
    from evidence_pipeline.audit.witnessing import note_key
    from evidence_pipeline.witness.note import parse_note

    note = out / note_key(checkpoint_size(index.checkpoints[-1]))
    return len(parse_note(note.read_bytes()).signatures) - 1 if note.exists() else 0
