"""A job's next_attempt_at: when a document job that failed transiently (retry_wait) may be dispatched again.

Persisted with the transition that put the job back to `accepted` (and named in that `job.accepted` event), so
the dispatcher, the job status and a restarted process all see the same time. NULL for every other job, and for
tenant-month jobs, whose retries Dagster's RetryPolicy paces.

Revision ID: 0008 (numbered after 0007, which another branch adds; until both are merged it follows 0006)
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"


def upgrade() -> None:
    op.add_column("evidence_jobs", sa.Column("next_attempt_at", sa.Float))


def downgrade() -> None:
    raise NotImplementedError("the audit ledger is never downgraded")
