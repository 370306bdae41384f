"""`evidence demo`: register demo tenants, publish their sources, submit their documents and work them through
Dagster's dispatch, then materialize recent months through Dagster (the last one's report lists the documents)."""

from __future__ import annotations

import contextlib
import fcntl
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from dagster import DagsterInstance, Definitions, build_sensor_context

from evidence_pipeline.actors.roles import Action
from evidence_pipeline.audit.checkpoints import publish_checkpoint
from evidence_pipeline.defs.automation import monthly_evidence_job
from evidence_pipeline.defs.coordinator import TENANT_TAG
from evidence_pipeline.defs.documents import document_dispatch_sensor, document_page_job
from evidence_pipeline.defs.extensions.slots import SlotWatch, free_dead_holders, owner_tags
from evidence_pipeline.defs.partitions import OPEN_FROM, partition_key_for, range_tags, run_tenant, tenant_partitions
from evidence_pipeline.defs.resources import EvidenceResource
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.ledger.rows import DocumentJob
from evidence_pipeline.models import TenantMonth
from evidence_pipeline.monthly import publication
from evidence_pipeline.operations.tenant_access import register_tenants
from evidence_pipeline.synthetic.demo_actors import DEV_ROLES, OPERATOR, DemoActors, ensure_demo_actors, key_path
from evidence_pipeline.synthetic.demo_data import DEMO_TENANTS, demo_transactions
from evidence_pipeline.synthetic.demo_documents import merge_agreements, submit_demo_documents, submit_part_reviews

SOURCE_MONTHS = 14  # months of demo source data per tenant
QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}  # outcomes are reported by reason code


@dataclass(frozen=True)
class DemoOutcome:
    """What happened to one tenant-month: published (new or converged on), or the reason code it failed with."""

    tenant_month: TenantMonth
    reason: str | None = None
    location: str | None = None
    report_sha256: str | None = None
    newly_published: bool = False
    pages: int | None = None

    @property
    def ok(self) -> bool:
        return self.reason is None


@dataclass(frozen=True)
class Demo:
    months: list[DemoOutcome]  # one per tenant-month
    documents: list[DocumentJob]  # the demo's document jobs as the ledger holds them after their page runs
    documents_period: str | None  # the month they are filed under (the last one materialized)
    actors: dict[str, tuple[str, Path]]  # the dev actors: name -> (their role, their key file under the home)


def complete_months(today: date, count: int) -> list[str]:
    """The ``count`` most recent complete months before ``today``, oldest first."""
    months, year, month = [], today.year, today.month
    for _ in range(count):
        year, month = (year - 1, 12) if month == 1 else (year, month - 1)
        months.append(f"{year:04d}-{month:02d}")
    return months[::-1]


def run_demo(
    months: int,
    today: date,
    evidence: EvidenceResource | None = None,
    instance: DagsterInstance | None = None,
    say: Callable[[str], None] = print,
    *,
    code_location: Definitions,
) -> Demo:
    """Runs the jobs of ``code_location`` (the caller's, evidence_pipeline.definitions: the code location is built
    from defs/, never imported by it) on ``instance``, or on the one DAGSTER_HOME names. ``say`` reports what a wait
    is waiting for."""
    evidence = evidence or EvidenceResource()
    home = evidence.settings().dagster_home
    with contextlib.nullcontext(instance) if instance else _instance_of_dagster_home(home) as dagster_instance:
        return _run_demo(dagster_instance, code_location, evidence=evidence, months=months, today=today, say=say)


