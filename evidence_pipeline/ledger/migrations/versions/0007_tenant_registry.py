"""The tenant registry in the ledger's database, where every process of a deployment reads the same one.

One row per registered tenant: its `tenant.registered` event (which also orders the registry) and, once it is
offboarded, its `tenant.offboarded` event. Each row is a projection of those hashed events (`ledger verify` checks
it); the events are the record, the row is what the registry sensor reads in one indexed query.

Revision ID: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"


def upgrade() -> None:
    op.create_table(
        "evidence_tenants",
        sa.Column("tenant", sa.String(63), primary_key=True),
        sa.Column(
            "registered_seq", sa.Integer, sa.ForeignKey("evidence_audit_events.seq"), nullable=False, unique=True
        ),
        sa.Column("registered_at", sa.Float, nullable=False),
        sa.Column("offboarded_seq", sa.Integer, sa.ForeignKey("evidence_audit_events.seq"), unique=True),
    )


def downgrade() -> None:
    raise NotImplementedError("the audit ledger is never downgraded")
