"""Audit events and publications, append-only enforced by the database.

Revision ID: 0001
"""

import sqlalchemy as sa
from alembic import op

from evidence_pipeline.ledger import append_only

revision = "0001"
down_revision = None

TABLES = ("audit_events", "publications")

_POSTGRES_GUARD_FUNCTION = """
CREATE FUNCTION evidence_ledger_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'LEDGER_APPEND_ONLY: % rows cannot be changed', TG_TABLE_NAME;
END $$
"""


def upgrade() -> None:
    op.create_table(
        "audit_events",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("event_id", sa.String(36), nullable=False, unique=True),
        sa.Column("event_type", sa.String(64), nullable=False),
        sa.Column("tenant", sa.String(63), nullable=False, index=True),
        sa.Column("period", sa.String(7), nullable=False),
        sa.Column("subject_sha256", sa.String(64), nullable=False, index=True),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("prev_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("event_hash", sa.String(64), nullable=False, unique=True),
    )
    op.create_table(
        "publications",
        sa.Column("identity", sa.String(64), primary_key=True),
        sa.Column("tenant", sa.String(63), nullable=False),
        sa.Column("period", sa.String(7), nullable=False),
        sa.Column("bundle_key", sa.String(255), nullable=False, unique=True),
        sa.Column("source_sha256", sa.String(64), nullable=False),
        sa.Column("unsigned_sha256", sa.String(64), nullable=False),
        sa.Column("report_sha256", sa.String(64), nullable=False),
        sa.Column("statement_sha256", sa.String(64), nullable=False),
        sa.Column("renderer_version", sa.String(64), nullable=False),
        sa.Column("key_id", sa.String(64), nullable=False),
        sa.Column("event_seq", sa.Integer, sa.ForeignKey("audit_events.seq"), nullable=False, unique=True),
    )
    dialect = op.get_bind().dialect.name
    if dialect == "postgresql":
        op.execute(_POSTGRES_GUARD_FUNCTION)
    for table in TABLES:
        for statement in append_only.create_guards(dialect, table):
            op.execute(statement)


def downgrade() -> None:
    raise NotImplementedError("the audit ledger is append-only; it is never downgraded")
