"""Append-only audit events, hash-chained, committed in the same transaction as what they describe."""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, create_engine, make_url, select, text
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.ledger.schema import audit_events, publications
from evidence_pipeline.models import TenantMonth

GENESIS_HASH = "0" * 64
_APPEND_ATTEMPTS = 20


def canonical(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def chain_hash(prev_hash: str, body: str) -> str:
    return hashlib.sha256(bytes.fromhex(prev_hash) + body.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class LedgerEvent:
    seq: int
    event_type: str
    event_hash: str
    body: dict


class Ledger:
    def __init__(self, url: str):
        parsed = make_url(url)
        if parsed.get_backend_name() == "sqlite" and parsed.database:
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        self.engine = create_engine(parsed)
        self._migrate()

    def record(self, tenant_month: TenantMonth, event_type: str, subject_sha256: str, actor: str, **details) -> LedgerEvent:
        """Append one event in its own transaction."""
        return self._transact(lambda conn: self._append(conn, tenant_month, event_type, subject_sha256, actor, details))

    def publish(self, row: dict, actor: str, **details) -> tuple[dict, bool]:
        """Commit a publication row and its `bundle.published` event atomically.

        Returns (row, created). A publication that already exists for the identity wins: the caller converges on it.
        """
        tenant_month = TenantMonth(row["tenant"], row["period"])

        def commit(conn: Connection) -> tuple[dict, bool]:
            existing = self._publication(conn, row["identity"])
            if existing is not None:
                return existing, False
            event = self._append(conn, tenant_month, "bundle.published", row["report_sha256"], actor, details | row)
            conn.execute(publications.insert().values(**row, event_seq=event.seq))
            return self._publication(conn, row["identity"]), True

        return self._transact(commit)

    def publication(self, identity: str) -> dict | None:
        with self.engine.connect() as conn:
            return self._publication(conn, identity)

    def has_event(self, event_type: str, subject_sha256: str) -> bool:
        query = select(audit_events.c.seq).where(
            audit_events.c.event_type == event_type, audit_events.c.subject_sha256 == subject_sha256
        )
        with self.engine.connect() as conn:
            return conn.execute(query.limit(1)).first() is not None

    def event(self, seq: int) -> LedgerEvent:
        with self.engine.connect() as conn:
            row = conn.execute(select(audit_events).where(audit_events.c.seq == seq)).one()
        return LedgerEvent(row.seq, row.event_type, row.event_hash, json.loads(row.body))

    def verify_chain(self) -> int:
        """Recompute every link; return the number of events. A rewritten, deleted or reordered row fails."""
        prev = GENESIS_HASH
        count = 0
        with self.engine.connect() as conn:
            for row in conn.execute(select(audit_events).order_by(audit_events.c.seq)):
                if row.prev_hash != prev or chain_hash(prev, row.body) != row.event_hash:
                    raise EvidenceError("LEDGER_INVALID", f"audit event {row.seq} breaks the hash chain")
                body = json.loads(row.body)
                if (body["event_type"], body["tenant"], body["subject_sha256"]) != (
                    row.event_type, row.tenant, row.subject_sha256
                ):
                    raise EvidenceError("LEDGER_INVALID", f"audit event {row.seq} columns differ from its body")
                prev, count = row.event_hash, count + 1
        return count

    def _append(self, conn: Connection, tenant_month: TenantMonth, event_type: str, subject_sha256: str,
                actor: str, details: dict) -> LedgerEvent:
        head = conn.execute(select(audit_events.c.event_hash).order_by(audit_events.c.seq.desc()).limit(1)).scalar()
        prev = head or GENESIS_HASH
        body = {
            "event_id": str(uuid.uuid4()),
            "event_type": event_type,
            "tenant": tenant_month.tenant,
            "period": tenant_month.period,
            "subject_sha256": subject_sha256,
            "actor": actor,
            "recorded_at": datetime.now(timezone.utc).isoformat(timespec="microseconds"),
            "details": details,
        }
        text = canonical(body)
        event_hash = chain_hash(prev, text)
        seq = conn.execute(
            audit_events.insert().values(
                event_id=body["event_id"], event_type=event_type, tenant=tenant_month.tenant,
                period=tenant_month.period, subject_sha256=subject_sha256, body=text, prev_hash=prev,
                event_hash=event_hash,
            )
        ).inserted_primary_key[0]
        return LedgerEvent(seq, event_type, event_hash, body)

    def _publication(self, conn: Connection, identity: str) -> dict | None:
        row = conn.execute(select(publications).where(publications.c.identity == identity)).first()
        return None if row is None else dict(row._mapping)

    def _migrate(self) -> None:
        """Bring the schema to the newest migration. Concurrent first starts serialize on a lock or retry."""
        config = Config()
        config.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
        for attempt in range(5):
            try:
                with self.engine.begin() as conn:
                    if conn.dialect.name == "postgresql":
                        conn.execute(text("SELECT pg_advisory_xact_lock(hashtext('evidence_ledger_migrations'))"))
                    config.attributes["connection"] = conn
                    command.upgrade(config, "head")
                return
            except (OperationalError, IntegrityError, ProgrammingError):
                if attempt == 4:
                    raise
                time.sleep(0.2 * (attempt + 1))  # another process was creating the schema: look again

    def _transact(self, work):
        """Run ``work`` in one transaction, retrying when a concurrent writer took the chain head first."""
        for _ in range(_APPEND_ATTEMPTS):
            try:
                with self.engine.begin() as conn:
                    return work(conn)
            except IntegrityError as error:
                lost_race = error  # another writer took the chain head (or the identity): re-read and retry
            except OperationalError as error:
                raise EvidenceError("LEDGER_CONFLICT", f"ledger unavailable ({type(error.orig).__name__})") from None
        raise EvidenceError("LEDGER_CONFLICT", "could not append to the audit ledger under contention") from lost_race
