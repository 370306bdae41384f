"""`/metrics` over HTTP: on the intake server's port (with its admission histogram), and alone for hosts without
one (`evidence metrics serve`).

Unauthenticated, as Prometheus scrapes by default: the exposition holds counts, ages and byte totals under bounded
labels, never a tenant's data. A deployment that exposes the intake port beyond its network blocks `/metrics` at
its proxy (docs/operators/metrics.md).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, Histogram, generate_latest, multiprocess
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from evidence_pipeline.http_guard import guarded, server_config
from evidence_pipeline.metrics.collector import METRICS, EvidenceCollector
from evidence_pipeline.runtime import Runtime

log = logging.getLogger(__name__)
PATH = "/metrics"
UNMATCHED = "unmatched"  # the endpoint label of a request no route took (a 404, a refused header): bounded
# Admission answers in milliseconds; a large upload or a ledger that waits for its lock takes seconds.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


MULTIPROCESS_DIR = "PROMETHEUS_MULTIPROC_DIR"  # prometheus_client's own variable: set by serve_workers only


def registry_for(runtime: Runtime) -> CollectorRegistry:
    """A registry of this runtime's gauges: one per app, so that two apps in one process never share series. Under
    several intake workers it also gathers every worker's histogram (prometheus_client's multiprocess files)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EvidenceCollector(runtime))
    if os.environ.get(MULTIPROCESS_DIR):
        multiprocess.MultiProcessCollector(registry)
    return registry


def admission_histogram(registry: CollectorRegistry) -> Histogram:
    """The admission histogram, in ``registry`` (one process), or in the shared files that registry reads."""
    metric = next(m for m in METRICS if m.name == "evidence_admission_duration_seconds")
    return Histogram(metric.name, metric.help, metric.labels, buckets=BUCKETS, registry=_own(registry))


def uploads_receiving(registry: CollectorRegistry) -> Gauge:
    """The gauge of uploads being received; under several workers each writes its own file and a scrape sums the
    live ones (a dead worker's uploads are not being received)."""
    metric = next(m for m in METRICS if m.name == "evidence_intake_uploads_receiving")
    return Gauge(metric.name, metric.help, registry=_own(registry), multiprocess_mode="livesum")


def _own(registry: CollectorRegistry) -> CollectorRegistry | None:
    """``registry`` in one process; none under several workers, whose metrics go to the shared files."""
    return None if os.environ.get(MULTIPROCESS_DIR) else registry


@contextlib.contextmanager
def shared_between_workers() -> Iterator[None]:
    """Worker processes started inside this block (spawned: they import prometheus_client afresh) write their
    histograms to one private (0700) directory, removed afterwards, so a scrape that reaches any worker sees them
    all. It is in the system's temporary directory, not EVIDENCE_WORK_DIR: a server killed with SIGKILL leaves
    it behind (latency counts only), and the work directory holds only what the sweeper accounts for."""
    directory = tempfile.mkdtemp(prefix="evidence-metrics-")
    os.environ[MULTIPROCESS_DIR] = directory
    try:
        yield
    finally:
        os.environ.pop(MULTIPROCESS_DIR, None)
        shutil.rmtree(directory, ignore_errors=True)


def metrics_route(registry: CollectorRegistry) -> Route:
    async def metrics(request: Request) -> Response:
        body = await run_in_threadpool(generate_latest, registry)  # the collector reads the ledger: not on the loop
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    return Route(PATH, metrics, methods=["GET"])


class AdmissionTimer:
    """ASGI middleware: observe each HTTP request's time to its last byte sent, labelled by the route template
    Starlette matched (`/v1/jobs/{job_id}`, never the path itself) and the status answered."""

    def __init__(self, app, histogram: Histogram):
        self.app, self.histogram = app, histogram

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started, status = time.perf_counter(), 500  # what the server answers when the app sends nothing

        async def timed_send(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, timed_send)
        finally:
            route = scope.get("route")
            endpoint = getattr(route, "path", None) or UNMATCHED
            self.histogram.labels(endpoint, str(status)).observe(time.perf_counter() - started)


def standalone_app(runtime: Runtime):
    """`/metrics` alone, behind the guard every server of ours shares (http_guard.py)."""
    return guarded([metrics_route(registry_for(runtime))], runtime.settings, log)


def serve(runtime: Runtime, host: str, port: int) -> None:
    """Serve `/metrics` alone until interrupted, behind the guarded protocol."""
    uvicorn.Server(
        server_config(
            standalone_app(runtime), runtime.settings, host=host, port=port, log_level="warning", lifespan="off"
        )
    ).run()
