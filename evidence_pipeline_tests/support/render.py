"""A fixture month's report rendered from its latest source revision."""

from __future__ import annotations

from evidence_pipeline.monthly import sources
from evidence_pipeline.monthly.render import render_report


def render(local_runtime, tenant_month):
    revision = sources.pin_latest(local_runtime.sources, tenant_month)
    return revision, render_report(revision, sources.read_revision(local_runtime.sources, revision))
