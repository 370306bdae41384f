"""Actors: registered identities with Ed25519 keys and roles, and the nonces of the signed requests they made.

Every row is a projection of a hashed event (`actor.bootstrapped`, `actor.registered`, `actor.roles_changed`,
`actor.key_added`, `actor.key_revoked`, or, for a nonce, the event of the action or of its refusal) and names it;
the events are the record (an auditor rebuilds the registry from them alone), the rows are what authorization
reads in a few indexed queries. Nothing here is ever updated or deleted: a role change is a new roles row (the
newest is in force), a revocation a new revocation row, so all five tables are append-only, guarded by triggers.

- `evidence_actors`: one row per actor name, naming the event that registered it;
- `evidence_actor_keys`: (actor, key id) -> the raw public key (hex) and when it became valid. A key id is the
  SHA-256 of the raw 32-byte public key, in full (64 hex digits). The same key may be registered under two names:
  they are then one identity (four-eyes, evidence_pipeline/actors/registry.py);
- `evidence_actor_key_revocations`: one row per revoked key of an actor;
- `evidence_actor_roles`: an actor's roles (canonical JSON list) as of an event;
- `evidence_action_nonces`: every nonce a signed request used, consumed in the transaction of its event, so the
  primary key refuses a second use even between concurrent writers.

Revision ID: 0010
"""

import sqlalchemy as sa
from alembic import op

from evidence_pipeline.ledger import append_only

revision = "0010"
down_revision = "0009"

TABLES = (
    "evidence_actors",
    "evidence_actor_keys",
    "evidence_actor_key_revocations",
    "evidence_actor_roles",
    "evidence_action_nonces",
)
_EVENT = "evidence_audit_events.seq"


def upgrade() -> None:
    op.create_table(
        "evidence_actors",
        sa.Column("actor", sa.String(63), primary_key=True),
        sa.Column("registered_seq", sa.Integer, sa.ForeignKey(_EVENT), nullable=False, unique=True),
    )
    op.create_table(
        "evidence_actor_keys",
        sa.Column("actor", sa.String(63), sa.ForeignKey("evidence_actors.actor"), primary_key=True),
        sa.Column("key_id", sa.String(64), primary_key=True),
        sa.Column("public_key", sa.String(64), nullable=False),  # raw Ed25519 public key, hex
        sa.Column("valid_from", sa.String(32), nullable=False),  # ISO 8601 UTC, as the event's details say
        sa.Column("added_seq", sa.Integer, sa.ForeignKey(_EVENT), nullable=False, unique=True),
    )
    op.create_index("ix_evidence_actor_keys_key_id", "evidence_actor_keys", ["key_id"])
    op.create_table(
        "evidence_actor_key_revocations",
        sa.Column("actor", sa.String(63), primary_key=True),
        sa.Column("key_id", sa.String(64), primary_key=True),
        sa.Column("revoked_at", sa.String(32), nullable=False),
        sa.Column("revoked_seq", sa.Integer, sa.ForeignKey(_EVENT), nullable=False, unique=True),
        sa.ForeignKeyConstraint(["actor", "key_id"], ["evidence_actor_keys.actor", "evidence_actor_keys.key_id"]),
    )
    op.create_table(
        "evidence_actor_roles",
        sa.Column("event_seq", sa.Integer, sa.ForeignKey(_EVENT), primary_key=True),
        sa.Column("actor", sa.String(63), sa.ForeignKey("evidence_actors.actor"), nullable=False, index=True),
        sa.Column("roles", sa.Text, nullable=False),
    )
    op.create_table(
        "evidence_action_nonces",
        sa.Column("nonce", sa.String(64), primary_key=True),
        sa.Column("actor", sa.String(63), nullable=False),
        sa.Column("key_id", sa.String(64), nullable=False),
        sa.Column("event_seq", sa.Integer, sa.ForeignKey(_EVENT), nullable=False, unique=True),
    )
    dialect = op.get_bind().dialect.name
    for table in TABLES:
        for statement in append_only.create_guards(dialect, table):
            op.execute(statement)


def downgrade() -> None:
    raise NotImplementedError("the audit ledger is never downgraded")
