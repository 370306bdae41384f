"""The actor registry as a value: who holds which keys and roles, as of a point in the ledger.

Built two ways that must agree: from the ledger's actor tables (what authorization reads, ledger/actors.py) and by
folding the actor events in ledger order (what an auditor does offline, from events alone). Both give the same
``snapshot()``: {actor: ActorState(roles, keys: {key_id: ActorKeyState(public_key, valid_from, revoked_at)})}
(models.py).

The event details it folds (written by ledger/actors.py), each beside the ``authorization`` that made it:
`actor.bootstrapped` and `actor.registered` {name, roles, key}, `actor.roles_changed` {name, roles},
`actor.key_added` {name, key}, `actor.key_revoked` {name, key_id, revoked_at}; a key is {key_id, public_key,
valid_from}.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from cryptography.hazmat.primitives.asymmetric import ed25519

from evidence_pipeline.actors.requests import key_id, public_key_from_hex
from evidence_pipeline.actors.roles import Role
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.models import ActorKeyState, ActorState, EventType

ACTOR_EVENTS = frozenset(
    {
        EventType.ACTOR_BOOTSTRAPPED,
        EventType.ACTOR_REGISTERED,
        EventType.ACTOR_ROLES_CHANGED,
        EventType.ACTOR_KEY_ADDED,
        EventType.ACTOR_KEY_REVOKED,
    }
)


@dataclass(frozen=True)
class ActorKey:
    actor: str
    key_id: str
    public_key: str  # raw Ed25519 public key, hex
    valid_from: str
    revoked_at: str | None

    @property
    def public(self) -> ed25519.Ed25519PublicKey:
        return public_key_from_hex(self.public_key)


class Registry:
    def __init__(self, snapshot: Mapping[str, ActorState] | None = None):
        self._actors: dict[str, ActorState] = dict(snapshot or {})  # each state is frozen: a change replaces it

    @classmethod
    def from_events(cls, bodies: Iterable[dict]) -> Registry:
        """The registry after ``bodies`` (event bodies in ledger order; events of other types are passed over)."""
        registry = cls()
        for body in bodies:
            registry.apply(body)
        return registry

    def snapshot(self) -> dict[str, ActorState]:
        return dict(self._actors)

    @property
    def bootstrapped(self) -> bool:
        """Every actor but the first is registered by an admin: there is one once the first admin is."""
        return bool(self._actors)

    def roles(self, actor: str) -> frozenset[str] | None:
        """The actor's roles, or None when no actor has that name."""
        found = self._actors.get(actor)
        return None if found is None else frozenset(found.roles)

    def key(self, actor: str, key_id_: str) -> ActorKey | None:
        state = self._actors.get(actor)
        found = None if state is None else state.keys.get(key_id_)
        return None if found is None else _actor_key(actor, key_id_, found)

    def public_key(self, key_id_: str) -> ed25519.Ed25519PublicKey | None:
        """The key of that id, whichever actor holds it, revoked or not (an id names the key's bytes): what a
        signature is checked with before the request it signs is read."""
        for found in self._actors.values():
            if key_id_ in found.keys:
                return public_key_from_hex(found.keys[key_id_].public_key)
        return None

    def keys_of(self, actor: str) -> list[ActorKey]:
        state = self._actors.get(actor)
        return [] if state is None else [_actor_key(actor, kid, key) for kid, key in state.keys.items()]

    def same_identity(self, first: str, second: str) -> bool:
        """Two names are one identity when they are equal or hold (or held) a public key in common: four-eyes is
        between identities, not between names."""
        if first == second:
            return True
        return bool({k.key_id for k in self.keys_of(first)} & {k.key_id for k in self.keys_of(second)})

    def require_other_identity(self, author: str, approver: str) -> None:
        if self.same_identity(author, approver):
            raise EvidenceError(
                ReasonCode.FOUR_EYES_REQUIRED,
                "the approver must be another identity than the author (another name and key)",
            )

    def admins_with_valid_keys(self) -> set[str]:
        return {
            actor
            for actor, found in self._actors.items()
            if Role.ADMIN in found.roles and any(key.revoked_at is None for key in found.keys.values())
        }

    def apply(self, body: dict) -> None:
        """Fold one event (an actor event; any other is passed over). An event that does not fit the registry as it
        stands (an unknown actor, a second bootstrap, a revoked key revoked again) is LEDGER_INVALID."""
        kind, details = body.get("event_type"), body.get("details")
        if kind not in ACTOR_EVENTS:
            return
        try:
            self._apply(kind, details)
        except (KeyError, TypeError, AttributeError, EvidenceError):
            raise EvidenceError(
                ReasonCode.LEDGER_INVALID,
                f"audit event {body.get('event_id')} ({kind}) does not fit the actor registry",
            ) from None

    def _apply(self, kind: str, details: dict) -> None:
        name = details["name"]
        if kind in (EventType.ACTOR_BOOTSTRAPPED, EventType.ACTOR_REGISTERED):
            if name in self._actors or (kind == EventType.ACTOR_BOOTSTRAPPED) == self.bootstrapped:
                raise KeyError(name)  # registered twice, bootstrapped twice, or registered before any bootstrap
            self._actors[name] = ActorState(roles=_roles(details["roles"]), keys={})
            self._add_key(name, details["key"])
            return
        actor = self._actors[name]
        if kind == EventType.ACTOR_ROLES_CHANGED:
            self._actors[name] = replace(actor, roles=_roles(details["roles"]))
        elif kind == EventType.ACTOR_KEY_ADDED:
            self._add_key(name, details["key"])
        else:
            if actor.keys[details["key_id"]].revoked_at is not None or not isinstance(details["revoked_at"], str):
                raise KeyError(details["key_id"])
            self._actors[name] = actor.with_key_revoked(details["key_id"], details["revoked_at"])

    def _add_key(self, actor: str, key: dict) -> None:
        public = key["public_key"]
        if key["key_id"] != key_id(public_key_from_hex(public)) or key["key_id"] in self._actors[actor].keys:
            raise KeyError(key["key_id"])  # a key id names its key's bytes, and an actor holds a key once
        if not isinstance(key["valid_from"], str):
            raise TypeError(key["valid_from"])
        self._actors[actor] = self._actors[actor].with_key(
            key["key_id"], ActorKeyState(public, key["valid_from"], None)
        )


def _actor_key(actor: str, key_id_: str, key: ActorKeyState) -> ActorKey:
    return ActorKey(actor, key_id_, key.public_key, key.valid_from, key.revoked_at)


def _roles(roles: list) -> tuple[str, ...]:
    if not isinstance(roles, list) or not set(roles) <= set(Role):
        raise TypeError(roles)
    return tuple(sorted(set(roles)))
