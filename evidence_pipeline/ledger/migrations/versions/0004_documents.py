"""Intake: API tokens (hashes only), admitted documents, document jobs beside evidence_jobs, and batches.

A document job is an `evidence_jobs` row (same states, compare-and-swap transitions, fenced leases, retry budget,
replay and dead letters) with fidelity `document`, plus one `evidence_document_jobs` row that holds what only
document work has: the tenant's idempotency key, the request digest, the operation and its inputs, the dispatch
page and the outputs.

Revision ID: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"


def upgrade() -> None:
    op.create_table(
        "evidence_api_tokens",
        sa.Column("token_id", sa.String(32), primary_key=True),
        sa.Column("tenant", sa.String(63), nullable=False, index=True),
        sa.Column("token_sha256", sa.String(64), nullable=False, unique=True),  # never the token itself
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("revoked_at", sa.Float),
    )
    op.create_table(
        "evidence_documents",
        sa.Column("document_id", sa.String(64), primary_key=True),
        sa.Column("tenant", sa.String(63), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("media_type", sa.String(64), nullable=False),
        sa.Column("store_key", sa.String(255), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("event_seq", sa.Integer, sa.ForeignKey("evidence_audit_events.seq"), nullable=False, unique=True),
        sa.UniqueConstraint("tenant", "sha256", name="uq_evidence_documents_tenant_sha256"),
    )
    op.create_table(
        "evidence_document_jobs",
        sa.Column("job_id", sa.String(64), sa.ForeignKey("evidence_jobs.job_id"), primary_key=True),
        sa.Column("tenant", sa.String(63), nullable=False),
        sa.Column("batch_id", sa.String(64), nullable=False),  # "" for a job asked for on its own
        sa.Column("idempotency_key", sa.String(255), nullable=False),  # unique per tenant and batch
        sa.Column("request_sha256", sa.String(64), nullable=False),
        sa.Column("operation", sa.String(64), nullable=False),
        sa.Column("request", sa.Text, nullable=False),  # canonical JSON: inputs and options
        sa.Column("accepted_at", sa.Float, nullable=False),
        sa.Column("started_at", sa.Float),
        sa.Column("finished_at", sa.Float),
        sa.Column("page_id", sa.String(64), index=True),  # the dispatch page (a Dagster run key), once paged
        sa.Column("outputs", sa.Text),  # canonical JSON: artifact keys and digests, once succeeded
        sa.UniqueConstraint("tenant", "batch_id", "idempotency_key", name="uq_evidence_document_jobs_tenant_key"),
    )
    op.create_index("ix_evidence_document_jobs_batch_id", "evidence_document_jobs", ["batch_id"])
    op.create_table(
        "evidence_batches",
        sa.Column("batch_id", sa.String(64), primary_key=True),
        sa.Column("tenant", sa.String(63), nullable=False, index=True),
        sa.Column("manifest_sha256", sa.String(64), nullable=False),
        sa.Column("store_key", sa.String(255), nullable=False),  # the manifest, in the document store
        sa.Column("jobs", sa.Integer, nullable=False),
        sa.Column("dispatched", sa.Integer, nullable=False),  # child jobs created so far, in manifest order
        sa.Column("state", sa.String(16), nullable=False, index=True),  # open, dispatched, cancelled
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    raise NotImplementedError("the audit ledger is never downgraded")
