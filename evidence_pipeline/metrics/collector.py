"""The gauges an operator alerts on, read at scrape time from the ledger, the archive's checkpoints and the
temporary volume (a prometheus_client custom collector: nothing is kept between scrapes but the checkpoint cache).

Every metric is in ``METRICS`` with its type and labels: the reference page (docs/gen_reference.py) is that table.
Labels are bounded vocabularies only: a job's kind (3), its lane (a document operation of the registry, `evidence`
or `archive`), a job state (5), a delivery state (2), a volume figure (3). No tenant id, no job id, no path: per
tenant and per job the project's commands answer (`evidence stats --tenant`, `evidence dead-letter list`). Every
count over kinds and states is exported for each label set, at 0 before its first job, so that an alert on its
increase fires on the first one (ledger_reads._zeros).
"""

from __future__ import annotations

import base64
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from evidence_pipeline import jsonread
from evidence_pipeline.audit.checkpoints import checkpoint_keys
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.metrics import ledger_reads
from evidence_pipeline.runtime import Runtime
from evidence_pipeline.tempfiles import MARKER

log = logging.getLogger(__name__)
CHECKPOINT_CACHE_SECONDS = 60.0  # checkpoints are hourly: the archive's folder is listed at most once a minute


@dataclass(frozen=True)
class Metric:
    name: str
    type: str  # gauge, counter or histogram
    labels: tuple[str, ...]
    help: str


METRICS = (
    Metric(
        "evidence_ledger_up",
        "gauge",
        (),
        "1 when this scrape read the ledger, 0 when it could not (then no ledger metric follows)",
    ),
    Metric(
        "evidence_jobs",
        "gauge",
        ("kind", "state"),
        "jobs by kind and state: accepted (never tried), "
        "retry_wait (failed transiently, waiting), running, and the dead letters: dead, rejected (by a failure "
        "code; a decision about the input is an outcome, not counted)",
    ),
    Metric(
        "evidence_oldest_unstarted_job_age_seconds",
        "gauge",
        ("kind", "lane"),
        "age of the oldest accepted, never started job (since acceptance or its replay); absent when there is none",
    ),
    Metric(
        "evidence_jobs_ended_per_minute",
        "gauge",
        ("kind", "state"),
        "jobs that ended (succeeded, rejected, dead) per minute, over the last five minutes: completions and failures",
    ),
    Metric(
        "evidence_job_retries_per_minute",
        "gauge",
        ("kind",),
        "attempts beyond the first of the jobs that ended in the last five minutes, per minute",
    ),
    Metric(
        "evidence_job_retry_ratio",
        "gauge",
        ("kind",),
        "retries / attempts of the jobs that ended in the last "
        "five minutes (0: every job done on its first attempt); absent when none ended",
    ),
    Metric("evidence_leases_active", "gauge", ("kind",), "running jobs whose lease is live"),
    Metric(
        "evidence_leases_expired",
        "gauge",
        ("kind",),
        "running jobs whose lease expired and that nothing has recovered yet (the worker died or hangs)",
    ),
    Metric(
        "evidence_dead_letters",
        "gauge",
        ("kind",),
        "jobs `evidence dead-letter list` shows: dead, or rejected by a failure code",
    ),
    Metric(
        "evidence_ledger_events",
        "counter",
        (),
        "audit events appended to the ledger (its newest seq; exposed as `evidence_ledger_events_total`)",
    ),
    Metric(
        "evidence_ledger_append_lag_seconds",
        "gauge",
        (),
        "the newest bundle: seconds from its statement's "
        "completion (the bundle is in the archive) to its `bundle.published` event",
    ),
    Metric(
        "evidence_checkpoint_age_seconds",
        "gauge",
        (),
        "seconds since the newest signed checkpoint was issued; absent while there is none",
    ),
    Metric("evidence_checkpoint_lag_events", "gauge", (), "events appended since the newest signed checkpoint"),
    Metric(
        "evidence_temp_volume_bytes",
        "gauge",
        ("figure",),
        "the volume of EVIDENCE_WORK_DIR: size, used and available bytes",
    ),
    Metric(
        "evidence_attempt_directories",
        "gauge",
        (),
        "attempt directories in EVIDENCE_WORK_DIR (live attempts and abandoned ones the sweeper has not removed yet)",
    ),
    Metric("evidence_webhook_outbox", "gauge", ("state",), "webhook deliveries waiting (pending) or given up (dead)"),
    Metric(
        "evidence_webhook_outbox_oldest_pending_age_seconds",
        "gauge",
        (),
        "age of the oldest pending webhook delivery; absent when none waits",
    ),
    Metric(
        "evidence_sweep_failed_directories",
        "gauge",
        (),
        "attempt directories the newest sweep (`sweep.completed`) failed to remove; 0 before the first sweep",
    ),
    Metric(
        "evidence_tenant_months_overdue",
        "gauge",
        (),
        "registered tenants whose newest month past its deadline "
        "(02:00 UTC on the 2nd of the next month) has no published bundle; 0 when every one has (Dagster's "
        "freshness policy on the monthly assets shows the same deadline in the UI)",
    ),
    Metric(
        "evidence_admission_duration_seconds",
        "histogram",
        ("endpoint", "code"),
        "intake server only: time from a request's arrival to its answer, by route template and HTTP status",
    ),
    Metric(
        "evidence_intake_uploads_receiving",
        "gauge",
        (),
        "intake server only: uploads whose bodies are being "
        "received now (past their token and quota checks), summed over the server's workers",
    ),
)
_BY_NAME = {metric.name: metric for metric in METRICS}


