"""The actor registry's tables and events, and the nonces of signed requests (revision 0010 says what each holds).

Each write appends its event and inserts the rows that project it in the caller's writing transaction, so the row
and the event commit together or not at all; the caller (evidence_pipeline/actors/) has verified the signed
request that the event stores in details["authorization"]. Actor events belong to no tenant: their tenant is "",
which no tenant id can be, and their period is the month they were recorded in.

Checks that read and then append are safe under concurrency because every append names the chain head: of two
transactions that read the same registry, the second to append loses the race and runs again (Ledger._transact).
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Connection, MetaData, exists, select

from evidence_pipeline.canonical import sha256_text, utc_iso
from evidence_pipeline.ledger.db import classified_errors
from evidence_pipeline.ledger.ledger import Ledger
from evidence_pipeline.models import ActorKeyState, ActorState, Deployment, EventType, LedgerEvent

TABLES = (
    "evidence_actors",
    "evidence_actor_keys",
    "evidence_actor_key_revocations",
    "evidence_actor_roles",
    "evidence_action_nonces",
)


class ActorLedger:
    def __init__(self, ledger: Ledger):
        self.ledger = ledger
        tables = MetaData()
        with classified_errors():
            tables.reflect(ledger.engine, only=TABLES)
        self.actors, self.keys, self.revocations, self.roles, self.nonces = (tables.tables[name] for name in TABLES)

    def snapshot(self, conn: Connection) -> dict[str, ActorState]:
        """The registry as the tables hold it (what actors.registry.Registry folds from the events).

        In a writing transaction, call Ledger.pin_chain_head first: the queries below may each see a later commit
        (PostgreSQL reads committed data statement by statement), so rows of an actor registered after the first
        query are passed over, and a decision taken on such a mixed view never commits: its append loses the race
        to the commit it half saw."""
        actors = [row.actor for row in conn.execute(select(self.actors))]
        roles: dict[str, tuple[str, ...]] = {}
        for row in conn.execute(select(self.roles).order_by(self.roles.c.event_seq)):  # the newest row is in force
            roles[row.actor] = tuple(json.loads(row.roles))
        revoked = {(row.actor, row.key_id): row.revoked_at for row in conn.execute(select(self.revocations))}
        keys: dict[str, dict[str, ActorKeyState]] = {actor: {} for actor in actors}
        for row in conn.execute(select(self.keys)):
            if row.actor in keys:
                keys[row.actor][row.key_id] = ActorKeyState(
                    row.public_key, row.valid_from, revoked.get((row.actor, row.key_id))
                )
        return {actor: ActorState(roles.get(actor, ()), keys[actor]) for actor in actors}

    def read_snapshot(self) -> dict[str, ActorState]:
        with classified_errors(), self.ledger.engine.connect() as conn:
            return self.snapshot(conn)

    def nonce_used(self, conn: Connection, nonce: str) -> bool:
        return conn.execute(select(exists().where(self.nonces.c.nonce == nonce))).scalar_one()

    def consume_nonce(self, conn: Connection, nonce: str, *, actor: str, key_id: str, event: LedgerEvent) -> None:
        """A second use of ``nonce`` fails here, on the primary key, even when both transactions checked first."""
        conn.execute(self.nonces.insert().values(nonce=nonce, actor=actor, key_id=key_id, event_seq=event.seq))

    def register(
        self,
        conn: Connection,
        name: str,
        *,
        by: str,
        roles: list[str],
        key: dict[str, Any],
        authorization: dict[str, Any],
        bootstrap: bool = False,
    ) -> LedgerEvent:
        """``key``: {key_id, public_key}; it is valid from now."""
        kind = EventType.ACTOR_BOOTSTRAPPED if bootstrap else EventType.ACTOR_REGISTERED
        key = {**key, "valid_from": utc_iso(timespec="microseconds")}
        event = self._append(
            conn, kind, name, {"name": name, "roles": roles, "key": key}, by=by, authorization=authorization
        )
        conn.execute(self.actors.insert().values(actor=name, registered_seq=event.seq))
        self._insert_key(conn, name, key, event)
        conn.execute(self.roles.insert().values(event_seq=event.seq, actor=name, roles=json.dumps(roles)))
        return event

    def change_roles(
        self, conn: Connection, name: str, *, by: str, roles: list[str], authorization: dict[str, Any]
    ) -> LedgerEvent:
        event = self._append(
            conn,
            EventType.ACTOR_ROLES_CHANGED,
            name,
            {"name": name, "roles": roles},
            by=by,
            authorization=authorization,
        )
        conn.execute(self.roles.insert().values(event_seq=event.seq, actor=name, roles=json.dumps(roles)))
        return event

    def add_key(
        self, conn: Connection, name: str, *, by: str, key: dict[str, Any], authorization: dict[str, Any]
    ) -> LedgerEvent:
        key = {**key, "valid_from": utc_iso(timespec="microseconds")}
        event = self._append(
            conn, EventType.ACTOR_KEY_ADDED, name, {"name": name, "key": key}, by=by, authorization=authorization
        )
        self._insert_key(conn, name, key, event)
        return event

    def revoke_key(
        self, conn: Connection, name: str, *, by: str, key_id: str, authorization: dict[str, Any]
    ) -> LedgerEvent:
        revoked_at = utc_iso(timespec="microseconds")
        event = self._append(
            conn,
            EventType.ACTOR_KEY_REVOKED,
            name,
            {"name": name, "key_id": key_id, "revoked_at": revoked_at},
            by=by,
            authorization=authorization,
        )
        conn.execute(
            self.revocations.insert().values(actor=name, key_id=key_id, revoked_at=revoked_at, revoked_seq=event.seq)
        )
        return event

    def record_action(
        self,
        conn: Connection,
        kind: EventType,
        *,
        subject_sha256: str,
        by: str,
        details: dict[str, Any],
        authorization: dict[str, Any],
    ) -> LedgerEvent:
        """The event of an authorized action on the deployment as a whole (the service's keys): tenant ""."""
        return self.ledger._append(
            conn, Deployment(), kind, subject_sha256, actor=by, details={**details, "authorization": authorization}
        )

    def refuse(self, conn: Connection, by: str, subject_sha256: str, details: dict[str, Any]) -> LedgerEvent:
        """An `action.refused` event: ``details`` holds the request only when it was authenticated (authorize.py)."""
        return self.ledger._append(
            conn, Deployment(), EventType.ACTION_REFUSED, subject_sha256, actor=by, details=details
        )

    def _append(
        self,
        conn: Connection,
        kind: EventType,
        name: str,
        details: dict[str, Any],
        *,
        by: str,
        authorization: dict[str, Any],
    ) -> LedgerEvent:
        return self.ledger._append(
            conn, Deployment(), kind, sha256_text(name), actor=by, details={**details, "authorization": authorization}
        )

    def _insert_key(self, conn: Connection, name: str, key: dict[str, Any], event: LedgerEvent) -> None:
        conn.execute(
            self.keys.insert().values(
                actor=name,
                key_id=key["key_id"],
                public_key=key["public_key"],
                valid_from=key["valid_from"],
                added_seq=event.seq,
            )
        )
