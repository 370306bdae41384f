"""A ledger with a long history, written in bulk for the metrics scrape benchmark (bench/metrics_scrape.py).

Rows go straight into the tables (one transaction, executemany): events of the shapes the ledger stores (canonical
bodies, unique hashes; the chain is not linked, so `ledger verify` would refuse it, which no reader here needs),
and jobs whose states look like a year of operation: mostly succeeded long ago, a share of refused documents
(decisions), a few dead letters, and the work in flight (accepted, retry_wait, running) that a scrape reads.
"""

from __future__ import annotations

import hashlib
import itertools
import random
import time
import uuid
from datetime import datetime, timedelta, timezone

from evidence_pipeline.canonical import canonical
from evidence_pipeline.ledger import job_states as states
from evidence_pipeline.ledger.ledger import Ledger
from evidence_pipeline.models import EventType

EVENTS_PER_JOB = 10  # accepted, running, stages and the outcome: what one job leaves in the ledger, roughly
LIVE_JOBS = 300  # accepted, retry_wait and running at the time of the scrape
DECISION_CODE = "DOCUMENT_XFA"  # a gate refusal: the job's outcome, not a dead letter
CHUNK = 50_000


def fill(ledger: Ledger, events: int, seed: int = 7) -> dict:
    """Append ``events`` events and ``events // EVENTS_PER_JOB`` jobs; returns what was written, by kind."""
    rng = random.Random(seed)
    now = time.time()
    year = 365 * 86400
    job_rows, doc_rows = [], []
    counts: dict[str, int] = {}
    for index in range(events // EVENTS_PER_JOB):
        job_id = hashlib.sha256(f"job-{index}".encode()).hexdigest()
        document = index % 2 == 0
        live = index >= events // EVENTS_PER_JOB - LIVE_JOBS
        roll = rng.random()
        state = (
            rng.choice((states.ACCEPTED, states.RUNNING))
            if live
            else states.DEAD
            if roll < 0.005
            else states.REJECTED
            if roll < 0.05
            else states.SUCCEEDED
        )
        updated = now - rng.uniform(0, 600) if live else now - rng.uniform(600, year)
        attempts = 0 if state == states.ACCEPTED and rng.random() < 0.8 else rng.choice((1, 1, 1, 2, 4))
        counts[state] = counts.get(state, 0) + 1
        job_rows.append(
            {
                "job_id": job_id,
                "tenant": f"t{index % 10000:05d}",
                "period": "2026-01",
                "source_sha256": job_id,
                "renderer_version": "1",
                "policy_version": "p1",
                "fidelity": states.DOCUMENT if document else "archive",
                "state": state,
                "attempts": attempts,
                "lease_token": attempts,
                "lease_owner": None,
                "lease_expires_at": now + 60 if state == states.RUNNING else None,
                "budget_started_at": updated,
                "last_reason": DECISION_CODE
                if state == states.REJECTED
                else "STORE_UNAVAILABLE"
                if state == states.DEAD
                else None,
                "created_at": updated,
                "updated_at": updated,
            }
        )
        if document:
            doc_rows.append(
                {
                    "job_id": job_id,
                    "tenant": job_rows[-1]["tenant"],
                    "batch_id": "",
                    "idempotency_key": job_id[:32],
                    "request_sha256": job_id,
                    "operation": rng.choice(("inspect", "redact", "split")),
                    "request": "{}",
                    "accepted_at": updated,
                    "started_at": None if attempts == 0 else updated,
                }
            )
    with ledger.writing(durable=False) as conn:
        rows = _events(events, now - year, year)
        while chunk := list(itertools.islice(rows, CHUNK)):  # a million bodies at once would take gigabytes
            conn.execute(ledger.audit_events.insert(), chunk)
        conn.execute(ledger.jobs.insert(), job_rows)
        conn.execute(ledger.document_jobs.insert(), doc_rows)
    return {"events": events, "jobs": len(job_rows)} | counts


def _events(count: int, start: float, span: float):
    types = [
        EventType.JOB_ACCEPTED,
        EventType.JOB_RUNNING,
        EventType.STAGES_TIMED,
        EventType.REPORT_RENDERED,
        EventType.BUNDLE_PUBLISHED,
    ]
    for seq in range(1, count + 1):
        event_type = str(types[seq % len(types)])
        recorded = datetime.fromtimestamp(start + span * seq / count, timezone.utc)
        details = {"job_id": f"{seq:064x}"}
        if event_type == EventType.BUNDLE_PUBLISHED:
            details["completed_at"] = (recorded - timedelta(seconds=2)).isoformat(timespec="seconds")
        body = canonical(
            {
                "event_id": str(uuid.UUID(int=seq)),
                "event_type": event_type,
                "tenant": f"t{seq % 10000:05d}",
                "period": "2026-01",
                "subject_sha256": "0" * 64,
                "actor": "bench",
                "recorded_at": recorded.isoformat(timespec="microseconds"),
                "details": details,
            }
        )
        yield {
            "event_id": str(uuid.UUID(int=seq)),
            "event_type": event_type,
            "tenant": f"t{seq % 10000:05d}",
            "period": "2026-01",
            "subject_sha256": "0" * 64,
            "body": body,
            "prev_hash": f"{seq - 1:064x}",
            "event_hash": f"{seq:064x}",
        }
