"""Managing actors, each change an admin-signed action through the gate (the first admin's is self-signed, once).

The args each action's signed request carries (and its event repeats, so an auditor can compare them offline):

    actor.bootstrap   {name, public_key}            the new admin, signed by that key
    actor.register    {name, roles, public_key}
    actor.roles       {name, roles}
    actor.key.add     {name, public_key}
    actor.key.revoke  {name, key_id}

Public keys are raw Ed25519 keys in 64 hex digits. No change may leave the deployment without an admin holding a
valid key (ACTOR_LAST_ADMIN), and no service key can become an actor's (KEY_MATERIAL_INVALID): pass the service's
public key ids as ``service_key_ids`` (keyfiles.service_key_ids).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace

from sqlalchemy import Connection

from evidence_pipeline.actors.authorize import ActionGate
from evidence_pipeline.actors.registry import Registry
from evidence_pipeline.actors.requests import ACTOR_NAME, key_id, public_key_from_hex
from evidence_pipeline.actors.roles import Action, Role
from evidence_pipeline.actors.verify import AuthorizedAction
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.models import ActorState, LedgerEvent

ARGS = {
    Action.ACTOR_BOOTSTRAP: {"name", "public_key"},
    Action.ACTOR_REGISTER: {"name", "roles", "public_key"},
    Action.ACTOR_ROLES: {"name", "roles"},
    Action.ACTOR_KEY_ADD: {"name", "public_key"},
    Action.ACTOR_KEY_REVOKE: {"name", "key_id"},
}


class ActorAdmin:
    def __init__(self, gate: ActionGate, service_key_ids: Collection[str] = ()):
        self.gate = gate
        self.actors = gate.actors  # the registry's tables and events
        self.service_key_ids = frozenset(service_key_ids)

    def bootstrap(self, envelope: object, public_key: str) -> LedgerEvent:
        """The first admin, by the request ``envelope`` signed with ``public_key`` (hex), the key it registers."""

        def perform(conn: Connection, _registry: Registry, authorized: AuthorizedAction) -> LedgerEvent:
            args = _args(authorized)
            return self.actors.register(
                conn,
                args["name"],
                by=authorized.actor,
                roles=[Role.ADMIN.value],
                key=self._key(args),
                authorization=authorized.envelope,
                bootstrap=True,
            )

        return self.gate.bootstrap(envelope, public_key, perform)

    def register(self, envelope: object) -> LedgerEvent:
        def perform(conn: Connection, registry: Registry, authorized: AuthorizedAction) -> LedgerEvent:
            args = _args(authorized)
            if registry.roles(args["name"]) is not None:
                raise EvidenceError(ReasonCode.ACTOR_EXISTS, f"actor {args['name']} is registered already")
            return self.actors.register(
                conn,
                args["name"],
                by=authorized.actor,
                roles=_roles(args),
                key=self._key(args),
                authorization=authorized.envelope,
            )

        return self.gate.run(envelope, Action.ACTOR_REGISTER, perform)

    def change_roles(self, envelope: object) -> LedgerEvent:
        def perform(conn: Connection, registry: Registry, authorized: AuthorizedAction) -> LedgerEvent:
            args = _args(authorized)
            name, roles = _known(registry, args["name"]), _roles(args)
            after = registry.snapshot()
            after[name] = replace(after[name], roles=tuple(roles))
            _keeps_an_admin(after)
            return self.actors.change_roles(
                conn, name, by=authorized.actor, roles=roles, authorization=authorized.envelope
            )

        return self.gate.run(envelope, Action.ACTOR_ROLES, perform)

    def add_key(self, envelope: object) -> LedgerEvent:
        def perform(conn: Connection, registry: Registry, authorized: AuthorizedAction) -> LedgerEvent:
            args = _args(authorized)
            name, key = _known(registry, args["name"]), self._key(args)
            if registry.key(name, key["key_id"]) is not None:
                raise EvidenceError(ReasonCode.ACTION_REQUEST_INVALID, f"{name} holds that key already")
            return self.actors.add_key(conn, name, by=authorized.actor, key=key, authorization=authorized.envelope)

        return self.gate.run(envelope, Action.ACTOR_KEY_ADD, perform)

    def revoke_key(self, envelope: object) -> LedgerEvent:
        def perform(conn: Connection, registry: Registry, authorized: AuthorizedAction) -> LedgerEvent:
            args = _args(authorized)
            name, revoked = _known(registry, args["name"]), args["key_id"]
            key = registry.key(name, revoked) if isinstance(revoked, str) else None
            if key is None:
                raise EvidenceError(ReasonCode.ACTOR_UNKNOWN, f"{name} holds no key of that id")
            if key.revoked_at is not None:
                raise EvidenceError(ReasonCode.ACTOR_KEY_REVOKED, f"the key was revoked at {key.revoked_at}")
            after = registry.snapshot()
            after[name] = after[name].with_key_revoked(revoked, "now")
            _keeps_an_admin(after)
            return self.actors.revoke_key(
                conn, name, by=authorized.actor, key_id=revoked, authorization=authorized.envelope
            )

        return self.gate.run(envelope, Action.ACTOR_KEY_REVOKE, perform)

    def _key(self, args: dict) -> dict:
        public = args["public_key"]
        kid = key_id(public_key_from_hex(public))
        if kid in self.service_key_ids:
            raise EvidenceError(ReasonCode.KEY_MATERIAL_INVALID, "a key of the service cannot be an actor's key")
        return {"key_id": kid, "public_key": public}


def _args(authorized: AuthorizedAction) -> dict:
    args = authorized.args
    if args.keys() != ARGS[authorized.action]:
        raise EvidenceError(
            ReasonCode.ACTION_REQUEST_INVALID, f"{authorized.action} takes {', '.join(sorted(ARGS[authorized.action]))}"
        )
    if not isinstance(args["name"], str) or not ACTOR_NAME.fullmatch(args["name"]):
        raise EvidenceError(ReasonCode.ACTION_REQUEST_INVALID, "an actor's name is a slug, like a tenant id")
    return args


def _roles(args: dict) -> list[str]:
    roles = args["roles"]
    if not isinstance(roles, list) or not all(isinstance(role, str) for role in roles) or not set(roles) <= set(Role):
        raise EvidenceError(ReasonCode.ACTION_REQUEST_INVALID, f"roles are a list of {', '.join(Role)}")
    return sorted(set(roles))


def _known(registry: Registry, name: str) -> str:
    if registry.roles(name) is None:
        raise EvidenceError(ReasonCode.ACTOR_UNKNOWN, f"no actor is named {name}")
    return name


def _keeps_an_admin(after: Mapping[str, ActorState]) -> None:
    if not Registry(after).admins_with_valid_keys():
        raise EvidenceError(ReasonCode.ACTOR_LAST_ADMIN, "the change would leave no admin with a valid key")
