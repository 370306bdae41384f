"""What an auditor re-checks offline, from event bodies alone: who authorized each action, and that they could.

``recheck_events`` walks event bodies in ledger order (the whole ledger, or an audit package's events as long as it
holds every actor event, tenant ""), folds the actor registry as it goes, and for every event that stores a signed
request in details["authorization"] checks, against the registry as it stood just before that event and at the
event's `recorded_at`:

- the request verifies (verify.py: the signature over the payload bytes with the registered key the envelope
  names, before the payload is parsed; the actor held the key, the key not revoked, the request's time
  within ``max_age_seconds`` (and RECORDING_GRACE_SECONDS) of `recorded_at`, a role permitting the action) - the
  first admin's by its own key, the one its event registers. Events recorded before the DSSE envelope hold the
  older {request, signature} form (requests.py), whose key id is read from the text: it is still read here;
- it was signed for this event: its action records this event type (roles.RECORDED_AS), its actor is the event's
  actor and its tenant, if any, the event's tenant; an actor event's details repeat the request's args;
- its nonce authorized no earlier event (but for an action that records one event per tenant,
  roles.PER_TENANT_ACTIONS: its run of consecutive events, one per tenant).

The same checks run online: the action gate (authorize.py) gives every event it is about to append to a
``Recheck`` fold, so what it accepts is what this finds authorized. `action.refused` events are refusals, not
authorizations: they are passed over. Anything that does not hold is LEDGER_INVALID, naming the event and the code
of what failed. ``max_age_seconds`` is the deployment's EVIDENCE_ACTION_MAX_AGE_SECONDS (the default unless it was
changed).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from evidence_pipeline.actors.registry import ACTOR_EVENTS, Registry
from evidence_pipeline.actors.requests import key_id, parse_time, public_key_from_hex
from evidence_pipeline.actors.roles import ACTION_OF_EVENT, PER_TENANT_ACTIONS, Action
from evidence_pipeline.actors.verify import AuthorizedAction, verify, verify_bootstrap
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.models import EventType

DEFAULT_MAX_AGE_SECONDS = 300.0  # EVIDENCE_ACTION_MAX_AGE_SECONDS' default (config.py)
# The gate checks a request's age on its clock a moment before the event's recorded_at is taken, in the same
# transaction (which may wait for a lock): offline, the age may exceed the maximum by that much.
RECORDING_GRACE_SECONDS = 60.0
# The events whose details repeat their request's args: what was done is exactly what was signed.
ARGS_RECORDED = ACTOR_EVENTS | {EventType.PART_DECIDED}


@dataclass(frozen=True)
class Authorization:
    """Who authorized one event: what an auditor reports."""

    event_id: str
    event_type: str
    actor: str
    key_id: str
    action: str
    time: str  # the request's


def recheck_events(bodies: Iterable[dict], max_age_seconds: float = DEFAULT_MAX_AGE_SECONDS) -> list[Authorization]:
    """Every authorized event of ``bodies`` re-checked (module docstring); returns who authorized each, in order."""
    fold = Recheck(max_age_seconds)
    found = []
    for body in bodies:
        try:
            authorization = fold.event(body)
        except EvidenceError as error:
            if error.code == ReasonCode.LEDGER_INVALID:
                raise
            raise EvidenceError(
                ReasonCode.LEDGER_INVALID, f"audit event {body.get('event_id')}: {error.code}: {error.message}"
            ) from None
        if authorization is not None:
            found.append(authorization)
    return found


class Recheck:
    """The re-check as a fold over event bodies in ledger order, one at a time: offline over a ledger or a package
    from an empty registry, and online by the action gate (actors/authorize.py) over the events its transaction is
    about to append, from the registry that transaction reads. One function both ways, so that what the gate lets
    through the auditor finds authorized. ``event`` raises the code of the first check that fails."""

    def __init__(self, max_age_seconds: float = DEFAULT_MAX_AGE_SECONDS, registry: Registry | None = None):
        self.max_age_seconds = max_age_seconds
        self.registry = Registry() if registry is None else registry
        self._nonces: set[str] = set()
        self._run: tuple[str, str, set[str]] = ("", "", set())  # the last authorized nonce, type and run's tenants

    def event(self, body: dict) -> Authorization | None:
        """Who authorized ``body`` (None: an event no signed request authorizes), the registry folded past it."""
        found = None
        if body.get("event_type") != EventType.ACTION_REFUSED and "authorization" in body.get("details", {}):
            authorized = recheck(body, self.registry, self.max_age_seconds)
            nonce, run = authorized.nonce, self._run
            in_run = (
                authorized.action in PER_TENANT_ACTIONS
                and run[:2] == (nonce, body["event_type"])
                and body["tenant"] not in run[2]
            )
            if nonce in self._nonces and not in_run:
                raise EvidenceError(ReasonCode.ACTION_REPLAYED, "its request authorized an earlier event")
            self._nonces.add(nonce)
            self._run = (nonce, body["event_type"], (run[2] if in_run else set()) | {body["tenant"]})
            found = Authorization(
                body["event_id"],
                body["event_type"],
                authorized.actor,
                authorized.key_id,
                authorized.action,
                authorized.body["time"],
            )
        else:
            self._run = ("", "", set())
        if "authorization" not in body.get("details", {}) and body.get("event_type") in ACTOR_EVENTS:
            raise EvidenceError(
                ReasonCode.LEDGER_INVALID,
                f"audit event {body.get('event_id')}: an actor event without its signed request",
            )
        self.registry.apply(body)
        return found


def recheck(body: dict, registry: Registry, max_age_seconds: float = DEFAULT_MAX_AGE_SECONDS) -> AuthorizedAction:
    """The signed request stored with one event, checked against ``registry`` (as it stood just before the event)
    at the event's `recorded_at`; raises the code of the first check that fails."""
    action = ACTION_OF_EVENT.get(body["event_type"])
    if action is None:
        raise EvidenceError(ReasonCode.ACTION_REQUEST_INVALID, f"no action records {body['event_type']} events")
    try:
        at = parse_time(body["recorded_at"])
    except ValueError:
        raise EvidenceError(ReasonCode.LEDGER_INVALID, "the event's recorded_at is not a time") from None
    authorization, max_age = body["details"]["authorization"], max_age_seconds + RECORDING_GRACE_SECONDS
    if action == Action.ACTOR_BOOTSTRAP:  # self-signed by the key the event registers
        key = body["details"].get("key")
        public = key.get("public_key") if isinstance(key, dict) else None
        authorized = verify_bootstrap(authorization, public, at, max_age, legacy=True)
    else:
        authorized = verify(authorization, registry, action=action, now=at, max_age_seconds=max_age, legacy=True)
    if authorized.actor != body["actor"] or authorized.tenant not in (None, body["tenant"]):
        raise EvidenceError(ReasonCode.ACTION_REQUEST_INVALID, "the event's actor or tenant is not the request's")
    if body["event_type"] in ARGS_RECORDED and not _details_repeat_args(body["details"], authorized):
        raise EvidenceError(ReasonCode.ACTION_REQUEST_INVALID, "the event's details differ from the request's args")
    return authorized


def _details_repeat_args(details: dict, authorized: AuthorizedAction) -> bool:
    """The event does what its request asked: its details hold the args (a public key as its key entry)."""
    args = dict(authorized.args)
    if "public_key" in args:
        public = args.pop("public_key")
        key = details.get("key") or {}
        if key.get("public_key") != public or key.get("key_id") != key_id(public_key_from_hex(public)):
            return False
    if authorized.action == Action.ACTOR_BOOTSTRAP:
        args["roles"] = ["admin"]
    if "roles" in args:
        args["roles"] = sorted(set(args["roles"]))
    return all(details.get(name) == value for name, value in args.items())
