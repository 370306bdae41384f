"""Rotating and revoking the service's signing keys, as an admin's signed actions (`keys.rotate`, args {};
`keys.revoke`, args {key_id, reason, at}: `at` an ISO 8601 time or null for now).

The keyring document is the keys' own record (signed by the trust root, published put-once); the ledger records
who authorized it in a `keys.rotated` / `keys.revoked` event (tenant "") that stores the signed request and names
the keyring document it published. The keys directory is not the ledger's database: the change is made inside the
gate's transaction, after the request is verified and before its event is appended, and made once even when the
transaction runs again; should the append then fail, the keyring changed without its ledger record, which the
keyring document's sequence shows (the next authorized change names a later one).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from sqlalchemy import Connection

from evidence_pipeline.actors.authorize import ActionGate
from evidence_pipeline.actors.registry import Registry
from evidence_pipeline.actors.roles import Action
from evidence_pipeline.actors.verify import AuthorizedAction
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.models import EventType, LedgerEvent
from evidence_pipeline.signing.keyring_document import KeyringDocument, keyring_key
from evidence_pipeline.signing.rotation import KeyDirectory


def rotate_keys(
    gate: ActionGate, keys: KeyDirectory, envelope: object, root_key: Path | None = None
) -> KeyringDocument:
    """A new generation made active now (KeyDirectory.rotate), authorized by the admin's signed request."""

    def change(args: dict) -> tuple[KeyringDocument, bool]:
        if args:
            raise EvidenceError(ReasonCode.ACTION_REQUEST_INVALID, "keys.rotate takes no args")
        return keys.rotate(root_key), True

    return _authorized_change(gate, envelope, Action.KEYS_ROTATE, EventType.KEYS_ROTATED, change)[0]


def revoke_keys(
    gate: ActionGate, keys: KeyDirectory, envelope: object, root_key: Path | None = None
) -> tuple[KeyringDocument, bool]:
    """The generation holding args.key_id revoked as of args.at (KeyDirectory.revoke): (the keyring, rotated)."""

    def change(args: dict) -> tuple[KeyringDocument, bool]:
        if args.keys() != {"key_id", "reason", "at"} or not isinstance(args["key_id"], str):
            raise EvidenceError(ReasonCode.ACTION_REQUEST_INVALID, "keys.revoke takes {key_id, reason, at}")
        try:
            at = None if args["at"] is None else datetime.fromisoformat(args["at"])
        except (TypeError, ValueError):
            raise EvidenceError(ReasonCode.ACTION_REQUEST_INVALID, "keys.revoke's at is an ISO 8601 time") from None
        return keys.revoke(args["key_id"], args["reason"], at, root_key)

    return _authorized_change(gate, envelope, Action.KEYS_REVOKE, EventType.KEYS_REVOKED, change)


def _authorized_change(
    gate: ActionGate,
    envelope: object,
    action: Action,
    kind: EventType,
    change: Callable[[dict], tuple[KeyringDocument, bool]],
) -> tuple[KeyringDocument, bool]:
    made = []  # the change, made once however often the transaction runs

    def perform(conn: Connection, _registry: Registry, authorized: AuthorizedAction) -> LedgerEvent:
        # The event is the deployment's (tenant ""): the gate's re-check would refuse a request naming a tenant
        # only at the append, after the keyring was changed outside this transaction.
        if authorized.tenant is not None:
            raise EvidenceError(ReasonCode.ACTION_REQUEST_INVALID, f"{authorized.action} names no tenant")
        if not made:
            made.append(change(authorized.args))
        document = made[0][0]
        payload = document.payload()
        details = {
            "keyring": keyring_key(document.sequence),
            "sequence": document.sequence,
            "active_generation": document.active.generation,
            **authorized.args,
        }
        return gate.actors.record_action(
            conn,
            kind,
            subject_sha256=hashlib.sha256(payload).hexdigest(),
            by=authorized.actor,
            details=details,
            authorization=authorized.envelope,
        )

    gate.run(envelope, action, perform)
    return made[0]
