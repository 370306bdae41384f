"""A run whose step waits for a pool slot sleeps until its next claim instead of spinning
(defs/extensions/pool_wait.py)."""

from pathlib import Path

import pytest
import yaml
from dagster import instance_for_test
from dagster._core.execution.plan.instance_concurrency_context import InstanceConcurrencyContext
from dagster._core.storage.dagster_run import DagsterRun

from evidence_pipeline.defs.extensions import pool_wait
from evidence_pipeline_tests.support.guarded_patch import assert_patched_only_on_the_checked_dagster

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def instance(tmp_path):
    with instance_for_test(
        overrides=yaml.safe_load((REPO / "dagster.yaml").read_text()), temp_dir=str(tmp_path)
    ) as instance:
        yield instance


def _hold_every_slot(instance, pool: str) -> None:
    """Another run holds every slot of ``pool`` (dagster.yaml's default_limit)."""
    storage = instance.event_log_storage
    storage.initialize_concurrency_limit_to_default(pool)
    for step in range(storage.get_concurrency_info(pool).slot_count):
        assert storage.claim_concurrency_slot(pool, "holding-run", f"step-{step}").is_claimed


def test_a_step_blocked_on_a_pool_sleeps_until_its_next_claim(instance):
    assert pool_wait.install()
    _hold_every_slot(instance, "render")
    with InstanceConcurrencyContext(instance, DagsterRun(job_name="monthly_evidence", run_id="waiting-run")) as wait:
        assert not wait.claim("render", "monthly_report")
        # Dagster 1.13.27 returns min(0, ...) here, so its executor loop never sleeps between claims.
        assert 0 < wait.interval_to_next_pending_claim_check() <= 1  # the first claim's timeout: 1 s
        assert not wait.claim("render", "monthly_report")  # before the timeout: no new claim, still waiting
    assert wait.interval_to_next_pending_claim_check() == 0  # nothing pending once the context has ended


def test_the_patch_applies_only_to_the_checked_dagster(monkeypatch):
    assert_patched_only_on_the_checked_dagster(
        monkeypatch,
        pool_wait.install,
        InstanceConcurrencyContext,
        "interval_to_next_pending_claim_check",
        pool_wait._dagster_interval,
    )
