"""`evidence intake serve`: the HTTP front door for tenants' documents and jobs."""

from __future__ import annotations

import os

import click

from evidence_pipeline.cli.resources import load_settings


@click.group()
def intake() -> None:
    """The HTTP front door for tenants' documents and jobs."""


@intake.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
@click.option("--workers", type=click.IntRange(1), help="server processes  [default: the CPUs this process may use]")
def intake_serve(host: str, port: int, workers: int | None) -> None:
    """Serve the intake API (Starlette on uvicorn)."""
    from evidence_pipeline.intake.app import serve

    settings = load_settings()
    serve(settings, host, port, workers or len(os.sched_getaffinity(0)))
