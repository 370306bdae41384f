"""Who authorized each privileged action of a ledger, re-checked from its event bodies alone: what `evidence ledger
verify` adds to the chain and the checkpoints. The checks are actors/offline.py's (an auditor's own verifier can run
them on exported bodies); a request that does not hold fails with LEDGER_INVALID naming the event and the code."""

from __future__ import annotations

from sqlalchemy import select

from evidence_pipeline.actors.offline import Authorization, recheck_events
from evidence_pipeline.ledger import Ledger
from evidence_pipeline.ledger.db import classified_errors
from evidence_pipeline.ledger.ledger import event_body


def recheck_ledger(ledger: Ledger, max_age_seconds: float) -> list[Authorization]:
    """Every signed request stored with an event, in ledger order, re-checked against the registry as it stood."""
    events = ledger.audit_events.c
    with classified_errors(), ledger.engine.connect() as conn:
        bodies = (event_body(body) for body in conn.execute(select(events.body).order_by(events.seq)).scalars())
        return recheck_events(bodies, max_age_seconds)
