"""Evidence jobs: a tenant asks for a tenant-month's bundle over HTTP; Dagster makes it; the job records it."""

from __future__ import annotations

import time

import pytest
from dagster import (
    build_run_status_sensor_context,
    build_sensor_context,
    instance_for_test,
    partition_loading_context,
)

from evidence_pipeline.definitions import defs
from evidence_pipeline.defs.coordinator import TENANT_TAG
from evidence_pipeline.defs.documents import EVIDENCE_JOB_TAG
from evidence_pipeline.documents.dispatch import finish_evidence_job
from evidence_pipeline.errors import EvidenceError
from evidence_pipeline_tests.support.fixture_sources import SMALL
from evidence_pipeline_tests.support.intake_server import client, error_code, intake_environment
from evidence_pipeline_tests.support.signers import Signers, signers_of


def evidence_job(http, key: str, period) -> object:
    return http.post("/v1/evidence-jobs", json={"period": period}, headers={"Idempotency-Key": key})


def test_an_evidence_job_runs_its_tenant_month_through_dagster_and_records_the_bundle(
    backend, runtime, documents, intake, monkeypatch, tmp_path
):
    for name, value in intake_environment(backend).items():
        monkeypatch.setenv(name, value)
    token = signers_of(documents.ledger).issue_token(SMALL.tenant)  # its sources: 2026-09 and 2026-10
    stranger = signers_of(documents.ledger).issue_token("globex")  # no data at all
    with client(intake, token) as http, client(intake, stranger) as other:
        refusals = [
            (evidence_job(http, "a", "2026-13"), 422, "PERIOD_INVALID"),
            (evidence_job(http, "a", "2099-01"), 422, "PERIOD_NOT_AVAILABLE"),
            (evidence_job(http, "a", "2026-08"), 422, "PERIOD_NOT_AVAILABLE"),
            (evidence_job(other, "a", "2026-10"), 422, "PERIOD_NOT_AVAILABLE"),
            (
                http.post("/v1/evidence-jobs", json={"period": "2026-10", "x": 1}, headers={"Idempotency-Key": "a"}),
                400,
                "REQUEST_INVALID",
            ),
        ]
        for response, status, code in refusals:
            assert (response.status_code, error_code(response)) == (status, code)
        accepted = evidence_job(http, "october", SMALL.period)
        assert accepted.status_code == 202 and evidence_job(http, "october", SMALL.period).status_code == 200
        assert evidence_job(http, "october", "2026-09").status_code == 409
        job_id = accepted.json()["job_id"]

        with instance_for_test(temp_dir=str(tmp_path)) as instance:
            sensor = defs.get_sensor_def("document_dispatch_sensor")
            unresolved = sensor(build_sensor_context(instance=instance, resources=defs.resources))
            assert [r.partition_keys for r in unresolved.dynamic_partitions_requests] == [[SMALL.tenant]]
            instance.add_dynamic_partitions("tenant", [SMALL.tenant])  # what the daemon does with that request
            with partition_loading_context(dynamic_partitions_store=instance):  # as the daemon evaluates it
                tick = sensor.evaluate_tick(
                    build_sensor_context(
                        instance=instance, resources=defs.resources, repository_def=defs.get_repository_def()
                    )
                )
            [request] = tick.run_requests
            assert (request.job_name, request.partition_key) == (
                "monthly_evidence",
                f"{SMALL.period}-01|{SMALL.tenant}",
            )
            assert request.tags[TENANT_TAG] == SMALL.tenant and request.tags[EVIDENCE_JOB_TAG] == job_id
            assert request.run_key == unresolved.run_requests[0].run_key and tick.dynamic_partitions_requests == []
            assert http.get(f"/v1/jobs/{job_id}").json()["started_at"] is not None
            run = defs.resolve_job_def("monthly_evidence").execute_in_process(
                instance=instance, partition_key=request.partition_key, tags=request.tags
            )
            assert run.success
            finished = defs.get_sensor_def("evidence_job_succeeded")
            finished(
                build_run_status_sensor_context(
                    sensor_name="evidence_job_succeeded",
                    dagster_event=run.get_run_success_event(),
                    dagster_instance=instance,
                    dagster_run=run.dagster_run,
                    resources=defs.resources,
                )
            )
        status = http.get(f"/v1/jobs/{job_id}").json()
        assert other.get(f"/v1/jobs/{job_id}").status_code == 404
    publication = documents.ledger.current_publication(SMALL)
    assert status["state"] == "succeeded" and status["period"] == SMALL.period and status["run_id"] == run.run_id
    assert status["bundle"]["identity"] == publication.identity
    assert status["bundle"]["report_sha256"] == publication.report_sha256
    assert status["bundle"]["location"].endswith(publication.bundle_key) and status["finished_at"]


