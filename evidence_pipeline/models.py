"""Plain, frozen value types shared by every stage."""

from __future__ import annotations

import re
from dataclasses import dataclass

from evidence_pipeline.errors import EvidenceError

TENANT_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
PERIOD = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])$")


def validate_tenant_id(tenant: str) -> str:
    """Tenant ids are the only user-supplied text that ever reaches a path, key or partition."""
    if not isinstance(tenant, str) or not TENANT_ID.fullmatch(tenant):
        raise EvidenceError("TENANT_ID_INVALID", "tenant id must match ^[a-z0-9][a-z0-9-]{0,62}$")
    return tenant


def validate_period(period: str) -> str:
    if not isinstance(period, str) or not PERIOD.fullmatch(period):
        raise EvidenceError("PERIOD_INVALID", "period must be YYYY-MM")
    return period


@dataclass(frozen=True)
class TenantMonth:
    tenant: str
    period: str  # YYYY-MM

    def __post_init__(self) -> None:
        validate_tenant_id(self.tenant)
        validate_period(self.period)

    @property
    def year(self) -> int:
        return int(self.period[:4])

    @property
    def month(self) -> int:
        return int(self.period[5:])

    def __str__(self) -> str:
        return f"{self.tenant}/{self.period}"


@dataclass(frozen=True)
class SourceRevision:
    """An immutable source revision, named by the sha256 of its canonical bytes."""

    tenant_month: TenantMonth
    sequence: int  # publication order within the tenant-month, starting at 1
    sha256: str
    size: int
    key: str  # key in the source store


@dataclass(frozen=True)
class RenderedReport:
    """A deterministic, unsigned report: the same revision and renderer version give the same bytes."""

    tenant_month: TenantMonth
    source_sha256: str
    renderer_version: str
    pdf: bytes
    sha256: str
    pages: int
