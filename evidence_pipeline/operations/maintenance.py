"""Periodic upkeep: a signed ledger checkpoint, and the sweep of attempt directories a dead process left behind."""

from __future__ import annotations

from evidence_pipeline.audit.witnessing import checkpoint_witnessed
from evidence_pipeline.faults import kill_point
from evidence_pipeline.runtime import Runtime
from evidence_pipeline.tempfiles import sweep


def sweep_attempts(runtime: Runtime) -> list[str]:
    """Remove abandoned attempt directories older than the maximum lease age whose lease is not live."""
    kill_point("during_sweep")
    return sweep(runtime.settings.work_dir, runtime.settings.lease_seconds, runtime.ledger.lease_is_live)


def run_maintenance(runtime: Runtime) -> dict:
    checkpoint, witnessed = checkpoint_witnessed(runtime)
    return {"checkpoint_size": checkpoint["size"], "witnesses": witnessed, "swept": len(sweep_attempts(runtime))}