def _instance_of_dagster_home(dagster_home: Path) -> DagsterInstance:
    """DagsterInstance.get(), one process at a time. On a fresh DAGSTER_HOME, Dagster creates and stamps its SQLite
    schemas without a guard, so two demos that start together can fail with "table … already exists"."""
    # DagsterInstance.get() reads DAGSTER_HOME itself; `evidence demo` sets it (cli.resources.use_dagster_home).
    with open(dagster_home / ".instance.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        return DagsterInstance.get()


def _run_demo(
    instance: DagsterInstance,
    defs: Definitions,
    *,
    evidence: EvidenceResource,
    months: int,
    today: date,
    say: Callable[[str], None],
) -> Demo:
    periods = complete_months(today, months)
    if periods and periods[0] < OPEN_FROM:
        raise EvidenceError(
            ReasonCode.PERIOD_CLOSED,
            f"{periods[0]} is closed: only months from {OPEN_FROM} are open (EVIDENCE_OPEN_MONTHS)",
        )
    runtime = evidence.runtime()
    actors = ensure_demo_actors(runtime.settings, runtime.actors)
    register_tenants(
        actors.gate, runtime.tenants, actors.sign(OPERATOR, Action.TENANT_REGISTER, {"tenants": list(DEMO_TENANTS)})
    )
    instance.add_dynamic_partitions(tenant_partitions.name, list(DEMO_TENANTS))
    # Published as `evidence source publish` publishes: each month signed by the operator, through the action gate.
    publisher = publication.Publisher(OPERATOR, correlation_id=f"demo-{uuid.uuid4().hex}")
    for tenant in DEMO_TENANTS:
        for period in complete_months(today, SOURCE_MONTHS):
            tenant_month = TenantMonth(tenant, period)
            prepared = publication.prepare_frame(tenant_month, demo_transactions(tenant_month))
            envelope = actors.sign(OPERATOR, Action.SOURCE_PUBLISH, publication.signed_args(prepared), tenant)
            publication.publish(runtime, prepared, publisher, publication.signed_by(actors.gate, envelope, prepared))

    documents = _document_jobs(defs, instance, evidence, actors, periods[-1]) if periods else []
    job = defs.resolve_job_def(monthly_evidence_job.name)
    pools = tuple(sorted({node.definition.pool for node in job.graph.node_dict.values() if node.definition.pool}))
    for run_id in free_dead_holders(instance, pools):
        say(f"freed the pool slots of run {run_id[:8]}: its process is gone (RUN_WORKER_LOST)")
    outcomes: list[DemoOutcome] = []
    stopped: EvidenceError | None = None
    for tenant in DEMO_TENANTS:  # one run per tenant over its months, as an analyst's backfill would run them
        tenant_months = [TenantMonth(tenant, period) for period in periods]
        if stopped is not None:  # interrupted, or no pool slot in time: the rest is not attempted
            outcomes += [DemoOutcome(tm, stopped.code) for tm in tenant_months]
            continue
        tags = range_tags(tenant_months[0], tenant_months[-1])
        run_id = str(uuid.uuid4())  # as Dagster makes a run id
        with SlotWatch(
            instance, run_id=run_id, pools=pools, wait_seconds=runtime.settings.pool_wait_seconds, say=say
        ) as watch:
            result = job.execute_in_process(
                instance=instance,
                resources={"evidence": evidence},
                run_id=run_id,
                raise_on_error=False,
                tags=tags | {TENANT_TAG: run_tenant(tags)} | owner_tags(),
                # Each tenant-month's outcome is reported by reason code; the traceback of a defect is said below.
                run_config=QUIET,
            )
        instance.event_log_storage.free_concurrency_slots_for_run(run_id)  # a stopped run may have left a claim
        run_outcomes, interrupted = _outcomes(result, tenant_months, say)
        stopped = watch.stopped or (
            EvidenceError(ReasonCode.INTERRUPTED, "stopped by SIGINT/SIGTERM") if interrupted else None
        )
        outcomes += [o if o.ok or stopped is None else DemoOutcome(o.tenant_month, stopped.code) for o in run_outcomes]
    if stopped is None and any(o.ok for o in outcomes):
        try:  # so `evidence ledger prove` works now
            publish_checkpoint(runtime.ledger, runtime.archive, runtime.keyring, runtime.witness_key)
        except EvidenceError as error:
            say(f"no ledger checkpoint published: {error}")
    if stopped is not None and stopped.code == ReasonCode.INTERRUPTED:
        raise stopped
    return Demo(
        outcomes,
        documents,
        periods[-1] if periods else None,
        {
            name: (role, key_path(runtime.settings, name).relative_to(runtime.settings.home))
            for name, role in DEV_ROLES.items()
        },
    )


def _document_jobs(
    defs: Definitions, instance: DagsterInstance, evidence: EvidenceResource, actors: DemoActors, period: str
) -> list[dict]:
    """Submit every demo tenant's documents (filed under ``period``), then dispatch them as the daemon would: one
    tick of the dispatch sensor, and its page runs, here in process; then, in two more rounds, the reviews of the
    agreement's parts and, after the approver's decision, their merge. Returns the jobs as the ledger then holds
    them (a job's failure is its state and reason code, never the demo's)."""
    rt = evidence.runtime()
    jobs = [
        job
        for index, tenant in enumerate(DEMO_TENANTS)
        for job in submit_demo_documents(rt, actors, tenant, index, period)
    ]
    _dispatch(defs, instance, evidence)
    reviews = submit_part_reviews(rt, jobs, period)
    _dispatch(defs, instance, evidence)
    merges = merge_agreements(rt, actors, jobs, period)
    _dispatch(defs, instance, evidence)
    return [rt.document_jobs.job(job.tenant, job.job_id) for job in jobs + reviews + merges]


def _dispatch(defs, instance: DagsterInstance, evidence: EvidenceResource) -> None:
    """One tick of the dispatch sensor and its page runs, in process."""
    tick = defs.resolve_sensor_def(document_dispatch_sensor.name).evaluate_tick(
        build_sensor_context(instance=instance, resources={"evidence": evidence})
    )
    page_job = defs.resolve_job_def(document_page_job.name)
    for request in tick.run_requests:
        if request.job_name == page_job.name:  # an evidence job someone asked for is left to the daemon
            page_job.execute_in_process(
                instance=instance,
                resources={"evidence": evidence},
                raise_on_error=False,
                run_config=dict(request.run_config) | QUIET,
                tags=request.tags,
            )


def _outcomes(result, tenant_months: list[TenantMonth], say: Callable[[str], None]) -> tuple[list[DemoOutcome], bool]:
    """One outcome per tenant-month of a run, and whether SIGINT/SIGTERM interrupted a step. Only a defect's
    traceback is said: foreseeable failures are their reason codes."""
    reports, published = _metadata(result, "monthly_report"), _metadata(result, "evidence_bundle")
    codes, run_code, interrupted = {}, None, False
    for event in result.all_events:
        if not event.is_step_failure:
            continue
        failure = event.step_failure_data
        metadata = failure.user_failure_data.metadata if failure.user_failure_data else {}
        if "reason_codes" in metadata:
            codes |= metadata["reason_codes"].value
        elif "reason_code" in metadata:
            run_code = metadata["reason_code"].value
        elif failure.error and failure.error.cls_name == "DagsterExecutionInterruptedError":
            interrupted, run_code = True, ReasonCode.INTERRUPTED
        else:
            run_code = ReasonCode.UNEXPECTED_ERROR  # a defect: the operator needs its traceback
            say(f"UNEXPECTED_ERROR in step {event.step_key}:\n{failure.error.to_string() if failure.error else ''}")
    outcomes = []
    for tenant_month in tenant_months:
        key = str(partition_key_for(tenant_month))
        if key in published:
            bundle = published[key]
            outcomes.append(
                DemoOutcome(
                    tenant_month,
                    None,
                    bundle["location"],
                    bundle["report_sha256"],
                    bundle["newly_published"],
                    reports.get(key, {}).get("pages"),
                )
            )
        else:
            # No code of its own: a step failed for another tenant-month of the run, and Dagster skipped the
            # run's later steps for the whole range.
            outcomes.append(DemoOutcome(tenant_month, codes.get(key) or run_code or ReasonCode.UPSTREAM_STEP_FAILED))
    return outcomes, interrupted


def _metadata(result, asset_name: str) -> dict[str, dict]:
    """partition key -> metadata of ``asset_name``'s materializations in this run."""
    return {
        event.partition: {name: value.value for name, value in event.materialization.metadata.items()}
        for event in result.get_asset_materialization_events()
        if event.asset_key.to_user_string() == asset_name
    }
