"""`evidence ui`: the Dagster UI on this project's instance, with its daemon or read-only for auditors."""

from __future__ import annotations

import os
import sys

import click

from evidence_pipeline.cli.resources import REPO_ROOT, load_settings, use_dagster_home


@click.command()
@click.option(
    "--read-only",
    is_flag=True,
    help="Serve the UI alone (dagster-webserver --read-only) for auditors: browse assets, partitions, "
    "metadata and check results; nothing can be launched, changed or wiped, and no daemon runs.",
)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=3000, show_default=True, type=click.IntRange(0, 65535))
def ui(read_only: bool, host: str, port: int) -> None:
    """Start the Dagster UI on this project's instance: with the daemon (dagster dev), or --read-only."""
    settings = load_settings()
    use_dagster_home(settings)
    workspace = str(REPO_ROOT / "workspace.yaml")
    # Same interpreter as this command, so it works without an activated virtualenv.
    if read_only:
        argv = ["-m", "dagster_webserver", "--read-only", "-w", workspace, "-h", host, "-p", str(port)]
    else:
        argv = ["-m", "dagster", "dev", "-w", workspace, "-h", host, "-p", str(port)]
    os.execv(sys.executable, [sys.executable, *argv])
