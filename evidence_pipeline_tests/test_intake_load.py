"""Load control at intake: per-tenant quotas (429) and backpressure on queue age (503), both with Retry-After."""

from __future__ import annotations

import time

from evidence_pipeline_tests.intake_server import client, error_code, pdf_bytes, submit, tokens, upload

INTAKE_OVERRIDES = {
    "EVIDENCE_TENANT_MAX_JOBS": "2",
    "EVIDENCE_TENANT_MAX_BYTES": "1500",
    "EVIDENCE_INTAKE_MAX_QUEUE_AGE_SECONDS": "1.5",
}


def test_quotas_refuse_new_work_with_retry_after_but_answer_known_keys(documents, intake):
    acme, globex = tokens(documents)
    with client(intake, acme) as http, client(intake, globex) as other:
        ids = [upload(http, pdf_bytes(n)).json()["document_id"] for n in (1, 2)]  # 431 and 551 bytes
        too_many_bytes = upload(http, pdf_bytes(6))
        assert (too_many_bytes.status_code, error_code(too_many_bytes)) == (429, "TENANT_QUOTA_EXCEEDED")
        assert too_many_bytes.headers["Retry-After"] == "30"
        first = [submit(http, f"k{n}", {"operation": "inspect", "inputs": [i]}) for n, i in enumerate(ids)]
        third = submit(http, "k2", {"operation": "inspect", "inputs": [ids[0]]})
        replay = submit(http, "k0", {"operation": "inspect", "inputs": [ids[0]]})
        theirs = submit(
            other, "k0", {"operation": "inspect", "inputs": [upload(other, pdf_bytes()).json()["document_id"]]}
        )
    assert [r.status_code for r in first] == [202, 202]
    assert (third.status_code, error_code(third), third.headers["Retry-After"]) == (429, "TENANT_QUOTA_EXCEEDED", "30")
    assert replay.status_code == 200 and theirs.status_code == 202  # known keys and other tenants are unaffected
    assert documents.store.list("acme") and len(documents.store.list("acme")) == 2


def test_backpressure_refuses_new_jobs_while_status_reads_keep_working(documents, intake):
    acme, globex = tokens(documents)
    with client(intake, acme) as http, client(intake, globex) as other:
        document_id = upload(http, pdf_bytes()).json()["document_id"]
        waiting = submit(http, "old", {"operation": "inspect", "inputs": [document_id]})
        time.sleep(1.6)  # the oldest unstarted job is now older than the objective
        refused = submit(
            other, "new", {"operation": "inspect", "inputs": [upload(other, pdf_bytes()).json()["document_id"]]}
        )
        status = http.get(waiting.json()["status_url"])
        same_key = submit(http, "old", {"operation": "inspect", "inputs": [document_id]})
    assert (refused.status_code, error_code(refused), refused.headers["Retry-After"]) == (
        503,
        "INTAKE_BACKPRESSURE",
        "30",
    )
    assert status.status_code == 200 and status.json()["state"] == "accepted"
    assert same_key.status_code == 200
