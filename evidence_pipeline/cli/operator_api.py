"""`evidence operator-api serve`: the operator HTTP API, off unless EVIDENCE_OPERATOR_API_PORT is set."""

from __future__ import annotations

import click

from evidence_pipeline.cli.resources import load_settings


@click.group("operator-api")
def operator_api() -> None:
    """The HTTP API for operators, approvers and auditors (signed requests; apart from the tenant API)."""


@operator_api.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True)
def operator_api_serve(host: str) -> None:
    """Serve the operator API on EVIDENCE_OPERATOR_API_PORT (Starlette on uvicorn, one process); refused
    (CONFIG_INVALID) while that setting is unset."""
    from evidence_pipeline.operator_api.app import serve

    serve(load_settings(), host)
