"""Month close: a tenant-month's document outcomes are pinned once and flow into its signed evidence."""

from __future__ import annotations

import json

import pytest
from pypdf import PdfReader

from evidence_pipeline.audit.verify import verify_bundle
from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.models import TenantMonth
from evidence_pipeline.monthly.document_outcomes import OutcomesRevision, read_outcomes
from evidence_pipeline.monthly.pipeline import run_tenant_month
from evidence_pipeline.runtime import RunInfo
from evidence_pipeline.store import readable
from evidence_pipeline.synthetic.demo_data import demo_transactions
from evidence_pipeline_tests.support.document_jobs import dispatch
from evidence_pipeline_tests.support.fixture_sources import publish_revision
from evidence_pipeline_tests.support.intake_server import client, pdf_bytes, submit, tokens, upload
from evidence_pipeline_tests.support.tampering import overwrite

RUN = RunInfo("month-close")


def test_the_closed_document_outcomes_are_rendered_signed_and_named_in_the_bundle(documents, intake):
    acme, _ = tokens(documents)
    rt = documents
    with client(intake, acme) as http:
        document = upload(http, pdf_bytes(2)).json()
        inspect = {"operation": "inspect", "inputs": [document["document_id"]]}
        job_id = submit(http, "before-close", inspect).json()["job_id"]
        dispatch(documents)
        status = http.get(f"/v1/jobs/{job_id}").json()
        month = TenantMonth("acme", documents.document_jobs.job("acme", job_id).period)
        publish_revision(rt, month, demo_transactions(TenantMonth("acme-books", month.period)))
        publication = run_tenant_month(rt, month, RUN)
        late = submit(http, "after-close", inspect | {"options": {"active_content": "flag"}}).json()["job_id"]
        dispatch(documents, "run-2")
    assert status["state"] == "succeeded" and len(status["outputs"]) == 2

    manifest = json.loads(rt.archive.get(f"{publication.bundle_key}/manifest.json"))
    closed_sha256 = manifest["document_outcomes"]["sha256"]
    assert {"step": "document_outcomes", "sha256": closed_sha256} in manifest["lineage"]
    [key] = [k for k in rt.sources.list(f"acme/{month.period}") if k.endswith(f"{closed_sha256}.json")]
    closed = OutcomesRevision(month, closed_sha256, key)
    jobs = read_outcomes(rt.sources, closed)
    # the job that finished before the close, with every output's digest; the one accepted after it is not there
    assert [job["job_id"] for job in jobs] == [job_id] and late != job_id
    assert jobs[0]["state"] == "succeeded" and jobs[0]["inputs"] == [document["document_id"]]
    assert jobs[0]["outputs"] == [{"artifact_id": o["artifact_id"], "sha256": o["sha256"]} for o in status["outputs"]]

    report = PdfReader(readable(rt.archive.get(f"{publication.bundle_key}/report.pdf")))
    text = "\n".join(page.extract_text() for page in report.pages)
    assert "Document jobs (1)" in text and closed_sha256 in text
    assert all(output["sha256"] in text for output in status["outputs"])
    assert verify_bundle(rt.archive, publication.bundle_key).ok

    # closed once: a later run of the month pins the same revision and converges on the same bundle
    again = run_tenant_month(rt, month, RunInfo("month-close-again"))
    assert again.identity == publication.identity and not again.created
    assert [k for k in rt.sources.list(f"acme/{month.period}") if "documents-" in k] == [key]

    overwrite(rt, key, b'{"schema": "evidence-document-outcomes/v1", "jobs": []}', rt.sources)
    with pytest.raises(EvidenceError) as error:
        read_outcomes(rt.sources, closed)
    assert error.value.code == "SOURCE_DIGEST_MISMATCH"


def test_a_month_without_document_jobs_closes_empty_and_says_so(runtime):
    publication = run_tenant_month(runtime, TenantMonth("acme-books", "2026-10"), RUN)
    report = PdfReader(readable(runtime.archive.get(f"{publication.bundle_key}/report.pdf")))
    text = report.pages[-1].extract_text()
    assert "Document jobs (0)" in text and "No document jobs were accepted" in text
    assert publication.documents_sha256 in text
