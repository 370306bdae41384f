"""Each tenant's stored document bytes as a running total, so that admission checks the quota in one row's
lookup. Summing the tenant's documents on every upload cost time in proportion to its history (23.5 ms at 100,000
documents on SQLite), twice an upload, once while holding the admissions' turn that every tenant waits for.

`evidence_tenant_storage` is state, not history: admission adds each new document's size in the transaction that
records it (the only writer of `evidence_documents`), so it always equals the sum it replaces, which this
migration computes once for the documents admitted before it.

Revision ID: 0015
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"


def upgrade() -> None:
    op.create_table(
        "evidence_tenant_storage",
        sa.Column("tenant", sa.String(63), primary_key=True),
        sa.Column("stored_bytes", sa.BigInteger, nullable=False),
    )
    op.execute(
        "INSERT INTO evidence_tenant_storage (tenant, stored_bytes) "
        "SELECT tenant, SUM(size) FROM evidence_documents GROUP BY tenant"
    )


def downgrade() -> None:
    raise NotImplementedError("the audit ledger is never downgraded")
