from __future__ import annotations

import shutil

import pytest

from evidence_pipeline.config import Settings
from evidence_pipeline.demo_data import demo_transactions
from evidence_pipeline.models import TenantMonth
from evidence_pipeline.pipeline import Runtime
from evidence_pipeline.sources import publish_revision

SMALL = TenantMonth("acme-books", "2026-10")
LARGE = TenantMonth("evergreen-market", "2026-10")


def require_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (make test installs it)")
    return path


@pytest.fixture
def settings(tmp_path) -> Settings:
    return Settings.from_env({"EVIDENCE_HOME": str(tmp_path / "home")})


@pytest.fixture
def runtime(settings) -> Runtime:
    runtime = Runtime.from_settings(settings)
    for tenant_month in (SMALL, LARGE, TenantMonth("acme-books", "2026-09")):
        publish_revision(runtime.sources, tenant_month, demo_transactions(tenant_month))
    return runtime
