"""Fixture months published as every source is: through the one publication path (monthly/publication.py), so
each revision has its `source.published` event, by an unsigned publisher named "fixture" (as the landing sensor
and the tenant API publish, without an operator's request). Its tenant is registered first, unsigned by "fixture"
as well, when the tenant registry does not hold it: a month's evidence is made only for a registered tenant.
FIXTURE_MONTHS are the months the runtime fixtures (conftest.py) publish before a test starts."""

from __future__ import annotations

import functools

import pandas as pd

from evidence_pipeline.models import SourceRevision, TenantMonth
from evidence_pipeline.monthly import publication
from evidence_pipeline.runtime import Runtime
from evidence_pipeline.synthetic.demo_data import demo_transactions

FIXTURE = publication.Publisher("fixture", correlation_id="fixture")


def publish_revision(rt: Runtime, tenant_month: TenantMonth, frame: pd.DataFrame) -> SourceRevision:
    """Publish ``frame`` as a revision of ``tenant_month`` (the existing one when it holds the same rows)."""
    registry = rt.tenants
    if tenant_month.tenant not in registry.standing([tenant_month.tenant]):

        def register(conn):
            rt.ledger.pin_chain_head(conn)  # registrations racing from other processes converge on one
            return registry.register(conn, [tenant_month.tenant], FIXTURE.actor, {})

        rt.ledger._transact(register)
    return publication.publish(rt, publication.prepare_frame(tenant_month, frame), FIXTURE).revision


SMALL = TenantMonth("acme-books", "2026-10")
LARGE = TenantMonth("evergreen-market", "2026-10")
FIXTURE_MONTHS = (SMALL, LARGE, TenantMonth("acme-books", "2026-09"))
# The events the fixture sources append before a test's own: one `tenant.registered` per fixture tenant (the
# fixture registers it), one `source.published` per fixture month.
FIXTURE_EVENTS = len({tenant_month.tenant for tenant_month in FIXTURE_MONTHS}) + len(FIXTURE_MONTHS)


@functools.cache
def _fixture_transactions(tenant_month: TenantMonth) -> pd.DataFrame:
    return demo_transactions(tenant_month)  # deterministic: generated once per process, not once per test


def with_fixture_sources(runtime: Runtime) -> Runtime:
    """``runtime``, with the demo's transactions published for every one of FIXTURE_MONTHS."""
    for tenant_month in FIXTURE_MONTHS:
        publish_revision(runtime, tenant_month, _fixture_transactions(tenant_month).copy())
    return runtime
