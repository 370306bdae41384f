"""The gate every privileged action passes: verify the signed request, then act, in one ledger transaction.

``ActionGate.run(envelope, action, perform)`` verifies the request against the registry as the ledger's tables hold
it in that transaction (verify.py says the checks and their order), refuses a nonce already used (ACTION_REPLAYED),
runs ``perform(conn, authorized)``, which appends the action's event with ``authorized.envelope`` in
details["authorization"] and with the actor as the event's actor, and consumes the nonce against that event, all
in one transaction: the action, its record and the nonce commit together or not at all. Every event appended in it
first passes the auditor's own re-check (offline.Recheck, what `ledger verify` and packages run) on its body as it
will be stored, so an action the gate lets through never makes the ledger unverifiable. An action with nothing
left to do (a version approved already, tenants routed already) returns None: nothing is recorded and the nonce
stays unused, so the same request may act within its age should the state it found change back.

A refusal changes nothing and is recorded in a transaction of its own as an `action.refused` event (tenant "")
with its code, the action asked for and the SHA-256 of the envelope. Only a request whose signature verified with
a registered actor's key is recorded with its content (its envelope, under `authorization`, and the message), its
nonce is consumed so that it never acts later, and the event's actor is its actor; otherwise the actor is "" and
nothing of the request is kept: an unauthenticated caller never writes content into the ledger. A domain refusal of
``perform`` that concerns who acts (FOUR_EYES_REQUIRED, TEMPLATE_SELF_APPROVAL) is recorded the same way.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from datetime import datetime, timezone

from sqlalchemy import Connection

from evidence_pipeline.actors.offline import Recheck
from evidence_pipeline.actors.registry import Registry
from evidence_pipeline.actors.requests import digest
from evidence_pipeline.actors.roles import Action
from evidence_pipeline.actors.verify import ActionRefused, AuthorizedAction, verify, verify_bootstrap
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.ledger.actors import ActorLedger
from evidence_pipeline.models import LedgerEvent

RECORDED_DOMAIN_REFUSALS = frozenset({ReasonCode.FOUR_EYES_REQUIRED, ReasonCode.TEMPLATE_SELF_APPROVAL})

Perform = Callable[[Connection, Registry, AuthorizedAction], LedgerEvent | None]


class ActionGate:
    def __init__(self, actors: ActorLedger, max_age_seconds: float, clock: Callable[[], float] = time.time):
        self.ledger = actors.ledger  # the transactions the actions run in
        self.actors = actors
        self.max_age_seconds = max_age_seconds
        self._clock = clock

    def run(self, raw: object, action: Action, perform: Perform) -> LedgerEvent | None:
        """Authorize ``raw`` (the envelope as received) for ``action`` and ``perform`` it; returns its event (None:
        nothing to do, nothing recorded).
        ``perform`` also receives the registry of the transaction (for four-eyes between identities)."""

        def work(conn: Connection) -> LedgerEvent | None:
            registry = self._registry(conn)
            authorized = verify(raw, registry, action=action, now=self._now(), max_age_seconds=self.max_age_seconds)
            if self.actors.nonce_used(conn, authorized.nonce):
                raise ActionRefused(ReasonCode.ACTION_REPLAYED, "the request's nonce was used before", authorized)
            self._recheck_appends(conn, registry, authorized)
            try:
                event = perform(conn, registry, authorized)
            except EvidenceError as error:
                if error.code not in RECORDED_DOMAIN_REFUSALS:
                    raise
                raise ActionRefused(error.code, error.message, authorized) from None
            if event is None:
                return None
            _check_recorded(event, authorized)
            self.actors.consume_nonce(
                conn, authorized.nonce, actor=authorized.actor, key_id=authorized.key_id, event=event
            )
            return event

        return self._refusals_recorded(raw, action, work)

    def bootstrap(self, raw: object, public_key: str, perform: Perform) -> LedgerEvent:
        """The first admin's request, signed by ``public_key`` (verify.verify_bootstrap), once:
        ACTOR_ALREADY_BOOTSTRAPPED after that, before the envelope is read. Its refusals are recorded without
        content: a self-signed request authenticates no registered identity."""

        def work(conn: Connection) -> LedgerEvent:
            registry = self._registry(conn)
            if registry.bootstrapped:
                raise ActionRefused(ReasonCode.ACTOR_ALREADY_BOOTSTRAPPED, "the first admin was bootstrapped before")
            try:
                authorized = verify_bootstrap(raw, public_key, self._now(), self.max_age_seconds)
            except ActionRefused as refused:
                raise ActionRefused(refused.code, refused.message) from None
            self._recheck_appends(conn, registry, authorized)
            event = perform(conn, registry, authorized)
            _check_recorded(event, authorized)
            self.actors.consume_nonce(
                conn, authorized.nonce, actor=authorized.actor, key_id=authorized.key_id, event=event
            )
            return event

        return self._refusals_recorded(raw, Action.ACTOR_BOOTSTRAP, work)

    def _refusals_recorded(self, raw: object, action: Action, work: Callable[[Connection], LedgerEvent]):
        try:
            return self.ledger._transact(work)
        except ActionRefused as refused:
            self.ledger._transact(functools.partial(self._record_refusal, raw=raw, action=action, refused=refused))
            raise

    def _record_refusal(self, conn: Connection, raw: object, action: Action, refused: ActionRefused) -> None:
        request_sha256 = digest(raw)
        details = {"code": refused.code, "action": str(action), "request_sha256": request_sha256}
        request = refused.request
        if request is None:
            self.actors.refuse(conn, "", request_sha256, details)
            return
        event = self.actors.refuse(
            conn,
            request.actor,
            request_sha256,
            {**details, "message": refused.message, "authorization": request.envelope},
        )
        if not self.actors.nonce_used(conn, request.nonce):
            self.actors.consume_nonce(conn, request.nonce, actor=request.actor, key_id=request.key_id, event=event)

    def _recheck_appends(self, conn: Connection, registry: Registry, authorized: AuthorizedAction) -> None:
        """Each event ``perform`` appends passes the auditor's re-check (offline.Recheck) as it is about to be
        written, from the registry this transaction decided on: an event that `ledger verify` would find
        unauthorized (a tenant or actor that is not the request's, details that are not its args, ...) is
        refused, and its transaction appends nothing."""
        fold = Recheck(self.max_age_seconds, Registry(registry.snapshot()))

        def check(body: dict) -> None:
            try:
                fold.event(body)
            except EvidenceError as error:
                raise ActionRefused(error.code, error.message, authorized) from None

        self.ledger.check_appends(conn, check)

    def _registry(self, conn: Connection) -> Registry:
        """The registry this transaction decides on; an append after a concurrent commit makes it run again."""
        self.ledger.pin_chain_head(conn)
        return Registry(self.actors.snapshot(conn))

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._clock(), timezone.utc)


def _check_recorded(event: LedgerEvent, authorized: AuthorizedAction) -> None:
    """The promise of the gate: what acted is stored with the event that records it, under its actor's name."""
    if event.body["details"].get("authorization") != authorized.envelope or event.body["actor"] != authorized.actor:
        raise EvidenceError(
            ReasonCode.UNEXPECTED_ERROR,
            f"the event of {authorized.action} does not carry the request that authorized it",
        )
