"""SQLAlchemy schema of the ledger, for queries. Tables are created by the migrations in migrations/versions.

Event bodies are canonical JSON text (never jsonb: it reorders keys and would break the hashes).
"""

from __future__ import annotations

from sqlalchemy import Column, Float, ForeignKey, Integer, MetaData, String, Table, Text

metadata = MetaData()

audit_events = Table(
    "audit_events",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("event_id", String(36), nullable=False, unique=True),
    Column("event_type", String(64), nullable=False),
    Column("tenant", String(63), nullable=False, index=True),
    Column("period", String(7), nullable=False),
    Column("subject_sha256", String(64), nullable=False, index=True),  # the digest the event is about
    Column("body", Text, nullable=False),  # canonical JSON of the whole event: what the hash covers
    # UNIQUE(prev_hash): two writers that read the same head cannot both append; the loser retries.
    Column("prev_hash", String(64), nullable=False, unique=True),
    Column("event_hash", String(64), nullable=False, unique=True),
)

publications = Table(
    "publications",
    metadata,
    Column("identity", String(64), primary_key=True),
    Column("tenant", String(63), nullable=False),
    Column("period", String(7), nullable=False),
    Column("bundle_key", String(255), nullable=False, unique=True),
    Column("source_sha256", String(64), nullable=False),
    Column("unsigned_sha256", String(64), nullable=False),
    Column("report_sha256", String(64), nullable=False),
    Column("statement_sha256", String(64), nullable=False),
    Column("renderer_version", String(64), nullable=False),
    Column("key_id", String(64), nullable=False),
    Column("event_seq", Integer, ForeignKey("audit_events.seq"), nullable=False, unique=True),
)

jobs = Table(
    "jobs",
    metadata,
    Column("job_id", String(64), primary_key=True),
    Column("tenant", String(63), nullable=False),
    Column("period", String(7), nullable=False),
    Column("source_sha256", String(64), nullable=False),
    Column("renderer_version", String(64), nullable=False),
    Column("policy_version", String(64), nullable=False),
    Column("fidelity", String(16), nullable=False),
    Column("state", String(16), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("lease_token", Integer, nullable=False),
    Column("lease_owner", String(128)),
    Column("lease_expires_at", Float),
    Column("next_attempt_at", Float),
    Column("last_reason", String(64)),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
)
