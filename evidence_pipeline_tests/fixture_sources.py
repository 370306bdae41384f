"""Fixture months published as every source is: through the one publication path (monthly/publication.py), so
each revision has its `source.published` event, by an unsigned publisher named "fixture" (as the landing sensor
and the tenant API publish, without an operator's request)."""

from __future__ import annotations

import pandas as pd

from evidence_pipeline.models import SourceRevision, TenantMonth
from evidence_pipeline.monthly import publication
from evidence_pipeline.runtime import Runtime

FIXTURE = publication.Publisher("fixture", correlation_id="fixture")


def publish_revision(rt: Runtime, tenant_month: TenantMonth, frame: pd.DataFrame) -> SourceRevision:
    """Publish ``frame`` as a revision of ``tenant_month`` (the existing one when it holds the same rows)."""
    return publication.publish(rt, publication.prepare_frame(tenant_month, frame), FIXTURE).revision
