"""Who authorized what, checked from an audit package alone: its authorization events (package.py's format).

Each event the index lists is proved as a bundle's event is (package.py's ``read_inclusion`` and
``check_inclusion``: its bytes' leaf and audit path reach a verified checkpoint, and its chain hash is
sha256(prev_hash || bytes)), and is of the package's tenant or of none; a missing file is PACKAGE_INCOMPLETE, a
proof that fails PROOF_INVALID, each in a check named after the event. Then every signed request they store is
re-checked in ledger order by actors/offline.py's ``recheck_events`` (those whose proof failed too, so that a
tampered request is named for what it breaks), which folds the actor registry from the actor events as it goes:
a request that does not hold (tampered, signed by a key the package's actor events do not give the actor,
expired, of a role that does not permit it, replayed) is AUTHORIZATION_INVALID, naming the event and the code of
the check that failed. Only when every check passed does the package say who authorized each event.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from evidence_pipeline.actors.offline import recheck_events
from evidence_pipeline.audit.package import (
    Index,
    PackageChecks,
    authorization_proof_path,
    prove_event,
    read_event,
    read_inclusion,
    run_check,
)
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.store import ArtifactStore


def check_authorizations(store: ArtifactStore, index: Index, checks: PackageChecks) -> list[dict[str, Any]]:
    """Adds one check per authorization event and one, ``authorizations``, for the re-check (none when the index
    lists no authorization event) to ``checks``; returns who authorized each event (its seq, event id and type,
    actor, key id, action and the request's time), in ledger order, or nothing when a check failed."""
    if not index.authorizations:
        return []
    bodies: dict[int, dict[str, Any]] = {}
    for seq in index.authorizations:
        checks.checks.append(run_check(f"event {seq}", lambda: _prove(store, index, seq, checks.roots, bodies)))
    seqs = {body.get("event_id"): seq for seq, body in bodies.items()}
    found: list[dict[str, Any]] = []

    def recheck() -> None:
        try:
            authorized = recheck_events([bodies[seq] for seq in sorted(bodies)], index.action_max_age_seconds)
        except EvidenceError as error:
            raise EvidenceError(ReasonCode.AUTHORIZATION_INVALID, error.message) from None
        found.extend({"seq": seqs[a.event_id], **dataclasses.asdict(a)} for a in authorized)

    checks.checks.append(run_check("authorizations", recheck))
    return found if checks.ok else []


def _prove(
    store: ArtifactStore, index: Index, seq: int, roots: dict[str, tuple[int, bytes]], bodies: dict[int, dict[str, Any]]
) -> None:
    """Adds the event's body to ``bodies`` if it is of the package's tenant (or of none), then proves it: an event
    whose proof fails is still re-checked, so that a tampered request is also named for what it breaks."""
    text, bodies[seq] = read_event(store, seq, (index.tenant, ""))
    prove_event(store, seq, text, read_inclusion(store, authorization_proof_path(seq)), roots)
