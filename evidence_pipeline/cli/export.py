"""`evidence export`: a tenant's offline audit package."""

from __future__ import annotations

from pathlib import Path

import click

from evidence_pipeline.cli.options import check_period, check_tenant_id
from evidence_pipeline.cli.resources import load_settings, open_runtime


@click.command()
@click.option("--tenant", "tenant_id", required=True, callback=check_tenant_id, help="Whose bundles to export.")
@click.option("--from", "first", callback=check_period, metavar="YYYY-MM", help="First period (inclusive).")
@click.option("--to", "last", callback=check_period, metavar="YYYY-MM", help="Last period (inclusive).")
@click.option(
    "--with-uploads",
    is_flag=True,
    help="Also pack the uploaded documents' bytes (private: by default the package holds only their digests).",
)
@click.option(
    "--controls",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="The controls mapping (JSON) of the package's OSCAL assessment results [default: "
    "EVIDENCE_OSCAL_CONTROLS, else the documented one].",
)
@click.argument("out", type=click.Path(path_type=Path))
def export(
    tenant_id: str, first: str | None, last: str | None, with_uploads: bool, controls: Path | None, out: Path
) -> None:
    """Write an offline audit package of a tenant's bundles and document artifacts to the folder OUT (which must not
    exist).

    The package holds the bundles, every output of the tenant's document jobs of the periods (redactions, review
    decisions, split parts, merged documents) with the statements, signature-check records, decisions and
    signed copies their lineage walks through, the archive's keys/, the signed checkpoints, each of those ledger
    events with its inclusion proof, the events that record who authorized the tenant's privileged actions (and
    the actor events they are checked against) with theirs, and the consistency proofs between the checkpoints.
    The uploads themselves are private: the package holds their digests, and their bytes only --with-uploads.
    package.json, its index, is signed with the statement key and lists every file's digest. `evidence verify
    --package OUT` checks it with no database and no network. Reads the ledger and the archive; writes neither.
    """
    from evidence_pipeline.audit.export import export_package
    from evidence_pipeline.audit.oscal import load_controls

    settings = load_settings(reads_only=True)
    mapping = load_controls(controls or settings.oscal_controls)  # before any work: a bad mapping refuses at once
    exported = export_package(
        open_runtime(settings),
        tenant_id,
        first=first,
        last=last,
        out=out,
        action_max_age_seconds=settings.action_max_age_seconds,
        with_uploads=with_uploads,
        controls=mapping,
    )
    index = exported.index
    click.echo(
        f"exported {len(index.bundles)} bundle(s) of {tenant_id} ({_months(first, last)}), "
        f"{len(index.documents['artifacts'])} document artifact(s)"
        + (" with their uploads" if with_uploads else " (uploads as digests only)")
        + f" and {len(index.authorizations)} authorization event(s) to {out}; checkpoints: "
        f"{len(index.checkpoints)}, witnessed: {exported.witnessed}; the newest co-signed by "
        f"{_cosigners(out, index)} outside witness(es)"
    )
    if exported.unproved:
        click.echo(
            f"left out {exported.unproved} authorization event(s) recorded after the newest checkpoint: run "
            "`evidence ledger checkpoint` and export again to include them"
        )
    click.echo(
        f"verify it:  evidence verify --package {out} [--key-id …] [--root-id …] [--origin ORIGIN] "
        "[--policy FILE | --witness VKEY … --witness-policy N]"
    )


def _months(first: str | None, last: str | None) -> str:
    """The months the export covers, in words: "every month", "2026-01 to 2026-06", "from 2026-01", "to 2026-06"."""
    if first and last:
        return f"{first} to {last}"
    if first or last:
        return f"from {first}" if first else f"to {last}"
    return "every month"


def _cosigners(out: Path, index) -> int:
    """How many cosignature lines the package's newest checkpoint note carries (the statement key's line aside)."""
    from evidence_pipeline.audit.package import checkpoint_size
    from evidence_pipeline.audit.witnessing import note_key
    from evidence_pipeline.signed_note import parse_note

    note = out / note_key(checkpoint_size(index.checkpoints[-1]))
    return len(parse_note(note.read_bytes()).signatures) - 1 if note.exists() else 0
