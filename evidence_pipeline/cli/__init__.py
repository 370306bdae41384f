"""`evidence …`: the command line for operators and auditors. This package owns the root group and its one error
boundary; each command group lives in a module of its own, options several groups share in options.py, and what
commands open (settings, runtime, archive, Dagster home) in resources.py.

Each command imports what it needs in its body, so that `evidence --help` and `evidence verify` load neither the
ledger (SQLAlchemy, Alembic), the pipeline (pandas, reportlab) nor Dagster (test_verify_many checks which modules load).
"""

from __future__ import annotations

import errno
import json
import os

import click

from evidence_pipeline.cli import (
    actor,
    audit,
    demo,
    export,
    intake,
    jobs,
    keys,
    ledger,
    lineage,
    metrics,
    operator_api,
    part,
    ruleset,
    source,
    stats,
    template,
    tenant,
    timestamps,
    ui,
    verify,
    webhook,
    witness,
)
from evidence_pipeline.cli.options import JSON_REQUESTED
from evidence_pipeline.errors import EvidenceError, ReasonCode, exit_code


class _ErrorBoundary(click.Group):
    """The one place where a foreseeable failure becomes an exit code and a message (or, with --json, a JSON
    error body): EvidenceError by its reason code (errors.exit_code), OS errors as LOCAL_IO_FAILED. Never a
    traceback, never a local path."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except EvidenceError as error:
            _exit_with(ctx, error)
        except OSError as error:
            reason = errno.errorcode.get(error.errno or 0, type(error).__name__)
            _exit_with(ctx, EvidenceError(ReasonCode.LOCAL_IO_FAILED, f"a local file could not be used ({reason})"))


def _exit_with(ctx: click.Context, error: EvidenceError):
    if ctx.meta.get(JSON_REQUESTED):
        click.echo(json.dumps({"error": {"code": error.code, "message": error.message}}, indent=2))
    else:
        click.echo(f"Error: {error}", err=True)
    ctx.exit(exit_code(error.code))


@click.group(
    cls=_ErrorBoundary,
    commands=[
        demo.demo,
        verify.verify,
        actor.actor,
        export.export,
        lineage.lineage,
        ledger.ledger,
        keys.keys,
        stats.stats,
        jobs.dead_letter,
        jobs.replay,
        jobs.sweep,
        tenant.tenant,
        template.template,
        part.part,
        ruleset.ruleset,
        source.source,
        intake.intake,
        metrics.metrics,
        operator_api.operator_api,
        webhook.webhook,
        ui.ui,
        witness.witness,
        timestamps.timestamps,
        audit.audit,
    ],
)
def main() -> None:
    """Signed, tamper-evident monthly compliance evidence.

    Exit codes: 0 ok, 1 a check failed, 2 usage or not found, 3 infrastructure unavailable.
    """
    # Owner-only, whatever umask the shell had: what this process writes without an explicit mode, and what the
    # processes it starts write (Dagster's webserver, daemon and runs: its storage folders and files).
    os.umask(0o077)
