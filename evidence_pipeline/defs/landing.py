"""`source_landing_sensor`: publishes each new source file of the landing location (EVIDENCE_LANDING_URI) once,
through the one publication path, marks it taken (monthly/landing.py), and asks for the tenant-month's evidence.

The cursor holds the digest of every revision it has asked evidence for, by tenant-month, so a file of the same
rows landing again asks for nothing; each run request's key is the revision's digest as well. A file that breaks
the format is marked with its report and asks for nothing; a transient failure leaves the file for the next tick
and never fails the tick for the others. Each tick's published revisions are the sensor's tick history in the UI;
the runs it requests show the `source_revision` partition's newly pinned revision.
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


@sensor(job=monthly_evidence_job, minimum_interval_seconds=30, default_status=DefaultSensorStatus.RUNNING,
        description="Publishes each new file of the landing location (EVIDENCE_LANDING_URI) as a source revision "
        "and asks for its tenant-month's evidence.")
def source_landing_sensor(context: SensorEvaluationContext, evidence: EvidenceResource):
    rt = evidence.runtime()
    uri = rt.settings.landing_uri
    if uri is None:
        return SkipReason("EVIDENCE_LANDING_URI is not set")
    location = landing.open_landing(uri, s3_client(rt.settings) if uri.startswith("s3://") else None)
    asked: dict[str, str] = json.loads(context.cursor or "{}")  # "tenant/period" -> digest evidence was asked for
    tenants = set(context.instance.get_dynamic_partitions(tenant_partitions.name))
    requests, taken = [], 0
    for landed in landing.pending(location)[:FILES_PER_TICK]:
        try:
            outcome = landing.take(rt, location, landed)
        except EvidenceError as error:
            context.log.warning(f"{landed.tenant_month}: left for the next tick ({error.code})")
            continue
        taken += 1
        month = f"{landed.tenant_month.tenant}/{landed.tenant_month.period}"
        if "error" in outcome:
            context.log.warning(f"{month}: refused ({outcome['error']['code']}); marked, not taken again")
        elif landed.tenant_month.tenant not in tenants:
            context.log.warning(f"{month}: revision {outcome['sequence']} published; the tenant is not a partition")
        elif asked.get(month) != outcome["sha256"]:
            asked[month] = outcome["sha256"]
            requests.append(RunRequest(run_key=f"{month}:{outcome['sha256']}",
                                       partition_key=partition_key_for(landed.tenant_month)))
    if not taken:
        return SkipReason("no new file in the landing location")
    return SensorResult(run_requests=requests, cursor=json.dumps(asked, sort_keys=True))
