"""Dagster dispatch of document jobs: the sensor pages admitted jobs into runs; the run works its page."""

from __future__ import annotations

import functools

from dagster import AssetKey, AssetRecordsFilter, DagsterInstance

from evidence_pipeline.definitions import defs
from evidence_pipeline.defs.coordinator import TENANT_TAG
from evidence_pipeline.defs.documents import PAGE_TAG
from evidence_pipeline.store.local import LocalStore
from evidence_pipeline.store.s3 import S3Store
from evidence_pipeline_tests.support.document_sensor import tick
from evidence_pipeline_tests.support.hostile_pdfs import HOSTILE
from evidence_pipeline_tests.support.intake_server import client, intake_environment, pdf_bytes, submit, tokens, upload


def test_a_sensor_tick_opens_no_store_the_process_opened_before(backend, documents, monkeypatch):
    """The S3 client and the document store are the runtime's, built once per process, not once per tick."""
    for name, value in intake_environment(backend).items():
        monkeypatch.setenv(name, value)  # the Dagster resource reads the same environment
    opened = []
    with DagsterInstance.ephemeral() as instance:
        tick(instance)
        for store in (LocalStore, S3Store):
            monkeypatch.setattr(store, "__init__", functools.partialmethod(_counted, store.__init__, opened))
        tick(instance)
        tick(instance)
    assert opened == []


def _counted(self, init, opened: list, *args, **kwargs) -> None:
    opened.append(type(self).__name__)
    init(self, *args, **kwargs)


def test_sensor_pages_jobs_into_runs_that_work_them(backend, documents, intake, monkeypatch):
    for name, value in intake_environment(backend).items():
        monkeypatch.setenv(name, value)  # the Dagster resource reads the same environment
    acme, globex = tokens(documents)
    with client(intake, acme) as http, client(intake, globex) as other:
        good = submit(
            http, "good", {"operation": "inspect", "inputs": [upload(http, pdf_bytes()).json()["document_id"]]}
        )
        bad = submit(
            http,
            "bad",
            {"operation": "inspect", "inputs": [upload(http, HOSTILE["launch_action"][0]).json()["document_id"]]},
        )
        theirs = submit(
            other, "x", {"operation": "inspect", "inputs": [upload(other, pdf_bytes(2)).json()["document_id"]]}
        )
        with DagsterInstance.ephemeral() as instance:
            instance.add_dynamic_partitions("tenant", ["acme"])  # globex is not registered: its activity is logged
            first = tick(instance)
            assert tick(instance).run_requests == first.run_requests  # a retried tick asks for the same runs
            requests = {r.tags[TENANT_TAG]: r for r in first.run_requests}
            assert sorted(requests) == ["acme", "globex"]
            for tenant, request in requests.items():
                assert request.run_key.startswith(request.tags[PAGE_TAG] + ".")
                result = defs.get_job_def("document_page_job").execute_in_process(
                    run_config=request.run_config, instance=instance, tags=request.tags
                )
                assert result.success
            assert tick(instance).skip_message == "no document jobs waiting"
            period = documents.document_jobs.job("acme", good.json()["job_id"]).period
            [activity] = instance.fetch_materializations(
                AssetRecordsFilter(asset_key=AssetKey("document_jobs"), asset_partitions=[f"{period}-01|acme"]),
                limit=10,
            ).records
            metadata = activity.asset_materialization.metadata
            assert metadata["counts"].value == {"inspect": {"succeeded": 1, "rejected": 1}}
            assert metadata["job_ids"].value == sorted([good.json()["job_id"], bad.json()["job_id"]])
            assert metadata["refused"].value == ["DOCUMENT_LAUNCH_ACTION"] and metadata["jobs"].value == 2
            assert instance.fetch_materializations(AssetKey("document_jobs"), limit=10).records == [activity]
        states = {key: http.get(r.json()["status_url"]).json() for key, r in (("good", good), ("bad", bad))}
        assert other.get(theirs.json()["status_url"]).json()["state"] == "succeeded"
    assert states["good"]["state"] == "succeeded" and len(states["good"]["outputs"]) == 2
    assert (states["bad"]["state"], states["bad"]["reason"]) == ("rejected", "DOCUMENT_LAUNCH_ACTION")


def test_a_poison_job_ends_dead_through_page_runs_and_is_never_dispatched_again(
    backend, documents, intake, monkeypatch
):
    """The page step with a processor that raises what no code classifies: the first run ends (the job waits in
    retry_wait), the second spends the budget and fails for good, and the sensor asks for no third."""
    from evidence_pipeline_tests.support import poison_operation  # noqa: F401  (registers test-poison)
    from evidence_pipeline_tests.support.document_jobs import make_due

    overrides = {"EVIDENCE_MAX_ATTEMPTS": "2", "EVIDENCE_RETRY_BUDGET_SECONDS": "0.001"}
    for name, value in (intake_environment(backend) | overrides).items():
        monkeypatch.setenv(name, value)  # the Dagster resource reads the same environment
    acme, _ = tokens(documents)
    with client(intake, acme) as http:
        document_id = upload(http, pdf_bytes()).json()["document_id"]
        job_id = submit(
            http, "poison", {"operation": "test-poison", "inputs": [document_id], "options": {"trigger": "oserror"}}
        ).json()["job_id"]
    with DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions("tenant", ["acme"])
        page_job = defs.get_job_def("document_page_job")
        results = []
        for _ in range(2):
            [request] = tick(instance).run_requests
            results.append(
                page_job.execute_in_process(
                    run_config=request.run_config, instance=instance, tags=request.tags, raise_on_error=False
                )
            )
            make_due(documents, job_id)
        assert [r.success for r in results] == [True, False]  # the first waits, the second fails for good
        assert tick(instance).skip_message == "no document jobs waiting"
    job = documents.document_jobs.job("acme", job_id)
    assert (job.state, job.attempts, job.last_reason) == ("dead", 2, "PROCESSOR_FAILED")
