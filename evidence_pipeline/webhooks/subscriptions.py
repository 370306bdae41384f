"""A tenant's webhook, set and rotated as an operator's signed actions, and a dead delivery replayed.

`webhook.set` (tenant T, args {url}) gives T a new secret and URL, recorded as `webhook.configured` with the URL's
SHA-256 and the secret's id; a secret set before stops signing at once (rotate for a gentle change).
`webhook.rotate` (tenant T, args {}) gives T a new secret and keeps the current one signing beside it until
EVIDENCE_WEBHOOK_ROTATION_SECONDS have passed (`webhook.rotated`). `webhook.replay` (args {delivery_id, reason})
makes a dead delivery pending again with a fresh budget (`webhook.replayed`). Each runs in the gate's transaction
(actors/authorize.py): the change, its event and the signed request commit together. The secret is returned to
the caller to show once; it is stored only in the webhook's row, which no event, log or listing repeats.
"""

from __future__ import annotations

import time

from sqlalchemy import Connection, delete, select

from evidence_pipeline.actors.authorize import ActionGate
from evidence_pipeline.actors.registry import Registry
from evidence_pipeline.actors.roles import Action
from evidence_pipeline.actors.verify import AuthorizedAction
from evidence_pipeline.canonical import sha256_text, utc_iso
from evidence_pipeline.config import Settings
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.ledger import announcements, outbox
from evidence_pipeline.ledger.rows import ListedDelivery
from evidence_pipeline.ledger.tokens import Tokens
from evidence_pipeline.models import EventType, LedgerEvent, TenantMonth, current_month
from evidence_pipeline.webhooks import signing, targets

MAX_REASON = 500


def set_webhook(gate: ActionGate, tokens: Tokens, settings: Settings, url: str, envelope: object) -> dict:
    """Set the webhook of the request's tenant to ``url`` (which the request's args name); returns {tenant,
    secret, secret_id, event_id}. The URL is checked first: WEBHOOK_URL_INVALID, WEBHOOK_HOST_REFUSED."""
    targets.allowed_addresses(
        targets.parse_url(url), settings.webhook_allowed_networks, settings.webhook_timeout_seconds
    )
    secret = signing.new_secret()
    done: dict[str, str] = {}

    def perform(conn: Connection, _registry: Registry, authorized: AuthorizedAction) -> LedgerEvent:
        tenant = _tenant_of(gate, tokens, conn, authorized)
        if authorized.args != {"url": url}:
            raise EvidenceError(ReasonCode.ACTION_REQUEST_INVALID, "webhook.set takes {url}: the URL checked")
        event = gate.ledger._append(
            conn,
            TenantMonth(tenant, current_month()),
            EventType.WEBHOOK_CONFIGURED,
            sha256_text(url),
            actor=authorized.actor,
            details={
                "url_sha256": sha256_text(url),
                "secret_id": signing.secret_id(secret),
                "authorization": authorized.envelope,
            },
        )
        conn.execute(delete(announcements.webhooks).where(announcements.webhooks.c.tenant == tenant))
        conn.execute(
            announcements.webhooks.insert().values(
                tenant=tenant,
                url=url,
                secret=secret,
                previous_secret=None,
                previous_until=None,
                config_seq=event.seq,
                updated_at=time.time(),
            )
        )
        done.update(tenant=tenant, event_id=event.body["event_id"])
        return event

    gate.run(envelope, Action.WEBHOOK_SET, perform)
    return done | {"secret": secret, "secret_id": signing.secret_id(secret)}


def rotate_secret(gate: ActionGate, tokens: Tokens, settings: Settings, envelope: object) -> dict:
    """Give the request's tenant a new secret; the current one signs too until the window ends. Returns {tenant,
    secret, secret_id, previous_secret_id, previous_until}."""
    secret = signing.new_secret()
    done: dict[str, str] = {}

    def perform(conn: Connection, _registry: Registry, authorized: AuthorizedAction) -> LedgerEvent:
        tenant = _tenant_of(gate, tokens, conn, authorized)
        if authorized.args:
            raise EvidenceError(ReasonCode.ACTION_REQUEST_INVALID, "webhook.rotate takes no arguments")
        current = announcements.subscription_in(conn, tenant)
        if current is None:
            raise EvidenceError(ReasonCode.WEBHOOK_NOT_SET, f"tenant {tenant} has no webhook to rotate")
        until = time.time() + settings.webhook_rotation_seconds
        details = {
            "secret_id": signing.secret_id(secret),
            "previous_secret_id": signing.secret_id(current.secret),
            "previous_until": utc_iso(until, timespec="seconds"),
        }
        event = gate.ledger._append(
            conn,
            TenantMonth(tenant, current_month()),
            EventType.WEBHOOK_ROTATED,
            sha256_text(current.url),
            actor=authorized.actor,
            details=details | {"authorization": authorized.envelope},
        )
        conn.execute(
            announcements.webhooks.update()
            .where(announcements.webhooks.c.tenant == tenant)
            .values(
                secret=secret,
                previous_secret=current.secret,
                previous_until=until,
                config_seq=event.seq,
                updated_at=time.time(),
            )
        )
        done.update(details, tenant=tenant)
        return event

    gate.run(envelope, Action.WEBHOOK_ROTATE, perform)
    return done | {"secret": secret}


def replay_delivery(gate: ActionGate, envelope: object) -> ListedDelivery:
    """Make the dead delivery the request names pending again; returns the delivery as it ended."""
    replayed: list[ListedDelivery] = []

    def perform(conn: Connection, _registry: Registry, authorized: AuthorizedAction) -> LedgerEvent:
        args = authorized.args
        if args.keys() != {"delivery_id", "reason"} or not all(
            isinstance(value, str) and 0 < len(value.strip()) <= MAX_REASON and value.isprintable()
            for value in args.values()
        ):
            raise EvidenceError(ReasonCode.ACTION_REQUEST_INVALID, "webhook.replay takes {delivery_id, reason}")
        ended = outbox.reopen(conn, args["delivery_id"], time.time())
        if ended is None or authorized.tenant not in (None, ended.tenant):
            raise EvidenceError(ReasonCode.WEBHOOK_DELIVERY_NOT_DEAD, "no dead webhook delivery has that id")
        event = gate.ledger._append(
            conn,
            TenantMonth(ended.tenant, current_month()),
            EventType.WEBHOOK_REPLAYED,
            sha256_text(args["delivery_id"]),
            actor=authorized.actor,
            details={
                "delivery_id": args["delivery_id"],
                "reason": args["reason"],
                "previous_code": ended.last_code,
                "authorization": authorized.envelope,
            },
        )
        replayed[:] = [ended]
        return event

    gate.run(envelope, Action.WEBHOOK_REPLAY, perform)
    return replayed[0]


def _tenant_of(gate: ActionGate, tokens: Tokens, conn: Connection, authorized: AuthorizedAction) -> str:
    if authorized.tenant is None:
        raise EvidenceError(ReasonCode.ACTION_REQUEST_INVALID, "a webhook action names its tenant")
    if tokens.offboarding(conn, authorized.tenant) is not None:
        raise EvidenceError(ReasonCode.TENANT_OFFBOARDED, f"tenant {authorized.tenant} is offboarded")
    registry = gate.ledger.tenants.c  # the registry's own row, in this transaction: no other event registers
    if conn.execute(select(registry.tenant).where(registry.tenant == authorized.tenant)).first() is None:
        raise EvidenceError(
            ReasonCode.TENANT_UNKNOWN,
            f"tenant {authorized.tenant} is not in the tenant registry: register it (`evidence tenant add`) first",
        )
    return authorized.tenant
