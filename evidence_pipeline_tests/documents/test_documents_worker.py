"""Document jobs end to end: admitted over HTTP, paged, worked under fenced leases, published and committed."""

from __future__ import annotations

import json
import time

import pytest

from evidence_pipeline.documents.worker import PREDICATE_TYPE, run_page
from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.runtime import RunInfo
from evidence_pipeline.signing import dsse
from evidence_pipeline_tests.support.document_jobs import dispatch, make_due
from evidence_pipeline_tests.support.hostile_pdfs import HOSTILE, NOT_PDF_AT_ADMISSION, POLYGLOTS, encrypted, written
from evidence_pipeline_tests.support.intake_server import client, error_code, pdf_bytes, submit, tokens, upload
from evidence_pipeline_tests.support.signers import Signers

# One of each code the worker-side gate answers (the whole set runs against the gate in test_document_gate.py).
IN_THE_WORKER = (
    "truncated",
    "xref_offsets_shifted",
    "page_tree_loop_parent",
    "flate_bomb",
    "object_stream_bomb",
    "javascript_open_action",
    "launch_action",
    "embedded_file",
    "xfa_form",
    "jbig2_image",  # pypdf's DependencyError once escaped the gate, through every operation
    "cid_widths_100_million_glyphs",
    "embedded_files_name_tree_loop",
)
# name -> (bytes, the code the worker answers)
IN_THE_WORKER_CASES = {name: HOSTILE[name] for name in IN_THE_WORKER} | {
    "zip_appended": (POLYGLOTS["zip_appended"], "DOCUMENT_POLYGLOT")
}


def test_inspect_publishes_a_signed_inspection_whose_subject_is_the_input(documents, intake):
    acme, _ = tokens(documents)
    data = pdf_bytes(3, producer="intake tests")
    with client(intake, acme) as http:
        document = upload(http, data).json()
        job_id = submit(http, "inspect-1", {"operation": "inspect", "inputs": [document["document_id"]]}).json()[
            "job_id"
        ]
        [outcome] = dispatch(documents)
        assert (outcome.job_id, outcome.state, outcome.reason) == (job_id, "succeeded", None)
        assert dispatch(documents, "run-2") == []  # nothing left to page
        status = http.get(f"/v1/jobs/{job_id}").json()
        again = submit(http, "inspect-1", {"operation": "inspect", "inputs": [document["document_id"]]})
    assert again.status_code == 200 and again.json()["state"] == "succeeded"
    assert status["state"] == "succeeded" and status["attempts"] == 1 and status["reason"] is None
    assert status["started_at"] and status["finished_at"] and status["findings"] == {"pages": 3, "active_content": []}
    job = documents.document_jobs.job("acme", job_id)
    prefix = f"documents/acme/{job.period}/{job_id}"
    archive = documents.archive
    assert archive.list(prefix) == [f"{prefix}/inspection.json", f"{prefix}/statement.dsse.json"]
    assert {o["artifact_id"] for o in status["outputs"]} == set(archive.list(prefix))
    inspection = json.loads(archive.get(f"{prefix}/inspection.json"))
    assert inspection["input"] == {
        "document_id": document["document_id"],
        "sha256": document["sha256"],
        "bytes": len(data),
    }
    assert (inspection["pages"], inspection["producer"], inspection["active_content"]) == (3, "intake tests", [])
    keyring = documents.keyring
    opened = dsse.verify_envelope(
        archive.get(f"{prefix}/statement.dsse.json"),
        {keyring.statement_key_id: keyring.statement_key.public_key()},
        dsse.PAYLOAD_TYPE,
    )
    assert opened.key_ids == (keyring.statement_key_id,)
    statement = json.loads(opened.payload)
    assert statement["predicateType"] == PREDICATE_TYPE
    assert statement["subject"] == [
        {"name": f"document/{document['document_id']}", "digest": {"sha256": document["sha256"]}}
    ]
    outputs = {a["name"]: a["sha256"] for a in statement["predicate"]["artifacts"]}
    assert outputs == {
        "inspection.json": next(o["sha256"] for o in status["outputs"] if o["artifact_id"].endswith("inspection.json"))
    }
    [published] = documents.ledger.events_of_type("document.published", tenant="acme")
    assert published["subject_sha256"] == document["sha256"] and published["details"]["job_id"] == job_id
    assert documents.ledger.verify_chain() > 0


