"""Batches: a manifest admitted in one request, children created in pages fairly across tenants, honest cancel."""

from __future__ import annotations

import pytest

from evidence_pipeline.config import Settings
from evidence_pipeline.documents.dispatch import dispatch_batches
from evidence_pipeline.documents.worker import run_page
from evidence_pipeline.runtime import RunInfo, runtime_for
from evidence_pipeline_tests.support.intake_server import (
    client,
    error_code,
    intake_environment,
    pdf_bytes,
    running_server,
    submit,
    tokens,
    upload,
)

INTAKE_OVERRIDES = {"EVIDENCE_TENANT_MAX_JOBS": "5000"}


def specs(document_ids: list[str], count: int, prefix: str = "b") -> list[dict]:
    return [
        {"idempotency_key": f"{prefix}{n}", "operation": "inspect", "inputs": [document_ids[n % len(document_ids)]]}
        for n in range(count)
    ]


def test_a_batch_of_1000_is_admitted_at_once_dispatched_in_pages_and_cancelled_honestly(documents, intake):
    acme, globex = tokens(documents)
    with client(intake, acme) as http, client(intake, globex) as other:
        ids = [upload(http, pdf_bytes(n)).json()["document_id"] for n in (1, 2)]
        admitted = http.post("/v1/batches", json={"jobs": specs(ids, 1000)})
        assert admitted.status_code == 202, admitted.text
        batch_id = admitted.json()["batch_id"]
        assert http.post("/v1/batches", json={"jobs": specs(ids, 1000)}).json()["batch_id"] == batch_id
        assert documents.ledger.events_of_type("job.accepted") == []  # the request created no child
        fresh = http.get(f"/v1/batches/{batch_id}").json()
        assert (fresh["jobs"], fresh["undispatched"], fresh["states"], fresh["state"]) == (1000, 1000, {}, "open")
        theirs = other.post("/v1/batches", json={"jobs": specs([upload(other, pdf_bytes()).json()["document_id"]], 50)})

        assert dispatch_batches(documents, 100, "test") == 150  # one page for each tenant: fair, not first-come
        assert dispatch_batches(documents, 100, "test") == 100  # globex's batch is done
        assert other.get(theirs.json()["status_url"]).json()["states"] == {"accepted": 50}
        view = http.get(f"/v1/batches/{batch_id}").json()
        assert (view["undispatched"], view["states"]) == (800, {"accepted": 200})

        documents.pages.assign_pages(10)
        first_page = next(page for page, tenant, _ in documents.pages.open_pages() if tenant == "acme")
        assert {o.state for o in run_page(documents, first_page, RunInfo("run-1"))} == {"succeeded"}
        leased = documents.batches.batch_children_in(batch_id, "accepted")[0]
        documents.ledger.acquire_lease(leased, "run-2", 60)  # a child someone is working on right now

        cancelled = http.post(f"/v1/batches/{batch_id}/cancel")
        assert cancelled.status_code == 200
        assert cancelled.json() == {"cancelled": 800 + 189, "running": 1, "finished": 10}
        assert sum(cancelled.json().values()) == 1000
        assert http.post(f"/v1/batches/{batch_id}/cancel").json() == cancelled.json()  # idempotent
        assert dispatch_batches(documents, 100, "test") == 0
        after = http.get(f"/v1/batches/{batch_id}").json()
        assert after["state"] == "cancelled" and after["states"] == {"succeeded": 10, "rejected": 189, "running": 1}
        assert other.get(f"/v1/batches/{batch_id}").status_code == 404
        assert error_code(other.post(f"/v1/batches/{batch_id}/cancel")) == "BATCH_NOT_FOUND"
    assert {e["details"]["reason"] for e in documents.ledger.events_of_type("job.rejected")} == {"JOB_CANCELLED"}


