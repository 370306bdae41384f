"""`evidence lineage`: walk a document artifact back to its upload (`evidence verify` walks artifact ids too)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from evidence_pipeline.cli.options import json_option
from evidence_pipeline.cli.resources import load_settings, open_runtime
from evidence_pipeline.errors import EXIT_OK, exit_code


@click.command()
@click.argument("artifact_id")
@json_option
def lineage(artifact_id: str, as_json: bool) -> None:
    """Walk from ARTIFACT_ID (an archive key, as a job's status lists its outputs) back to the uploaded bytes,
    checking every digest, DSSE statement and ledger event on the way. Exit 0 only when the whole chain holds;
    otherwise the reason code names the link that does not."""
    code = walk_lineage(artifact_id, as_json)
    if code != EXIT_OK:
        click.get_current_context().exit(code)


def is_artifact_id(location: str) -> bool:
    return location.startswith("documents/") and not Path(location).exists()


def walk_lineage(artifact_id: str, as_json: bool) -> int:
    """Walk one artifact's lineage, print the report; its exit code."""
    from evidence_pipeline.audit.lineage_ledger import lineage as walk

    report = walk(open_runtime(load_settings(reads_only=True)), artifact_id)
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        for link in report["links"]:
            named = link.get("artifact_id") or link.get("signature_check_id") or link.get("document_id")
            click.echo(f"ok  {link['link']:<16} {named}")
        failed = f"FAILED {report['code']}: {report['link']}: {report['message']}"
        click.echo("LINEAGE HOLDS" if report["ok"] else failed)
    return EXIT_OK if report["ok"] else exit_code(report["code"])
