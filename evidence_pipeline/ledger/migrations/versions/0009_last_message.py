"""A job's last_message: what its last failure said, beside its code (last_reason).

The message of the EvidenceError that moved the job (codes and counts, never a value: messages never carry
secrets, paths or tenant data), shown on the job status and by `evidence dead-letter list`, and recorded in the
transition's event. NULL for a job that never failed, and for failures recorded before this migration.

Revision ID: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"


def upgrade() -> None:
    op.add_column("evidence_jobs", sa.Column("last_message", sa.String(500)))


def downgrade() -> None:
    raise NotImplementedError("the audit ledger is never downgraded")
