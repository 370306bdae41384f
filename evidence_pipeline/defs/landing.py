"""`source_landing_sensor`: publishes each new source file of the landing location (EVIDENCE_LANDING_URI) once,
through the one publication path, marks it taken (monthly/landing.py), and asks for the tenant-month's evidence.

The cursor holds the digest of every revision it has asked evidence for, by tenant-month, so a file of the same
rows landing again asks for nothing (each run request's key is the revision's digest as well), and what the tick
saw of each file not taken yet: a file is taken at the tick that finds it unchanged since the one before (the
settle rule, monthly/landing.py). A refused entry (a file that breaks the format, a link, a tenant the registry
does not hold as active) is marked with its code and asks for nothing; a transient failure leaves the file for the
next tick and never fails the tick for the others. Each tick's published revisions are the sensor's tick history
in the UI; the runs it requests show the `source_revision` partition's newly pinned revision.
"""

from __future__ import annotations

import json

from dagster import DefaultSensorStatus, RunRequest, SensorEvaluationContext, SensorResult, SkipReason, sensor

from evidence_pipeline.defs.automation import monthly_evidence_job
from evidence_pipeline.defs.partitions import partition_key_for, tenant_partitions
from evidence_pipeline.defs.resources import EvidenceResource
from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.monthly import landing
from evidence_pipeline.runtime import s3_client

FILES_PER_TICK = 50  # a burst of files is taken over several ticks, each short


@sensor(
    job=monthly_evidence_job,
    minimum_interval_seconds=30,
    default_status=DefaultSensorStatus.RUNNING,
    description="Publishes each new file of the landing location (EVIDENCE_LANDING_URI) as a source revision "
    "and asks for its tenant-month's evidence.",
)
def source_landing_sensor(context: SensorEvaluationContext, evidence: EvidenceResource):
    rt = evidence.runtime()
    uri = rt.settings.landing_uri
    if uri is None:
        return SkipReason("EVIDENCE_LANDING_URI is not set")
    location = landing.open_landing(uri, s3_client(rt.settings) if uri.startswith("s3://") else None)
    cursor = json.loads(context.cursor or "{}")
    # "tenant/period" -> digest evidence was asked for (a cursor of before the settle rule holds only these)
    asked: dict[str, str] = cursor["asked"] if "asked" in cursor else cursor
    tenants = set(context.instance.get_dynamic_partitions(tenant_partitions.name))
    ready, seen = landing.pending(rt, location, cursor.get("seen", {}))
    requests, taken = [], 0
    for landed in ready[:FILES_PER_TICK]:
        try:
            outcome = landing.take(rt, location, landed)
        except EvidenceError as error:
            context.log.warning(f"{landed.tenant}: a landed file left for the next tick ({error.code})")
            continue
        taken += 1
        seen.pop(landed.name, None)
        if "error" in outcome:
            context.log.warning(
                f"{landed.tenant}: a landed entry refused ({outcome['error']['code']}); marked, not taken again"
            )
            continue
        month = f"{landed.tenant_month.tenant}/{landed.tenant_month.period}"
        if landed.tenant_month.tenant not in tenants:
            context.log.warning(f"{month}: revision {outcome['sequence']} published; the tenant is not a partition")
        elif asked.get(month) != outcome["sha256"]:
            asked[month] = outcome["sha256"]
            requests.append(
                RunRequest(run_key=f"{month}:{outcome['sha256']}", partition_key=partition_key_for(landed.tenant_month))
            )
    state = json.dumps({"asked": asked, "seen": seen}, sort_keys=True)
    if not taken:
        return SensorResult(
            skip_reason=SkipReason("no new file in the landing location (or none settled yet)"), cursor=state
        )
    return SensorResult(run_requests=requests, cursor=state)
