"""Webhook delivery in Dagster: a sensor drains the ledger's outbox on every tick.

Why here and not in the intake server: the server may run as several processes (and replicas) and must never wait
on a tenant's receiver, while the daemon runs sensors one at a time in one place the operator already watches: each
tick's outcome (delivered, to retry, dead) is in the UI, beside document_dispatch_sensor's. The sensor launches no
run: a delivery is one HTTP request, not work for a run. Claims on the outbox rows (ledger/outbox.py) keep it and
`evidence webhook deliver` from sending one delivery twice at once; a tick stops after a bounded number of attempts
and seconds, well within the daemon's limit on a sensor evaluation, and the next tick goes on.
"""

from dagster import DefaultSensorStatus, SensorEvaluationContext, SkipReason, sensor

from evidence_pipeline.defs.resources import EvidenceResource
from evidence_pipeline.webhooks.delivery import Deliverer

TICK_DELIVERIES, TICK_SECONDS = 200, 40.0


@sensor(
    minimum_interval_seconds=5,
    default_status=DefaultSensorStatus.RUNNING,
    description="Delivers due webhooks from the ledger's outbox, signed, with retries; launches no run.",
)
def webhook_delivery_sensor(context: SensorEvaluationContext, evidence: EvidenceResource):
    """Attempt the webhook deliveries that are due: signed, to the tenant's checked address, retried with backoff
    until delivered or dead (`evidence webhook deliveries` lists them)."""
    runtime = evidence.runtime()
    outcomes = Deliverer(runtime.outbox, runtime.settings).drain(TICK_DELIVERIES, TICK_SECONDS)
    if outcomes.get("dead"):
        context.log.warning(
            f"{outcomes['dead']} webhook deliveries are dead: `evidence webhook deliveries --state dead` lists them"
        )
    return SkipReason(
        f"delivered {outcomes.get('delivered', 0)}, to retry {outcomes.get('pending', 0)}, "
        f"dead {outcomes.get('dead', 0)}"
    )
