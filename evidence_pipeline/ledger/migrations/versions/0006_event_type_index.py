"""An index on the audit events' type and tenant.

Readers that want one kind of event scanned the whole table without it: at a year of 10,000 tenants (960,000
events, 1.3 GB of SQLite) `evidence stats` read it four times (8.5 s of CPU), and the registry sensor once a minute
(`tenant.offboarded`: 0.3 s, growing with the ledger). With the tenant in the index, one tenant's events of a type
are found directly, and in SQLite in ledger order (the rowid, `seq`, ends every index); see bench/README.md.

Revision ID: 0006
"""

from alembic import op

revision = "0006"
down_revision = "0005"


def upgrade() -> None:
    op.create_index("ix_evidence_audit_events_event_type_tenant", "evidence_audit_events", ["event_type", "tenant"])


def downgrade() -> None:
    raise NotImplementedError("the audit ledger is never downgraded")
