"""Registering tenants and issuing and revoking their API tokens, as an operator's signed actions:

- `tenant.register`, args {tenants}: one `tenant.registered` event per new tenant, each storing the one request
  (actors/roles.py PER_TENANT_ACTIONS); nothing is recorded when every tenant was registered before;
- `token.issue`, the request's tenant, args {}: the token is made inside the gate's transaction, so it never enters
  the request or the ledger (only its sha256, in the tokens table, and its id, in `token.issued`);
- `token.revoke`, args {token_id}: a token revoked before records nothing.

The CLI's `evidence tenant add` and `evidence tenant token issue|revoke` and the demo call these functions.
"""

from __future__ import annotations

from sqlalchemy import Connection

from evidence_pipeline.actors.authorize import ActionGate
from evidence_pipeline.actors.registry import Registry
from evidence_pipeline.actors.roles import Action
from evidence_pipeline.actors.verify import AuthorizedAction
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.ledger.tenants import TenantRegistry
from evidence_pipeline.ledger.tokens import Tokens
from evidence_pipeline.models import LedgerEvent


def register_tenants(gate: ActionGate, tenants: TenantRegistry, envelope: object) -> dict[str, str]:
    """Every tenant of args.tenants -> registered, existing or offboarded (TenantRegistry.register)."""
    outcome: dict[str, str] = {}

    def perform(conn: Connection, _registry: Registry, authorized: AuthorizedAction) -> LedgerEvent | None:
        asked = authorized.args.get("tenants")
        if authorized.args.keys() != {"tenants"} or not isinstance(asked, list) or not asked:
            raise EvidenceError(ReasonCode.ACTION_REQUEST_INVALID, "tenant.register takes {tenants: [one or more]}")
        registered, event = tenants.register(conn, asked, authorized.actor, {"authorization": authorized.envelope})
        outcome.clear()
        outcome.update(registered)
        return event

    gate.run(envelope, Action.TENANT_REGISTER, perform)
    return outcome


def issue_token(gate: ActionGate, tokens: Tokens, envelope: object) -> tuple[str, str, str]:
    """A new API token for the request's tenant: (tenant, token id, token). The token is shown once."""
    issued: list[tuple[str, str, str]] = []

    def perform(conn: Connection, _registry: Registry, authorized: AuthorizedAction) -> LedgerEvent:
        if authorized.args or authorized.tenant is None:
            raise EvidenceError(ReasonCode.ACTION_REQUEST_INVALID, "token.issue names its tenant and takes no args")
        token_id, token, event = tokens.issue_token(
            conn, authorized.tenant, authorized.actor, {"authorization": authorized.envelope}
        )
        issued[:] = [(authorized.tenant, token_id, token)]  # the last run of the transaction is the one committed
        return event

    gate.run(envelope, Action.TOKEN_ISSUE, perform)
    return issued[0]


def revoke_token(gate: ActionGate, tokens: Tokens, envelope: object) -> str:
    """Revoke args.token_id; returns its tenant."""
    tenant = []

    def perform(conn: Connection, _registry: Registry, authorized: AuthorizedAction) -> LedgerEvent | None:
        token_id = authorized.args.get("token_id")
        if authorized.args.keys() != {"token_id"} or not isinstance(token_id, str):
            raise EvidenceError(ReasonCode.ACTION_REQUEST_INVALID, "token.revoke takes {token_id}")
        owner, event = tokens.revoke_token(conn, token_id, authorized.actor, {"authorization": authorized.envelope})
        tenant[:] = [owner]
        return event

    gate.run(envelope, Action.TOKEN_REVOKE, perform)
    return tenant[0]
