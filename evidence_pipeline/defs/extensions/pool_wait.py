"""A version-guarded patch: a run whose step waits for a pool slot sleeps between its claims instead of spinning.

In Dagster 1.13.27 the in-process executor (every run of this location executes its steps in one process) waits
for a pool slot in a loop that asks ``ActiveExecution.sleep_interval`` how long to sleep, and that asks
``InstanceConcurrencyContext.interval_to_next_pending_claim_check``, which returns ``min([0, *intervals])``: never
a positive delay (upstream: dagster-io/dagster#20367, not merged). So the loop never sleeps: a run blocked on the
`render` or `publish` pool spins one core until a slot frees, beside the runs that hold the slots. In an analyst's
backfill (4 runs, 2 slots per pool) that was about half of the run processes' CPU (bench/README.md, throughput.py).

Dagster claims again only when a claim's own timeout has passed (1 s, growing to 15 s), so sleeping until the
earliest of those timeouts changes no claim, only the spinning between them. Sleeping does not delay a wait that
slots.py ends (its signal interrupts the sleep). It applies only to the exact version and source it was checked
against; otherwise it warns and leaves Dagster alone (correct, only spinning). test_pool_wait.py fails until it is
re-checked.
"""

import time

from dagster._core.execution.plan.instance_concurrency_context import InstanceConcurrencyContext

from evidence_pipeline.defs.extensions.guard import patch

# sha256 of inspect.getsource(InstanceConcurrencyContext.interval_to_next_pending_claim_check) in dagster==1.13.27.
CHECKED_SOURCE_SHA256 = "d9b44ab68eb41a99a2991cb72bdd4103cf91dec98fd3f12adf60f03941c1cc37"

_dagster_interval = InstanceConcurrencyContext.interval_to_next_pending_claim_check


def interval_to_next_pending_claim_check(self: InstanceConcurrencyContext) -> float:
    """Seconds until the earliest pending claim may be checked again (0 when one may be checked now)."""
    if not self._pending_claims:
        return 0.0
    now = time.time()
    return max(0.0, min((ready_at - now for ready_at in self._pending_timeouts.values()), default=0.0))


def install() -> bool:
    """Patch the interval if Dagster is the checked version; True when patched."""
    return patch(
        InstanceConcurrencyContext,
        "interval_to_next_pending_claim_check",
        interval_to_next_pending_claim_check,
        what=__name__,
        consequence="a run waiting for a pool slot spins instead of sleeping",
        sources={_dagster_interval: CHECKED_SOURCE_SHA256},
    )
