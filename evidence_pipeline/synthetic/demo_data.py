"""Deterministic demo marketplace data: the same tenant-month always yields the same transactions."""

from __future__ import annotations

import calendar
import random

import pandas as pd

from evidence_pipeline.models import TenantMonth

# tenant -> (orders per month, currencies); one tenant is much larger than the rest
DEMO_TENANTS: dict[str, tuple[int, tuple[str, ...]]] = {
    "acme-books": (140, ("EUR",)),
    "baltic-crafts": (260, ("EUR", "SEK", "PLN")),
    "cobalt-cycles": (90, ("GBP", "EUR")),
    "delta-foods": (420, ("USD",)),
    "evergreen-market": (4200, ("EUR", "USD", "GBP", "CHF")),
}
# The refunds table prints ~44 rows a page, so this many refunds make a ~500-page report (bench/oversize_memory.py).
OVERSIZE_REFUNDS = 22_400


def demo_transactions(tenant_month: TenantMonth) -> pd.DataFrame:
    orders_per_month, currencies = DEMO_TENANTS[tenant_month.tenant]
    rng = random.Random(f"{tenant_month.tenant}:{tenant_month.period}")
    days = calendar.monthrange(tenant_month.year, tenant_month.month)[1]
    seasonal = 1.0 + 0.25 * (tenant_month.month in (11, 12)) - 0.1 * (tenant_month.month in (1, 2))
    rows = []

    def add(kind: str, day: int, currency: str, amount: int, channel: str) -> None:
        rows.append((f"T{len(rows) + 1:07d}", f"{tenant_month.period}-{day:02d}", kind, currency, amount, channel))

    for _ in range(int(orders_per_month * seasonal * rng.uniform(0.9, 1.1))):
        day, currency = rng.randint(1, days), rng.choice(currencies)
        amount = int(rng.lognormvariate(8.2, 0.7))  # ~36.00 median, long tail
        channel = rng.choices(("web", "app", "marketplace"), weights=(5, 3, 2))[0]
        add("order", day, currency, amount, channel)
        add("fee", day, currency, max(1, amount * 29 // 1000 + 25), channel)  # 2.9% + 0.25
        if rng.random() < 0.04:
            add("refund", min(days, day + rng.randint(1, 10)), currency, amount, channel)
    for currency in currencies:
        for day in (days // 2, days):  # twice-monthly payouts
            add("payout", day, currency, rng.randint(1_000, 5_000) * 100, "marketplace")
    return pd.DataFrame(rows, columns=["txn_id", "booked_on", "kind", "currency", "amount_minor", "channel"])


def oversize_transactions(tenant_month: TenantMonth, refunds: int = OVERSIZE_REFUNDS) -> pd.DataFrame:
    """A deterministic, refund-heavy tenant-month whose report runs to hundreds of pages (one row per refund)."""
    rng = random.Random(f"oversize:{tenant_month.tenant}:{tenant_month.period}:{refunds}")
    days = calendar.monthrange(tenant_month.year, tenant_month.month)[1]
    rows = []
    for _ in range(refunds):
        day, currency = rng.randint(1, days), rng.choice(("EUR", "USD"))
        amount = int(rng.lognormvariate(8.2, 0.7))
        booked_on = f"{tenant_month.period}-{day:02d}"
        for kind, amount_minor in (("order", amount), ("fee", max(1, amount * 29 // 1000 + 25)), ("refund", amount)):
            rows.append((f"T{len(rows) + 1:07d}", booked_on, kind, currency, amount_minor, "web"))
    return pd.DataFrame(rows, columns=["txn_id", "booked_on", "kind", "currency", "amount_minor", "channel"])
