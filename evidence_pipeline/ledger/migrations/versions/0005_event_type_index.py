"""An index on the audit events' type, in ledger order.

Readers that want one kind of event (`evidence stats`: stages.timed and the admissions; the registry sensor, every
minute: tenant.offboarded) scanned the whole table without it: at a year of 10,000 tenants (960,000 events, 1.3 GB
of SQLite) `evidence stats` read the table four times (bench/scale.py).

Revision ID: 0005
"""

from alembic import op

revision = "0005"
down_revision = "0004"


def upgrade() -> None:
    op.create_index("ix_evidence_audit_events_event_type_seq", "evidence_audit_events", ["event_type", "seq"])


def downgrade() -> None:
    raise NotImplementedError("the audit ledger is never downgraded")
