"""Webhooks: a tenant's endpoint and signing secrets, and the outbox of deliveries announced by ledger events.

`evidence_webhooks` holds one row per tenant with a webhook: its URL, its current secret and, for a window after a
rotation, the previous one (the sender signs with both while the previous is valid). The secrets are kept as the
sender needs them, since HMAC signing needs the secret itself; no event, log or listing carries them (events name
a secret by its id, a prefix of its SHA-256). `config_seq` is the `webhook.configured` or `webhook.rotated` event
that last changed the row.

`evidence_webhook_outbox` is the transactional outbox: a row is written in the transaction of the ledger event it
announces (`event_seq`), so nothing is announced that did not commit and nothing that committed is forgotten. Its
`delivery_id` is the Standard Webhooks `webhook-id`, the same on every attempt; `payload` is the exact body sent
each time. The delivery state (pending, delivered, dead), attempts, next attempt and claim are operational state
that the deliverer updates: no event records them.

Revision ID: 0012
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"


def upgrade() -> None:
    op.create_table(
        "evidence_webhooks",
        sa.Column("tenant", sa.String(64), primary_key=True),
        sa.Column("url", sa.String(2048), nullable=False),
        sa.Column("secret", sa.String(128), nullable=False),
        sa.Column("previous_secret", sa.String(128)),
        sa.Column("previous_until", sa.Float),  # the previous secret signs too until then
        sa.Column("config_seq", sa.Integer, sa.ForeignKey("evidence_audit_events.seq"), nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_table(
        "evidence_webhook_outbox",
        sa.Column("delivery_id", sa.String(64), primary_key=True),
        sa.Column("tenant", sa.String(64), nullable=False, index=True),
        sa.Column("event_type", sa.String(64), nullable=False),
        sa.Column("event_seq", sa.Integer, sa.ForeignKey("evidence_audit_events.seq"), nullable=False),
        sa.Column("payload", sa.Text, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),  # pending, delivered, dead
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("next_attempt_at", sa.Float, nullable=False),
        sa.Column("claimed_until", sa.Float),  # a deliverer's claim on the row while it sends
        sa.Column("last_code", sa.String(64)),  # the reason code of the last failed attempt
        sa.Column("last_status", sa.Integer),  # the HTTP status the receiver answered last, if any
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_index("evidence_webhook_outbox_due", "evidence_webhook_outbox", ["state", "next_attempt_at"])


def downgrade() -> None:
    raise NotImplementedError("the audit ledger is never downgraded")
