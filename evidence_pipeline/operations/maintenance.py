"""Periodic upkeep: a signed ledger checkpoint, and the sweep of attempt directories a dead process left behind."""

from __future__ import annotations

from evidence_pipeline.audit.checkpoints import publish_checkpoint
from evidence_pipeline.faults import kill_point
from evidence_pipeline.runtime import Runtime
from evidence_pipeline.tempfiles import sweep


def sweep_attempts(runtime: Runtime) -> list[str]:
    """Remove abandoned attempt directories older than the maximum lease age whose lease is not live."""
    kill_point("during_sweep")
    return sweep(runtime.settings.work_dir, runtime.settings.lease_seconds, runtime.ledger.lease_is_live)


def run_maintenance(runtime: Runtime) -> dict:
    checkpoint = publish_checkpoint(runtime.ledger, runtime.archive, runtime.keyring, runtime.witness_key)
    return {"checkpoint_size": checkpoint["size"], "swept": len(sweep_attempts(runtime))}
