"""`evidence metrics serve`: the Prometheus endpoint alone, for a host that runs no intake server."""

from __future__ import annotations

import click

from evidence_pipeline.cli.resources import load_settings, open_runtime


@click.group()
def metrics() -> None:
    """Prometheus metrics read from the ledger, the checkpoints and the work directory."""


@metrics.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=9464, show_default=True, type=click.IntRange(0, 65535))
def metrics_serve(host: str, port: int) -> None:
    """Serve GET /metrics (unauthenticated, no tenant data; the intake server serves the same on its port, with
    its admission histogram)."""
    from evidence_pipeline.metrics.http import serve

    serve(open_runtime(load_settings(reads_only=True)), host, port)
