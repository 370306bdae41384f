"""Indexes that keep the metrics' queries (evidence_pipeline/metrics) independent of the ledger's history.

- `evidence_jobs (state, updated_at)`: the jobs that ended in the last minutes (completions and failures per minute,
  retries) are a range of this index, however many jobs ended before.
- `evidence_jobs (state, last_reason)`: the dead letters (dead, or rejected by a failure code) are found by code,
  never by reading every rejected job (a tenant's refused documents are decisions, and they accumulate).
- `evidence_audit_events (event_type, seq)`: the newest event of a type (the latest `bundle.published`, for the
  append lag) is one index lookup; 0006's (event_type, tenant) orders by seq only within one tenant.

Revision ID: 0014
"""

from alembic import op

revision = "0014"
down_revision = "0012"


def upgrade() -> None:
    op.create_index("ix_evidence_jobs_state_updated_at", "evidence_jobs", ["state", "updated_at"])
    op.create_index("ix_evidence_jobs_state_last_reason", "evidence_jobs", ["state", "last_reason"])
    op.create_index("ix_evidence_audit_events_event_type_seq", "evidence_audit_events", ["event_type", "seq"])


def downgrade() -> None:
    raise NotImplementedError("the audit ledger is never downgraded")
