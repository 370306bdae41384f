"""Who authorized a request, checked against a registry at a moment: the same checks online and offline.

Online the moment is the service's clock and the registry is the ledger's tables as they stand; offline it is the
`recorded_at` of the event that stores the request and the registry folded from the events before it. In order: the
envelope parses, its payload unread (ACTION_UNSIGNED, ACTION_REQUEST_INVALID); a registered actor holds the key the
envelope names (ACTOR_UNKNOWN); the signature verifies with it over the payload bytes (ACTION_SIGNATURE_INVALID) -
only now is the request's text parsed (ACTION_REQUEST_INVALID, its key_id the envelope's); the request's actor holds
that key (ACTOR_UNKNOWN) - from here on the request is authenticated; the key is not revoked as of the moment
(ACTOR_KEY_REVOKED); the request was signed for this action (ACTION_REQUEST_INVALID); its time is within
``max_age_seconds`` of the moment, either way (ACTION_EXPIRED); a role of the actor permits the action
(ACTION_FORBIDDEN). The nonce is the ledger's to check (authorize.py), in the transaction that uses it.

A revocation is never backdated: it takes effect at its event, so a key revoked at T authorized what was recorded
before T and nothing after, whatever time a request claims.
"""

from __future__ import annotations

from datetime import datetime

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from evidence_pipeline.actors.registry import Registry
from evidence_pipeline.actors.requests import Sealed, SignedRequest, key_id, public_key_from_hex, sealed
from evidence_pipeline.actors.roles import Action, permits
from evidence_pipeline.errors import EvidenceError, ReasonCode


class ActionRefused(EvidenceError):
    """A refused request; ``request`` is set only when its signature verified (what the refusal may record)."""

    def __init__(self, code: ReasonCode | str, message: str, request: SignedRequest | None = None):
        super().__init__(code, message)
        self.request = request


class AuthorizedAction(SignedRequest):
    """A request whose checks passed (``verify``, ``verify_bootstrap``): who acted, with which key, what they asked.
    Its ``envelope`` is what the action's event stores in details["authorization"]."""

    @classmethod
    def of(cls, request: SignedRequest) -> AuthorizedAction:
        return cls(request.text, request.signature, request.body)


def verify(
    raw: object, registry: Registry, *, action: Action, now: datetime, max_age_seconds: float, legacy: bool = False
) -> AuthorizedAction:
    """The request in ``raw`` (an envelope) authorizes ``action`` at ``now``, or ActionRefused says why not.
    ``legacy``: also the form recorded before the DSSE envelope (requests.sealed), for the ledger's re-check."""
    envelope = _sealed(raw, legacy)
    public = registry.public_key(envelope.key_id)
    if public is None:
        raise ActionRefused(ReasonCode.ACTOR_UNKNOWN, "no registered actor holds the key the envelope names")
    request = _opened(envelope, public)
    key = registry.key(request.actor, request.key_id)
    if key is None:
        raise ActionRefused(ReasonCode.ACTOR_UNKNOWN, "the request's actor does not hold the key that signed it")
    if key.revoked_at is not None:
        raise ActionRefused(ReasonCode.ACTOR_KEY_REVOKED, f"the key was revoked at {key.revoked_at}", request)
    _fresh_and_for(request, action, now, max_age_seconds)
    if not permits(registry.roles(request.actor), action):
        raise ActionRefused(ReasonCode.ACTION_FORBIDDEN, f"no role of {request.actor} permits {action}", request)
    return AuthorizedAction.of(request)


def verify_bootstrap(
    raw: object, public_key: str, now: datetime, max_age_seconds: float, legacy: bool = False
) -> AuthorizedAction:
    """The first admin's request, signed by the key it registers, ``public_key`` (64 hex digits; given beside the
    envelope, as the bootstrap event records it: there is no registry to select it from yet): args {name,
    public_key}, the request's actor is that name, its key that key."""
    envelope = _sealed(raw, legacy)
    try:
        public = public_key_from_hex(public_key)
    except EvidenceError as error:
        raise ActionRefused(error.code, error.message) from None
    if envelope.key_id != key_id(public):
        raise ActionRefused(ReasonCode.ACTION_SIGNATURE_INVALID, "a bootstrap is signed by the key it registers")
    request = _opened(envelope, public)
    args = request.args
    if args.keys() != {"name", "public_key"} or args["name"] != request.actor or args["public_key"] != public_key:
        raise ActionRefused(
            ReasonCode.ACTION_REQUEST_INVALID,
            "a bootstrap takes {name, public_key}: its own name and the key that signed it",
        )
    _fresh_and_for(request, Action.ACTOR_BOOTSTRAP, now, max_age_seconds)
    return AuthorizedAction.of(request)


def _sealed(raw: object, legacy: bool) -> Sealed:
    try:
        return sealed(raw, legacy)
    except EvidenceError as error:
        raise ActionRefused(error.code, error.message) from None


def _opened(envelope: Sealed, public: Ed25519PublicKey) -> SignedRequest:
    """The request, parsed only once its signature verified with ``public``."""
    if not envelope.verifies(public):
        raise ActionRefused(ReasonCode.ACTION_SIGNATURE_INVALID, "the signature does not verify with the named key")
    try:
        return envelope.opened()
    except EvidenceError as error:
        raise ActionRefused(error.code, error.message) from None


def _fresh_and_for(request: SignedRequest, action: Action, now: datetime, max_age_seconds: float) -> None:
    if request.action != action:
        raise ActionRefused(
            ReasonCode.ACTION_REQUEST_INVALID, f"the request was signed for {request.action}, not {action}", request
        )
    if abs((now - request.time).total_seconds()) > max_age_seconds:
        raise ActionRefused(
            ReasonCode.ACTION_EXPIRED,
            f"the request's time is more than {max_age_seconds:g} s from the service's clock",
            request,
        )
