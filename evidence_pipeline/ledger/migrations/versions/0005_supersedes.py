"""Corrections link: the tenant-month's publication claim, and an index to find its current bundle.

A bundle published for a tenant-month that already has one names the current one in its signed statement
(`supersedes`). That name is signed before the commit, so the publisher must hold the tenant-month while it signs
and commits: `evidence_publication_claims` has one row per tenant-month being published, naming the bundle
identity, the job and the lease token of the attempt that holds it, and the bundle it will supersede. The row
is operational state, like a job's lease expiry: no event records it, and the commit deletes it. The chain
itself lives in the hashed `bundle.published` events (`ledger verify` checks that it is linear).

Revision ID: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"


def upgrade() -> None:
    op.create_table(
        "evidence_publication_claims",
        sa.Column("tenant", sa.String(63), primary_key=True),
        sa.Column("period", sa.String(7), primary_key=True),
        sa.Column("identity", sa.String(64), nullable=False),
        sa.Column("job_id", sa.String(64), nullable=False),
        sa.Column("lease_token", sa.Integer, nullable=False),
        sa.Column("supersedes", sa.String(64)),  # the tenant-month's current identity when claimed, if any
        sa.Column("claimed_at", sa.Float, nullable=False),
    )
    op.create_index("ix_evidence_publications_tenant_period", "evidence_publications", ["tenant", "period"])


def downgrade() -> None:
    raise NotImplementedError("the audit ledger is never downgraded")
