"""Job attempts: a replay opens a new attempt of the job, and the attempt it replays is kept as it ended.

A job (one `evidence_jobs` row: a tenant-month identity or a tenant's idempotency key) keeps its id, its immutable
input (source_sha256: the revision or request digest) and its pinned policy_version for life; what a replay
changes is the attempt working it. `evidence_jobs` gains the current attempt's id (`attempt_id`, NULL for a job's
first attempt, whose id is the job id) and the attempt it replays (`replay_of`). Every attempt that ended and was
replayed is one row of `evidence_job_attempts`, written in the transaction of its `job.replayed` event and never
changed (append-only, guarded by triggers): its state, reason, message and tries stay exactly as they ended, and it
names the attempt that replayed it and that event. The job's own row stays where dispatch, pages, batches, the
idempotency keys and the tenant-month pipeline find it, so they pick a replayed job up as before.

Revision ID: 0011
"""

import sqlalchemy as sa
from alembic import op

from evidence_pipeline.ledger import append_only

revision = "0011"
down_revision = "0010"


def upgrade() -> None:
    op.add_column("evidence_jobs", sa.Column("attempt_id", sa.String(64)))
    op.add_column("evidence_jobs", sa.Column("replay_of", sa.String(64)))
    op.create_table(
        "evidence_job_attempts",
        sa.Column("attempt_id", sa.String(64), primary_key=True),
        sa.Column("job_id", sa.String(64), sa.ForeignKey("evidence_jobs.job_id"), nullable=False, index=True),
        sa.Column("replay_of", sa.String(64)),  # the attempt this one replayed; NULL for the job's first
        sa.Column("input_sha256", sa.String(64), nullable=False),
        sa.Column("policy_version", sa.String(64), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),  # rejected or dead, as it ended
        sa.Column("reason", sa.String(64)),
        sa.Column("message", sa.String(500)),
        sa.Column("tries", sa.Integer, nullable=False),  # the leases it took (the job's attempts counter)
        sa.Column("opened_at", sa.Float, nullable=False),  # acceptance, or the replay that opened it
        sa.Column("ended_at", sa.Float, nullable=False),
        sa.Column("replayed_by", sa.String(64), nullable=False, unique=True),  # the attempt that replays it
        sa.Column("replay_seq", sa.Integer, sa.ForeignKey("evidence_audit_events.seq"), nullable=False, unique=True),
    )
    for statement in append_only.create_guards(op.get_bind().dialect.name, "evidence_job_attempts"):
        op.execute(statement)


def downgrade() -> None:
    raise NotImplementedError("the audit ledger is never downgraded")
