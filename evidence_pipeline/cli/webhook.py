"""`evidence tenant webhook …` (a tenant's endpoint and secret, an operator's signed actions) and `evidence webhook …`
(the deliveries: list them, replay a dead one, drain the outbox now)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import click

from evidence_pipeline.cli.acting import gate, signed, signer_options
from evidence_pipeline.cli.options import check_tenant_id, json_option
from evidence_pipeline.cli.resources import load_settings, open_runtime

_SHOWN_ONCE = (
    "The secret is shown only this once; give it to the tenant now. Receivers verify `webhook-signature` "
    "with it (Standard Webhooks)."
)


@click.group("webhook")
def tenant_webhook() -> None:
    """A tenant's webhook: where its job, batch and evidence events are sent, signed with its secret."""


@tenant_webhook.command("set")
@click.argument("tenant_id", metavar="TENANT", callback=check_tenant_id)
@click.argument("url")
@signer_options
@json_option
def webhook_set(tenant_id: str, url: str, key: Path | None, actor: str | None, as_json: bool) -> None:
    """Send TENANT's events to URL, signed with a new secret, printed once (a secret set before stops signing
    now; `rotate` changes it gently). Every address of URL's host must lie in EVIDENCE_WEBHOOK_ALLOWED_NETWORKS."""
    from evidence_pipeline.actors.roles import Action
    from evidence_pipeline.webhooks.subscriptions import set_webhook

    settings = load_settings()
    envelope = signed(settings, key=key, actor=actor, action=Action.WEBHOOK_SET, args={"url": url}, tenant=tenant_id)
    done = set_webhook(gate(settings), open_runtime(settings).tokens, settings, url, envelope)
    if as_json:
        click.echo(json.dumps(done, indent=2))
        return
    click.echo(f"webhook of {tenant_id} set ({done['event_id']})")
    click.echo(f"secret id: {done['secret_id']}")
    click.echo(f"secret:    {done['secret']}")
    click.echo(_SHOWN_ONCE)


@tenant_webhook.command("rotate")
@click.argument("tenant_id", metavar="TENANT", callback=check_tenant_id)
@signer_options
@json_option
def webhook_rotate(tenant_id: str, key: Path | None, actor: str | None, as_json: bool) -> None:
    """Give TENANT's webhook a new secret, printed once; the current one keeps signing beside it for
    EVIDENCE_WEBHOOK_ROTATION_SECONDS, so the tenant's receivers can switch without losing a delivery."""
    from evidence_pipeline.actors.roles import Action
    from evidence_pipeline.webhooks.subscriptions import rotate_secret

    settings = load_settings()
    done = rotate_secret(
        gate(settings),
        open_runtime(settings).tokens,
        settings,
        signed(settings, key=key, actor=actor, action=Action.WEBHOOK_ROTATE, args={}, tenant=tenant_id),
    )
    if as_json:
        click.echo(json.dumps(done, indent=2))
        return
    click.echo(
        f"secret id: {done['secret_id']}  (the previous, {done['previous_secret_id']}, signs too until "
        f"{done['previous_until']})"
    )
    click.echo(f"secret:    {done['secret']}")
    click.echo(_SHOWN_ONCE)


@click.group("webhook")
def webhook() -> None:
    """Webhook deliveries: list them, replay a dead one, deliver what is due now."""


@webhook.command("deliveries")
@click.option("--tenant", callback=check_tenant_id, help="Only this tenant's deliveries.")
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice(["pending", "delivered", "dead", "cancelled"]),
    help="Only deliveries in this state (repeatable).",
)
@json_option
def webhook_deliveries(tenant: str | None, states: tuple[str, ...], as_json: bool) -> None:
    """Deliveries, oldest first: id, tenant, event, state, attempts and the last failure's code."""
    rows = open_runtime(load_settings()).outbox.deliveries(tenant, states)
    if as_json:
        click.echo(json.dumps([dataclasses.asdict(row) for row in rows], indent=2))
        return
    for row in rows:
        failed = f"  last={row.last_code}" + (f" ({row.last_status})" if row.last_status else "")
        click.echo(
            f"{row.delivery_id}  {row.state:<9} {row.tenant:<20} {row.event_type:<18} "
            f"attempts={row.attempts}"
            + (failed if row.last_code else "")
            + (f"  next={row.next_attempt_at}" if row.next_attempt_at else "")
        )
    click.echo(f"{len(rows)} delivery(ies)")


@webhook.command("replay")
@click.argument("delivery_id")
@click.option("--reason", required=True, help="Why it is sent again (recorded in the ledger).")
@signer_options
def webhook_replay(delivery_id: str, reason: str, key: Path | None, actor: str | None) -> None:
    """Send a dead delivery again, with a fresh budget and the same `webhook-id` and body (an operator's signed
    action, `webhook.replayed`)."""
    from evidence_pipeline.actors.roles import Action
    from evidence_pipeline.webhooks.subscriptions import replay_delivery

    settings = load_settings()
    ended = replay_delivery(
        gate(settings),
        signed(
            settings,
            key=key,
            actor=actor,
            action=Action.WEBHOOK_REPLAY,
            args={"delivery_id": delivery_id, "reason": reason},
        ),
    )
    click.echo(
        f"delivery {delivery_id} ({ended.tenant} {ended.event_type}) is pending again; it ended "
        f"{ended.last_code}; webhook_delivery_sensor (or `evidence webhook deliver`) sends it"
    )


@webhook.command("deliver")
@click.option(
    "--max",
    "max_deliveries",
    type=click.IntRange(1),
    default=100,
    show_default=True,
    help="At most this many attempts.",
)
@json_option
def webhook_deliver(max_deliveries: int, as_json: bool) -> None:
    """Attempt the deliveries that are due now, as webhook_delivery_sensor does on each tick."""
    from evidence_pipeline.webhooks.delivery import Deliverer

    settings = load_settings()
    outcomes = Deliverer(open_runtime(settings).outbox, settings).drain(max_deliveries)
    counts = {state: outcomes.get(state, 0) for state in ("delivered", "pending", "dead")}
    click.echo(
        json.dumps(counts, indent=2)
        if as_json
        else f"delivered {counts['delivered']}, to retry {counts['pending']}, dead {counts['dead']}"
    )
