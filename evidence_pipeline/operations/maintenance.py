"""Periodic upkeep: a signed ledger checkpoint, and the sweep of attempt directories a dead process left behind."""

from __future__ import annotations

from evidence_pipeline.audit.witnessing import checkpoint_witnessed
from evidence_pipeline.canonical import canonical, sha256_text
from evidence_pipeline.faults import kill_point
from evidence_pipeline.models import Deployment, EventType
from evidence_pipeline.runtime import Runtime
from evidence_pipeline.tempfiles import Swept, sweep


def sweep_attempts(runtime: Runtime, actor: str) -> Swept:
    """Remove abandoned attempt directories older than the maximum lease age whose lease is not live, and record
    what was removed, kept and failed in the ledger (`sweep.completed`, by ``actor``; counts only, never a path)."""
    kill_point("during_sweep")
    swept = sweep(runtime.settings.work_dir, runtime.settings.lease_seconds, runtime.ledger.lease_is_live)
    counts = swept.counts()
    runtime.ledger.record(Deployment(), EventType.SWEEP_COMPLETED, sha256_text(canonical(counts)), actor, **counts)
    return swept


def run_maintenance(runtime: Runtime, actor: str) -> dict:
    checkpoint, witnessed = checkpoint_witnessed(runtime)
    return {
        "checkpoint_size": checkpoint["size"],
        "witnesses": witnessed,
        "sweep": sweep_attempts(runtime, actor).counts(),
    }