def test_a_failed_evidence_run_rejects_the_job_and_a_replay_gets_a_new_run_key(runtime, documents, intake, tmp_path):
    token = signers_of(documents.ledger).issue_token(SMALL.tenant)
    with client(intake, token) as http:
        job_id = evidence_job(http, "october", SMALL.period).json()["job_id"]
        [waiting] = documents.document_jobs.waiting_evidence_jobs()
        assert finish_evidence_job(documents, SMALL.tenant, job_id, "run-1", succeeded=False) == "rejected"
        assert finish_evidence_job(documents, SMALL.tenant, job_id, "run-1", succeeded=False) is None  # once
        status = http.get(f"/v1/jobs/{job_id}").json()
    assert (status["state"], status["reason"], status["bundle"]) == ("rejected", "EVIDENCE_RUN_FAILED", None)
    Signers(documents.ledger, tmp_path / "actors").replay(job_id, "source fixed")
    [again] = documents.document_jobs.waiting_evidence_jobs()
    assert again.lease_token > waiting.lease_token  # the dispatcher's run key changes with it


def test_a_closed_month_is_refused_at_admission_and_when_it_closed_while_waiting(
    runtime, documents, intake, monkeypatch, tmp_path
):
    from datetime import date

    from evidence_pipeline.defs import documents as dispatch
    from evidence_pipeline.errors import EvidenceError
    from evidence_pipeline.intake.admission import submit_evidence_job

    with pytest.raises(EvidenceError) as closed:  # long after it, 2026-10 is out of any window of open months
        submit_evidence_job(
            documents,
            SMALL.tenant,
            idempotency_key="k",
            body={"period": SMALL.period},
            actor="test",
            clock=time.time,
            today=date(2200, 1, 15),
        )
    assert closed.value.code == "PERIOD_CLOSED"
    token = signers_of(documents.ledger).issue_token(SMALL.tenant)
    with client(intake, token) as http:
        job_id = evidence_job(http, "october", SMALL.period).json()["job_id"]
        # The code location reloads after the month closed: its window starts later than the waiting job's month.
        monkeypatch.setattr(dispatch, "OPEN_FROM", "2026-11")
        with instance_for_test(temp_dir=str(tmp_path)) as instance:
            sensor = defs.get_sensor_def("document_dispatch_sensor")
            tick = sensor(build_sensor_context(instance=instance, resources=defs.resources))
        status = http.get(f"/v1/jobs/{job_id}").json()
    assert not getattr(tick, "run_requests", None)  # no run for a partition that no longer exists
    assert (status["state"], status["reason"]) == ("rejected", "PERIOD_CLOSED") and status["finished_at"]
    assert documents.document_jobs.waiting_evidence_jobs() == []


def test_an_evidence_job_for_a_month_that_is_not_a_partition_is_refused_and_the_tick_dispatches_the_rest(
    backend, runtime, documents, intake, monkeypatch, tmp_path
):
    """Accepted by a server whose clock ran ahead: the month is not complete (not a partition) on the dispatcher's
    clock. The job is rejected with its code, and every other job of the tick is dispatched."""
    from datetime import datetime, timedelta, timezone

    from evidence_pipeline.intake.admission import submit_evidence_job
    from evidence_pipeline.ledger.admission import Clock
    from evidence_pipeline_tests.support.intake_server import pdf_bytes, submit, upload

    for name, value in intake_environment(backend).items():
        monkeypatch.setenv(name, value)  # the Dagster resource reads the same environment
    now = datetime.now(timezone.utc).date()
    this_month = f"{now.year:04d}-{now.month:02d}"
    # The server's clock, on the 1st of next month: this month looks complete, and open in any window.
    ahead = (now.replace(day=28) + timedelta(days=4)).replace(day=1)
    job, _ = submit_evidence_job(
        documents,
        SMALL.tenant,
        idempotency_key="ahead",
        body={"period": this_month},
        actor="test",
        clock=Clock(None),
        today=ahead,
    )
    with pytest.raises(EvidenceError) as refused:  # on the server's own clock the month is refused at admission
        submit_evidence_job(
            documents, SMALL.tenant, idempotency_key="now", body={"period": this_month}, actor="test", clock=Clock(None)
        )
    assert refused.value.code == "PERIOD_NOT_AVAILABLE"
    other = signers_of(documents.ledger).issue_token("globex")
    with client(intake, other) as http:
        document_id = upload(http, pdf_bytes()).json()["document_id"]
        theirs = submit(http, "x", {"operation": "inspect", "inputs": [document_id]})
        with instance_for_test(temp_dir=str(tmp_path)) as instance:
            instance.add_dynamic_partitions("tenant", [SMALL.tenant, "globex"])
            sensor = defs.get_sensor_def("document_dispatch_sensor")
            with partition_loading_context(dynamic_partitions_store=instance):  # as the daemon evaluates it
                tick = sensor.evaluate_tick(
                    build_sensor_context(
                        instance=instance, resources=defs.resources, repository_def=defs.get_repository_def()
                    )
                )
    assert [r.tags[TENANT_TAG] for r in tick.run_requests] == ["globex"]  # the other tenant's page is dispatched
    status = documents.document_jobs.job(SMALL.tenant, job.job_id)
    assert (status.state, status.last_reason) == ("rejected", "PERIOD_NOT_AVAILABLE")
    assert documents.document_jobs.waiting_evidence_jobs() == [] and theirs.status_code == 202