def family(name: str):
    metric = _BY_NAME[name]
    kind = CounterMetricFamily if metric.type == "counter" else GaugeMetricFamily
    return kind(name, metric.help, labels=metric.labels)


class EvidenceCollector(Collector):
    """The ledger's, the archive's and the work directory's gauges of one runtime, read at each scrape."""

    def __init__(self, runtime: Runtime):
        self.runtime = runtime
        self._checkpoint: tuple[float, str | None, float | None] = (0.0, None, None)  # (read at, key, issued at)

    def describe(self) -> list:
        return []  # no read at registration: the ledger is read at scrape time only

    def collect(self) -> Iterator:
        now = time.time()
        up = family("evidence_ledger_up")
        try:
            reading = ledger_reads.read(self.runtime.ledger, now, self.runtime.settings.first_period)
        except EvidenceError as error:
            log.warning("metrics: the ledger could not be read (%s)", error.code)
            up.add_metric([], 0)
            reading = None
        else:
            up.add_metric([], 1)
        yield up
        if reading is not None:
            yield from _ledger_families(reading)
            yield from self._checkpoint_families(reading.events, now)
        yield from _volume_families(Path(self.runtime.settings.work_dir))

    def _checkpoint_families(self, events: int, now: float) -> Iterator:
        read_at, key, issued = self._checkpoint
        if now - read_at >= CHECKPOINT_CACHE_SECONDS:
            try:
                key, issued = _newest_checkpoint(self.runtime.archive, key, issued)
            except EvidenceError as error:
                log.warning("metrics: the checkpoints could not be read (%s)", error.code)
                return
            self._checkpoint = (now, key, issued)
        if key is None:
            return
        lag = family("evidence_checkpoint_lag_events")
        lag.add_metric([], max(events - int(key.rsplit("/", 1)[-1][:12]), 0))
        yield lag
        if issued is not None:
            age = family("evidence_checkpoint_age_seconds")
            age.add_metric([], now - issued)
            yield age


def _newest_checkpoint(archive, known: str | None, issued: float | None) -> tuple[str | None, float | None]:
    """The newest checkpoint's key and issue time (its payload's `issued_at`; read only when the key is new)."""
    keys = checkpoint_keys(archive)
    if not keys:
        return None, None
    if keys[-1] == known:
        return known, issued
    envelope = jsonread.loads(archive.get(keys[-1], max_bytes=64 * 1024), ReasonCode.LEDGER_INVALID, "a checkpoint")
    try:
        payload = jsonread.loads(base64.b64decode(envelope["payload"]), ReasonCode.LEDGER_INVALID, "a checkpoint")
        return keys[-1], datetime.fromisoformat(payload["issued_at"]).timestamp()
    except (KeyError, TypeError, ValueError):
        return keys[-1], None


def _ledger_families(reading: ledger_reads.LedgerReading) -> Iterator:
    window_minutes = ledger_reads.WINDOW_SECONDS / 60
    yield _labelled("evidence_jobs", reading.jobs)
    yield _labelled("evidence_oldest_unstarted_job_age_seconds", reading.oldest_unstarted)
    yield _labelled(
        "evidence_jobs_ended_per_minute", {key: count / window_minutes for key, count in reading.ended.items()}
    )
    ended = {}
    for (kind, _), count in reading.ended.items():
        ended[kind] = ended.get(kind, 0) + count
    retries = {kind: reading.attempts[kind] - ended[kind] for kind in ended}
    yield _labelled("evidence_job_retries_per_minute", {k: v / window_minutes for k, v in retries.items()})
    yield _labelled(
        "evidence_job_retry_ratio",
        {kind: retries[kind] / reading.attempts[kind] for kind in ended if reading.attempts[kind]},
    )
    yield _labelled("evidence_leases_active", reading.leases_active)
    yield _labelled("evidence_leases_expired", reading.leases_expired)
    yield _labelled("evidence_dead_letters", reading.dead_letters)
    yield _labelled("evidence_ledger_events", {(): reading.events})
    yield _labelled(
        "evidence_ledger_append_lag_seconds", {} if reading.append_lag is None else {(): reading.append_lag}
    )
    yield _labelled("evidence_webhook_outbox", reading.outbox)
    yield _labelled(
        "evidence_webhook_outbox_oldest_pending_age_seconds",
        {} if reading.outbox_oldest_pending is None else {(): reading.outbox_oldest_pending},
    )
    yield _labelled("evidence_sweep_failed_directories", {(): reading.sweep_failed})
    yield _labelled("evidence_tenant_months_overdue", {(): reading.overdue})


def _labelled(name: str, values: dict) -> GaugeMetricFamily | CounterMetricFamily:
    metric = family(name)
    for key, value in sorted(values.items()):
        metric.add_metric(list(key) if isinstance(key, tuple) else [key], value)
    return metric


def _volume_families(work_dir: Path) -> Iterator:
    """The work directory's volume (statvfs) and its attempt directories; nothing while it does not exist yet."""
    try:
        volume = os.statvfs(work_dir)
        attempts = sum(1 for entry in os.scandir(work_dir) if entry.name.startswith(MARKER))
    except OSError:
        return
    size, available = volume.f_blocks * volume.f_frsize, volume.f_bavail * volume.f_frsize
    used = (volume.f_blocks - volume.f_bfree) * volume.f_frsize
    yield _labelled("evidence_temp_volume_bytes", {"size": size, "used": used, "available": available})
    yield _labelled("evidence_attempt_directories", {(): attempts})