def test_active_content_is_flagged_when_asked(documents, intake):
    acme, _ = tokens(documents)
    with client(intake, acme) as http:
        document_id = upload(http, HOSTILE["javascript_open_action"][0]).json()["document_id"]
        job_id = submit(
            http, "flag", {"operation": "inspect", "inputs": [document_id], "options": {"active_content": "flag"}}
        ).json()["job_id"]
        [outcome] = dispatch(documents)
        status = http.get(f"/v1/jobs/{job_id}").json()
    assert outcome.state == "succeeded"
    assert status["findings"]["active_content"] == ["DOCUMENT_JAVASCRIPT"]


def test_permission_only_encryption_is_read_by_inspect_and_refused_by_what_writes(documents, intake):
    acme, _ = tokens(documents)
    with client(intake, acme) as http:
        document_id = upload(http, written(encrypted("", "AES-256"))).json()["document_id"]
        jobs = {
            op: submit(http, op, {"operation": op, "inputs": [document_id]}).json()["job_id"]
            for op in ("inspect", "contract-review")
        }
        outcomes = {o.job_id: (o.state, o.reason) for o in dispatch(documents)}
    assert outcomes[jobs["inspect"]] == ("succeeded", None)
    assert outcomes[jobs["contract-review"]] == ("rejected", "DOCUMENT_PERMISSIONS_ONLY")  # a decision, not a defect
    assert "send an unencrypted copy" in documents.document_jobs.job("acme", jobs["contract-review"]).last_message
    job = documents.document_jobs.job("acme", jobs["inspect"])
    inspection = json.loads(documents.archive.get(f"documents/acme/{job.period}/{jobs['inspect']}/inspection.json"))
    assert inspection["permissions_only_encryption"] is True


def test_hostile_documents_are_refused_with_their_code_and_nothing_published(documents, intake):
    acme, _ = tokens(documents)
    with client(intake, acme) as http:
        for name, data in NOT_PDF_AT_ADMISSION.items():
            refused = upload(http, data)
            assert (refused.status_code, error_code(refused)) == (415, "MEDIA_TYPE_UNSUPPORTED"), name
        jobs = {}
        for name, (data, _) in IN_THE_WORKER_CASES.items():
            admitted = upload(http, data)
            assert admitted.status_code == 201, (name, admitted.text)  # admission only sniffs: the worker does the rest
            jobs[name] = submit(http, name, {"operation": "inspect", "inputs": [admitted.json()["document_id"]]}).json()
        outcomes = {o.job_id: o for o in dispatch(documents)}
        for name, accepted in jobs.items():
            status = http.get(f"/v1/jobs/{accepted['job_id']}").json()
            expected = IN_THE_WORKER_CASES[name][1]
            assert (outcomes[accepted["job_id"]].state, outcomes[accepted["job_id"]].reason) == ("rejected", expected)
            assert (status["state"], status["reason"], status["outputs"]) == ("rejected", expected, []), name
            assert status["finished_at"] is not None
    messages = {
        name: documents.document_jobs.job("acme", accepted["job_id"]).last_message for name, accepted in jobs.items()
    }
    for name in ("javascript_open_action", "launch_action", "embedded_file", "xfa_form"):  # what to do about it
        assert 'the option {"active_content": "flag"} of inspect accepts it' in messages[name], name
    assert "a JBIG2 image (the service does not decode JBIG2)" in messages["jbig2_image"]  # a stated choice, named
    assert documents.archive.list("documents/acme") == []
    assert documents.ledger.events_of_type("document.published") == []
    assert len(documents.ledger.events_of_type("job.rejected", tenant="acme")) == len(IN_THE_WORKER_CASES)


