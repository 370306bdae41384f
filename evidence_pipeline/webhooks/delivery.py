"""The deliverer: drains the ledger's outbox (ledger/outbox.py), one claimed delivery at a time.

Each attempt resolves and checks the tenant's host again (targets.py), signs the stored body with the tenant's valid
secrets at the attempt's time, and POSTs it. A 2xx answer delivers it. A retryable failure (no answer, an answer
other than 2xx, a name that does not resolve) waits before the next attempt: the wait doubles from
EVIDENCE_WEBHOOK_RETRY_SECONDS up to EVIDENCE_WEBHOOK_RETRY_MAX_SECONDS, and each is jittered (half fixed, half
random) so that the deliveries of one outage do not return together. After EVIDENCE_WEBHOOK_MAX_ATTEMPTS, or at a
terminal failure (a host outside the allowed networks, a URL or webhook no longer valid), the delivery is dead until
an operator replays it. At least once: a deliverer that dies after the receiver answered and before recording it
sends that delivery again when its claim expires, with the same `webhook-id`, which receivers deduplicate on.

Every attempt is over by EVIDENCE_WEBHOOK_TIMEOUT_SECONDS, name resolution, connection, sending and the answer
together, whatever the receiver does (a byte trickled every second included: outbound.py), and its claim lasts
CLAIMED_ATTEMPTS times that, so no other deliverer takes the row while the attempt is open. Up to SENDERS attempts
run at once, never two of one tenant: a tenant whose receiver is slow holds one sender for one deadline at a time
while the other tenants' due deliveries go on, each tenant's oldest first.

It runs in the Dagster daemon as webhook_delivery_sensor (defs/webhooks.py) and, for operators without Dagster or
to drain at once, as `evidence webhook deliver`; claims keep the two from sending one delivery twice at once.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

from evidence_pipeline.config import Settings
from evidence_pipeline.errors import RETRYABLE, EvidenceError, ReasonCode
from evidence_pipeline.ledger.announcements import DEAD, DELIVERED, PENDING
from evidence_pipeline.ledger.outbox import Outbox
from evidence_pipeline.ledger.rows import Delivery
from evidence_pipeline.webhooks import sender, signing, targets

CLAIMED_ATTEMPTS = 4  # a claim outlasts one attempt's deadline this many times over (and the recording after it)
SENDERS = 8  # attempts in flight at once, each of another tenant


@dataclass
class Deliverer:
    outbox: Outbox
    settings: Settings
    clock: Callable[[], float] = time.time
    jitter: Callable[[], float] = random.random  # in [0, 1)

    def drain(self, max_deliveries: int = 100, max_seconds: float = 30.0) -> Counter:
        """Attempt due deliveries until none is due, ``max_deliveries`` were attempted or another attempt could not
        end within ``max_seconds`` (a sensor tick must end); the count of each outcome (delivered, pending: to
        retry, dead). A tenant's next delivery is taken once its attempt in flight ended."""
        outcomes: Counter = Counter()
        started, attempted = time.monotonic(), 0
        in_flight: dict[Future, str] = {}  # attempt -> its tenant
        with ThreadPoolExecutor(SENDERS, thread_name_prefix="webhook") as senders:
            while True:
                room = min(SENDERS - len(in_flight), max_deliveries - attempted)
                ends_in_time = time.monotonic() - started + self.settings.webhook_timeout_seconds <= max_seconds
                if room > 0 and (ends_in_time or not attempted):
                    for delivery in self.outbox.claim_due(
                        self.clock(), self.claim_seconds, room, busy=set(in_flight.values())
                    ):
                        in_flight[senders.submit(self.attempt, delivery)] = delivery.tenant
                        attempted += 1
                if not in_flight:
                    return outcomes
                done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
                for attempt in done:
                    del in_flight[attempt]
                    outcomes[attempt.result()] += 1

    @property
    def claim_seconds(self) -> float:
        return CLAIMED_ATTEMPTS * self.settings.webhook_timeout_seconds

    def attempt(self, delivery: Delivery) -> str:
        """One attempt at a claimed delivery, recorded; its new state."""
        status: int | None = None
        code: str | None = None
        try:
            status = self._send(delivery)
            if not 200 <= status < 300:
                code = ReasonCode.WEBHOOK_RECEIVER_FAILED
        except EvidenceError as error:
            code = error.code
        now = self.clock()
        tries = delivery.attempts + 1
        if code is None:
            state = DELIVERED
        elif code in RETRYABLE and tries < self.settings.webhook_max_attempts:
            state = PENDING
        else:
            state = DEAD
        self.outbox.record_attempt(
            delivery,
            state=state,
            code=code and str(code),
            status=status,
            next_attempt_at=now + self.backoff(tries) if state == PENDING else now,
        )
        return state

    def backoff(self, tries: int) -> float:
        """The wait after the ``tries``-th failed attempt: exponential, capped, half of it jittered."""
        wait = min(self.settings.webhook_retry_max_seconds, self.settings.webhook_retry_seconds * 2 ** (tries - 1))
        return wait / 2 + wait / 2 * self.jitter()

    def _send(self, delivery: Delivery) -> int:
        subscription = self.outbox.subscription(delivery.tenant)
        if subscription is None:
            raise EvidenceError(ReasonCode.WEBHOOK_NOT_SET, "the tenant's webhook was removed")
        deadline = time.monotonic() + self.settings.webhook_timeout_seconds  # the whole attempt's
        target = targets.parse_url(subscription.url)
        addresses = targets.allowed_addresses(
            target, self.settings.webhook_allowed_networks, self.settings.webhook_timeout_seconds
        )
        now = self.clock()
        secrets = [subscription.secret]
        if subscription.previous_secret and (subscription.previous_until or 0) > now:
            secrets.append(subscription.previous_secret)
        body = delivery.payload.encode("utf-8")
        headers = signing.headers(secrets, delivery.delivery_id, int(now), body)
        return sender.post(target, addresses[0], headers, body, max(0.0, deadline - time.monotonic()))
