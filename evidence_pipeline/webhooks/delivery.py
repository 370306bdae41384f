"""The deliverer: drains the ledger's outbox (ledger/outbox.py), one claimed delivery at a time.

Each attempt resolves and checks the tenant's host again (targets.py), signs the stored body with the tenant's valid
secrets at the attempt's time, and POSTs it. A 2xx answer delivers it. A retryable failure (no answer, an answer
other than 2xx, a name that does not resolve) waits before the next attempt: the wait doubles from
EVIDENCE_WEBHOOK_RETRY_SECONDS up to EVIDENCE_WEBHOOK_RETRY_MAX_SECONDS, and each is jittered (half fixed, half
random) so that the deliveries of one outage do not return together. After EVIDENCE_WEBHOOK_MAX_ATTEMPTS, or at a
terminal failure (a host outside the allowed networks, a URL or webhook no longer valid), the delivery is dead until
an operator replays it. At least once: a deliverer that dies after the receiver answered and before recording it
sends that delivery again when its claim expires, with the same `webhook-id`, which receivers deduplicate on.

It runs in the Dagster daemon as webhook_delivery_sensor (defs/webhooks.py) and, for operators without Dagster or
to drain at once, as `evidence webhook deliver`; claims keep the two from sending one delivery twice at once.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from evidence_pipeline.config import Settings
from evidence_pipeline.errors import RETRYABLE, EvidenceError, ReasonCode
from evidence_pipeline.ledger import Ledger
from evidence_pipeline.ledger.outbox import DEAD, DELIVERED, PENDING, Outbox
from evidence_pipeline.webhooks import sender, signing, targets

CLAIMED_ATTEMPTS = 4  # a claim outlasts one attempt (connect, send, read) this many times over


@dataclass
class Deliverer:
    ledger: Ledger
    settings: Settings
    clock: Callable[[], float] = time.time
    jitter: Callable[[], float] = random.random  # in [0, 1)
    outbox: Outbox = field(init=False)

    def __post_init__(self) -> None:
        self.outbox = Outbox(self.ledger)

    def drain(self, max_deliveries: int = 100, max_seconds: float = 30.0) -> Counter:
        """Attempt due deliveries until none is due, ``max_deliveries`` were attempted or ``max_seconds`` passed
        (a sensor tick must end); the count of each outcome (delivered, pending: to retry, dead)."""
        outcomes: Counter = Counter()
        started = time.monotonic()
        while sum(outcomes.values()) < max_deliveries and time.monotonic() - started < max_seconds:
            claimed = self.outbox.claim_due(self.clock(), self.claim_seconds, 1)
            if not claimed:
                break
            outcomes[self.attempt(claimed[0])] += 1
        return outcomes

    @property
    def claim_seconds(self) -> float:
        return CLAIMED_ATTEMPTS * self.settings.webhook_timeout_seconds

    def attempt(self, delivery: dict) -> str:
        """One attempt at a claimed delivery, recorded; its new state."""
        status, code = None, None
        try:
            status = self._send(delivery)
            if not 200 <= status < 300:
                code = ReasonCode.WEBHOOK_RECEIVER_FAILED
        except EvidenceError as error:
            code = error.code
        now = self.clock()
        tries = delivery["attempts"] + 1
        if code is None:
            state = DELIVERED
        elif code in RETRYABLE and tries < self.settings.webhook_max_attempts:
            state = PENDING
        else:
            state = DEAD
        self.outbox.record_attempt(delivery, state, code and str(code), status,
                                   now + self.backoff(tries) if state == PENDING else now)
        return state

    def backoff(self, tries: int) -> float:
        """The wait after the ``tries``-th failed attempt: exponential, capped, half of it jittered."""
        wait = min(self.settings.webhook_retry_max_seconds, self.settings.webhook_retry_seconds * 2 ** (tries - 1))
        return wait / 2 + wait / 2 * self.jitter()

    def _send(self, delivery: dict) -> int:
        subscription = self.outbox.subscription(delivery["tenant"])
        if subscription is None:
            raise EvidenceError(ReasonCode.WEBHOOK_NOT_SET, "the tenant's webhook was removed")
        target = targets.parse_url(subscription["url"])
        addresses = targets.allowed_addresses(target, self.settings.webhook_allowed_networks)
        now = self.clock()
        secrets = [subscription["secret"]]
        if subscription["previous_secret"] and (subscription["previous_until"] or 0) > now:
            secrets.append(subscription["previous_secret"])
        body = delivery["payload"].encode("utf-8")
        headers = signing.headers(secrets, delivery["delivery_id"], int(now), body)
        return sender.post(target, addresses[0], headers, body, self.settings.webhook_timeout_seconds)
