"""Canary routing of contract reviews by ruleset version, and its rollback.

`evidence ruleset canary CANDIDATE --tenant T…` routes the new contract reviews of an explicitly chosen set of
tenants to CANDIDATE, a registered version other than the one in force: one `ruleset.canary` event per tenant
(the actor, the candidate and its digest, the version in force, the whole set). `evidence ruleset rollback` stops
routing: one `ruleset.rolled_back` event per routed tenant. Both are an operator's signed actions: each event stores
the one request that authorized the run of them (actors/roles.py PER_TENANT_ACTIONS). Nothing is deleted or
rewritten, and no job moves.

A tenant's route is its latest event of the two, read when a job is accepted (a batch's children: when the batch
is), which is where the ruleset is pinned: a job accepted under the canary keeps the candidate it pinned and
finishes under it after a rollback, and a job accepted after the rollback pins the version in force. A job that
names its ruleset in its options gets that one whatever the route.
"""

from __future__ import annotations

from sqlalchemy import Connection, select

from evidence_pipeline.actors.authorize import ActionGate
from evidence_pipeline.actors.registry import Registry
from evidence_pipeline.actors.roles import Action
from evidence_pipeline.actors.verify import AuthorizedAction
from evidence_pipeline.documents import ruleset as rulesets
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.ledger.db import classified_errors
from evidence_pipeline.ledger.ledger import Ledger, event_body
from evidence_pipeline.models import EventType, LedgerEvent, TenantMonth, current_month, validate_tenant_id

_ROUTE_EVENTS = (str(EventType.RULESET_CANARY), str(EventType.RULESET_ROLLED_BACK))


def start(gate: ActionGate, envelope: object) -> dict[str, str]:
    """Route the tenants' new contract reviews to the candidate, an operator's signed action (args {candidate,
    tenants}); returns every routed tenant -> its candidate. A tenant already routed to it is left as it is (when
    all are, nothing is recorded); another candidate must be rolled back first."""
    ledger, routes_now = gate.ledger, {}

    def perform(conn: Connection, _registry: Registry, authorized: AuthorizedAction) -> LedgerEvent | None:
        args = authorized.args
        if args.keys() != {"candidate", "tenants"} or not isinstance(args["tenants"], list):
            raise EvidenceError(ReasonCode.ACTION_REQUEST_INVALID, "ruleset.canary takes {candidate, tenants}")
        candidate, chosen = _chosen(args["candidate"], args["tenants"])
        routed = _routes(ledger, conn)
        other = sorted({version for version in routed.values() if version != candidate})
        if other:
            raise EvidenceError(
                ReasonCode.RULESET_CANARY_CONFLICT, f"tenants are routed to {other[0]}: roll it back first"
            )
        details = {
            "candidate": candidate,
            "candidate_sha256": rulesets.REGISTERED[candidate],
            "in_force": rulesets.IN_FORCE,
            "tenants": chosen,
            "authorization": authorized.envelope,
        }
        event = None
        for tenant in chosen:
            if tenant not in routed:
                event = ledger._append(
                    conn,
                    TenantMonth(tenant, current_month()),
                    EventType.RULESET_CANARY,
                    details["candidate_sha256"],
                    actor=authorized.actor,
                    details=details,
                )
        routes_now.update(_routes(ledger, conn))
        return event

    gate.run(envelope, Action.RULESET_CANARY, perform)
    return routes_now


def _chosen(candidate: object, tenants: list) -> tuple[str, list[str]]:
    if candidate not in rulesets.REGISTERED:
        raise EvidenceError(ReasonCode.RULESET_INVALID, f"ruleset {str(candidate)[:64]!r} is not registered")
    if candidate == rulesets.IN_FORCE:
        raise EvidenceError(ReasonCode.RULESET_CANARY_CONFLICT, f"{candidate} is the version in force already")
    chosen = sorted({validate_tenant_id(tenant) for tenant in tenants})
    if not chosen:
        raise EvidenceError(ReasonCode.RULESET_CANARY_CONFLICT, "a canary names at least one tenant")
    return candidate, chosen


def rollback(gate: ActionGate, envelope: object) -> dict[str, str]:
    """Stop routing every routed tenant to its candidate, an operator's signed action (args {}); returns the
    tenants it stopped -> their candidate (none: nothing is recorded)."""
    ledger, stopped = gate.ledger, {}

    def perform(conn: Connection, _registry: Registry, authorized: AuthorizedAction) -> LedgerEvent | None:
        if authorized.args:
            raise EvidenceError(ReasonCode.ACTION_REQUEST_INVALID, "ruleset.rollback takes no args")
        routed = _routes(ledger, conn)
        event = None
        for tenant, candidate in sorted(routed.items()):
            details = {"candidate": candidate, "in_force": rulesets.IN_FORCE, "authorization": authorized.envelope}
            event = ledger._append(
                conn,
                TenantMonth(tenant, current_month()),
                EventType.RULESET_ROLLED_BACK,
                rulesets.REGISTERED[rulesets.IN_FORCE],
                actor=authorized.actor,
                details=details,
            )
        stopped.update(routed)
        return event

    gate.run(envelope, Action.RULESET_ROLLBACK, perform)
    return stopped


def routes(ledger: Ledger) -> dict[str, str]:
    """Every tenant routed to a candidate now -> the candidate."""
    with classified_errors(), ledger.engine.connect() as conn:
        return _routes(ledger, conn)


def route(ledger: Ledger, tenant: str) -> dict[str, str]:
    """The `ruleset` option a new contract review of ``tenant`` gets when it names none: its canary's candidate
    while it is routed to one (and the candidate is still registered), else the version in force."""
    events = ledger.audit_events.c
    query = (
        select(events.body)
        .where(events.tenant == tenant, events.event_type.in_(_ROUTE_EVENTS))
        .order_by(events.seq.desc())
        .limit(1)
    )
    with classified_errors(), ledger.engine.connect() as conn:
        body = conn.execute(query).scalar()
    latest = event_body(body) if body is not None else {"event_type": None, "details": {"candidate": None}}
    candidate = latest["details"]["candidate"]
    routed = latest["event_type"] == EventType.RULESET_CANARY and candidate in rulesets.REGISTERED
    return {"ruleset": candidate if routed else rulesets.IN_FORCE}


def _routes(ledger: Ledger, conn: Connection) -> dict[str, str]:
    events = ledger.audit_events.c
    query = select(events.body).where(events.event_type.in_(_ROUTE_EVENTS)).order_by(events.seq)
    latest = {}
    for body in conn.execute(query).scalars():
        event = event_body(body)
        latest[event["tenant"]] = event
    return {
        tenant: event["details"]["candidate"]
        for tenant, event in latest.items()
        if event["event_type"] == EventType.RULESET_CANARY
    }
