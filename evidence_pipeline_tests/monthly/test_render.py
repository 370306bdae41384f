import hashlib
import os
import subprocess
import sys

from evidence_pipeline.monthly.render import RENDERER_VERSION
from evidence_pipeline_tests.support.fixture_sources import LARGE, SMALL
from evidence_pipeline_tests.support.render import render

_RENDER_IN_CHILD = """
import sys
from pathlib import Path
from evidence_pipeline.store.local import LocalStore
from evidence_pipeline.monthly import sources
from evidence_pipeline.models import TenantMonth
from evidence_pipeline.monthly.render import render_report
store = LocalStore(Path(sys.argv[1]))
revision = sources.pin_latest(store, TenantMonth(sys.argv[2], sys.argv[3]))
sys.stdout.write(render_report(revision, sources.read_revision(store, revision)).sha256)
"""


def test_render_is_byte_identical_across_processes_and_environments(local_runtime):
    _, report = render(local_runtime, LARGE)
    digests = set()
    for extra_env in ({}, {"SOURCE_DATE_EPOCH": "1234567890", "TZ": "Asia/Tokyo"}):
        child = subprocess.run(
            [sys.executable, "-c", _RENDER_IN_CHILD, local_runtime.settings.sources_uri, LARGE.tenant, LARGE.period],
            env=os.environ | extra_env,
            capture_output=True,
            text=True,
            check=True,
        )
        digests.add(child.stdout)
    assert digests == {report.sha256} == {hashlib.sha256(report.pdf).hexdigest()}


def test_report_is_a_real_report(local_runtime):
    revision, report = render(local_runtime, SMALL)
    assert report.pdf.startswith(b"%PDF-") and report.pages >= 3
    assert report.renderer_version == RENDERER_VERSION and report.source_sha256 == revision.sha256
    _, large = render(local_runtime, LARGE)
    assert large.pages > report.pages
    assert os.environ.get("SOURCE_DATE_EPOCH") is None  # the build pins it temporarily, then restores it