def test_a_replayed_job_is_dispatched_again_under_a_new_run_key(documents, intake, tmp_path):
    acme, _ = tokens(documents)
    with client(intake, acme) as http:
        document_id = upload(http, HOSTILE["xfa_form"][0]).json()["document_id"]
        job_id = submit(http, "xfa", {"operation": "inspect", "inputs": [document_id]}).json()["job_id"]
    documents.pages.assign_pages(10)
    [(page_id, _, first)] = documents.pages.open_pages()
    [rejected] = run_page(documents, page_id, RunInfo("run-1"))
    assert (rejected.state, rejected.reason) == ("rejected", "DOCUMENT_XFA") and documents.pages.open_pages() == []
    Signers(documents.ledger, tmp_path / "actors").replay(job_id, "policy now allows XFA")  # attempts: 0
    [(same_page, _, again)] = documents.pages.open_pages()
    assert same_page == page_id and again != first


def test_a_dead_runs_job_is_paged_again_and_its_zombie_cannot_commit(documents, intake):
    acme, _ = tokens(documents)
    with client(intake, acme) as http:
        document_id = upload(http, pdf_bytes()).json()["document_id"]
        job_id = submit(http, "lease", {"operation": "inspect", "inputs": [document_id]}).json()["job_id"]
    ledger = documents.ledger
    documents.pages.assign_pages(10)
    [(page_id, _, generation)] = documents.pages.open_pages()
    live = ledger.acquire_lease(job_id, "other-run", 60)  # another run is working the job: not a failure of ours
    assert documents.pages.open_pages() == []
    [busy] = run_page(documents, page_id, RunInfo("run-1"))
    assert (busy.state, busy.reason) == ("running", "LEASE_BUSY")
    ledger.renew_lease(live, 0.2)  # ... and then that run dies: its lease runs out
    time.sleep(0.3)
    [(same_page, _, later)] = documents.pages.open_pages()
    assert same_page == page_id and later > generation  # a new run key for the same page
    [lost] = run_page(documents, page_id, RunInfo("run-2"))  # the dead run's attempt counts: retry_wait
    assert (lost.state, lost.reason) == ("accepted", "WORKER_LOST")
    make_due(documents, job_id)
    [outcome] = run_page(documents, page_id, RunInfo("run-3"))
    assert outcome.state == "succeeded"
    job = documents.document_jobs.job("acme", job_id)
    with pytest.raises(EvidenceError) as fenced:
        documents.document_jobs.complete(
            job, live, event_type="document.published", subject_sha256="0" * 64, outputs={}, actor="other-run"
        )
    assert fenced.value.code == "LEASE_FENCED"
    assert len(ledger.events_of_type("document.published")) == 1 and job.attempts == 2


def test_pages_hold_one_tenants_jobs_oldest_first(documents, intake):
    page_size = 2
    acme, globex = tokens(documents)
    with client(intake, acme) as http, client(intake, globex) as other:
        ids = [upload(http, pdf_bytes(n)).json()["document_id"] for n in (1, 2, 3)]
        for n, document_id in enumerate(ids):
            submit(http, f"k{n}", {"operation": "inspect", "inputs": [document_id]})
        theirs = upload(other, pdf_bytes()).json()["document_id"]
        submit(other, "k0", {"operation": "inspect", "inputs": [theirs]})
    documents.pages.assign_pages(page_size)
    pages = documents.pages.open_pages()
    assert sorted(tenant for _, tenant, _ in pages) == ["acme", "acme", "globex"]
    assert sorted(len(documents.pages.page_jobs(page_id)) for page_id, _, _ in pages) == [1, 1, 2]
    documents.pages.assign_pages(page_size)
    assert documents.pages.open_pages() == pages  # paging again changes nothing
