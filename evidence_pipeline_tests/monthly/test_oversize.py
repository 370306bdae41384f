"""An oversize report end to end on both backends: rendered to a file, gated, signed file to file, streamed to the
archive, verified. The ~500-page case takes about a minute on this machine, so it lives in bench/oversize_memory.py;
this one is just past the ~250 pages that the gate's old page-tree limit rejected."""

import pytest

from evidence_pipeline.audit.verify import verify_bundle
from evidence_pipeline.models import TenantMonth
from evidence_pipeline.monthly.pipeline import run_tenant_month
from evidence_pipeline.runtime import RunInfo
from evidence_pipeline.synthetic.demo_data import oversize_transactions
from evidence_pipeline_tests.support.fixture_sources import publish_revision

OVERSIZE = TenantMonth("oversize-books", "2026-10")


@pytest.mark.slow
def test_an_oversize_report_is_published_and_verifies(runtime):
    publish_revision(runtime, OVERSIZE, oversize_transactions(OVERSIZE, refunds=11_500))
    publication = run_tenant_month(runtime, OVERSIZE, RunInfo("test-oversize"))
    [validated] = runtime.ledger.events_about("report.validated", publication.unsigned_sha256)
    assert validated["details"]["pages"] > 256 and publication.report_size > 500_000
    assert verify_bundle(runtime.archive, publication.bundle_key).ok
    work = runtime.settings.work_dir
    assert not any(work.iterdir())  # render, gate and signing left no temporary file behind
