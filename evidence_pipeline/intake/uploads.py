"""The uploads one intake process receives at once, in all and per tenant (the limits are http_guard.Limits')."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator

from prometheus_client import Gauge
from starlette.requests import Request
from starlette.responses import Response

from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.http_guard import Limits


class UploadsInFlight:
    """Uploads being received by this process. The process's bound is checked first, before the request's token is
    looked up (``bounded``, around the endpoint): past it, a burst is answered 503 by the event loop alone, with no
    ledger read and no byte of a body read. The tenant is known only once its token is checked, so the endpoint
    then takes the tenant's slot (``with uploads.slot(tenant):``), counted in ``receiving`` (a gauge)."""

    def __init__(self, limits: Limits, receiving: Gauge):
        self.limits, self.receiving = limits, receiving
        self.in_flight = 0
        self.counts: Counter[str] = Counter()

    def bounded(self, endpoint: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        async def admitted(request: Request) -> Response:
            if self.in_flight >= self.limits.max_uploads:
                raise EvidenceError(ReasonCode.INTAKE_BUSY, "too many uploads in flight; try again later")
            self.in_flight += 1
            try:
                return await endpoint(request)
            finally:
                self.in_flight -= 1

        return admitted

    @contextlib.contextmanager
    def slot(self, tenant: str) -> Iterator[None]:
        counts, limits = self.counts, self.limits
        if counts[tenant] >= limits.tenant_max_uploads:
            raise EvidenceError(
                ReasonCode.INTAKE_BUSY,
                f"at most {limits.tenant_max_uploads} uploads in flight per tenant; try again later",
            )
        counts[tenant] += 1
        self.receiving.inc()
        try:
            yield
        finally:
            self.receiving.dec()
            counts[tenant] -= 1
            if not counts[tenant]:
                del counts[tenant]
