"""Job records: one per tenant-month identity, moved by compare-and-swap transitions under fenced leases.

Revision ID: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"


def upgrade() -> None:
    # Dagster's schedule storage owns a table `jobs`, and Dagster may share the ledger's database. Where that table
    # already exists, ours is created under the name 0003 gives it (0003 then has nothing to rename); elsewhere it
    # is `jobs`, as it always was, and 0003 renames it.
    name = "evidence_jobs" if sa.inspect(op.get_bind()).has_table("jobs") else "jobs"
    op.create_table(
        name,
        sa.Column("job_id", sa.String(64), primary_key=True),
        sa.Column("tenant", sa.String(63), nullable=False, index=True),
        sa.Column("period", sa.String(7), nullable=False),
        sa.Column("source_sha256", sa.String(64), nullable=False),
        sa.Column("renderer_version", sa.String(64), nullable=False),
        sa.Column("policy_version", sa.String(64), nullable=False),
        sa.Column("fidelity", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=False, index=True),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("lease_token", sa.Integer, nullable=False),  # only ever increases: the fencing token
        sa.Column("lease_owner", sa.String(128)),
        sa.Column("lease_expires_at", sa.Float),
        sa.Column("budget_started_at", sa.Float, nullable=False),  # acceptance, or the latest replay
        sa.Column("last_reason", sa.String(64)),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    raise NotImplementedError("the audit ledger is never downgraded")