def test_batch_manifests_are_checked_whole_before_anything_is_stored(documents, intake):
    acme, globex = tokens(documents)
    with client(intake, acme) as http, client(intake, globex) as other:
        mine = upload(http, pdf_bytes()).json()["document_id"]
        theirs = upload(other, pdf_bytes(2)).json()["document_id"]
        good = specs([mine], 3)
        cases = [
            (
                {"jobs": good[:2] + [good[2] | {"idempotency_key": "has space"}]},
                400,
                "IDEMPOTENCY_KEY_INVALID",
                "jobs[2]",
            ),
            ({"jobs": good + [good[0]]}, 400, "IDEMPOTENCY_KEY_INVALID", "jobs[3]"),
            ({"jobs": good[:1] + [good[1] | {"operation": "shred"}]}, 422, "OPERATION_UNKNOWN", "jobs[1]"),
            ({"jobs": [good[0] | {"options": {"active_content": "x"}}]}, 422, "OPTIONS_INVALID", "jobs[0]"),
            ({"jobs": [good[0] | {"inputs": [theirs]}]}, 404, "DOCUMENT_NOT_FOUND", ""),
            ({"jobs": specs([mine], 5001)}, 400, "REQUEST_INVALID", ""),
            ({"jobs": []}, 400, "REQUEST_INVALID", ""),
            ({"jobs": good, "tenant": "globex"}, 400, "REQUEST_INVALID", ""),
        ]
        for body, status, code, where in cases:
            response = http.post("/v1/batches", json=body)
            assert (response.status_code, error_code(response)) == (status, code)
            assert where in response.json()["error"]["message"]
    assert documents.document_store.list("acme/batches") == []
    assert documents.ledger.events_of_type("batch.accepted") == []


def test_a_batch_that_cannot_be_paged_is_skipped_and_every_other_tenant_is_dispatched(documents, intake, caplog):
    acme, globex = tokens(documents)
    with client(intake, acme) as http, client(intake, globex) as other:
        ours = http.post("/v1/batches", json={"jobs": specs([upload(http, pdf_bytes()).json()["document_id"]], 3)})
        theirs = other.post("/v1/batches", json={"jobs": specs([upload(other, pdf_bytes()).json()["document_id"]], 2)})
        [broken] = [b for b in documents.batches.open_batches() if b.batch_id == ours.json()["batch_id"]]
        assert documents.document_store.erase(broken.store_key)  # its manifest is gone from the document store
        assert dispatch_batches(documents, 100, "test") == 2  # globex's children are created all the same
        assert other.get(theirs.json()["status_url"]).json()["states"] == {"accepted": 2}
        assert http.get(ours.json()["status_url"]).json()["undispatched"] == 3
    assert f"batch {broken.batch_id[:16]} not dispatched this time (STORE_NOT_FOUND)" in caplog.text


@pytest.mark.parametrize("backend", ["local"], indirect=True)
def test_a_batch_that_can_never_fit_the_job_quota_is_413_never_retry_later(backend):
    """1,001 specs against a quota of 1,000 outstanding jobs: 413 REQUEST_EXCEEDS_QUOTA naming the quota, without
    Retry-After; 1,000 while one job is outstanding can fit later: 429 with Retry-After. Before: 429 and
    `Retry-After: 30` for both, so an obedient client retried the first forever."""
    documents = runtime_for(Settings.from_env(intake_environment(backend) | {"EVIDENCE_TENANT_MAX_JOBS": "1000"}))
    acme, _ = tokens(documents)
    with running_server(documents) as url, client(url, acme) as http:
        ids = [upload(http, pdf_bytes()).json()["document_id"]]
        never = http.post("/v1/batches", json={"jobs": specs(ids, 1001)})
        assert (never.status_code, error_code(never)) == (413, "REQUEST_EXCEEDS_QUOTA")
        assert "retry-after" not in never.headers and "1000" in never.json()["error"]["message"]
        assert submit(http, "one", {"operation": "inspect", "inputs": ids}).status_code == 202
        later = http.post("/v1/batches", json={"jobs": specs(ids, 1000)})
        assert (later.status_code, error_code(later), later.headers["retry-after"]) == (
            429,
            "TENANT_QUOTA_EXCEEDED",
            "30",
        )
    assert documents.ledger.events_of_type("batch.accepted") == []
