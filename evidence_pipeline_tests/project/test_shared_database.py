"""The documented production one-liner (docs/operators/production.md): one PostgreSQL database for Dagster and
the ledger, S3 for the stores.

Issue 16, finding 12: with DAGSTER_PG_URL equal to EVIDENCE_LEDGER_URL, `evidence demo` died on
`relation "jobs" already exists` (Dagster's schedule storage has a `jobs` table too). This runs exactly what the
docs show: the `evidence` command in a fresh process, DAGSTER_HOME left for it to seed with
dagster.production.yaml, on one fresh embedded PostgreSQL database and a moto S3 bucket.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from evidence_pipeline.synthetic.demo_data import DEMO_TENANTS
from evidence_pipeline_tests.support.backends import aws_environment

EVIDENCE = str(Path(sys.executable).parent / "evidence")


def _evidence(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([EVIDENCE, *args], env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_the_documented_production_one_liner_publishes_and_the_ledger_verifies(request, tmp_path):
    backend = aws_environment(request, tmp_path)
    shared = backend["EVIDENCE_LEDGER_URL"]
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"} | backend | {"DAGSTER_PG_URL": shared}

    demo = _evidence(env, "demo", "--months", "1")
    assert demo.returncode == 0, demo.stderr[-3000:]
    assert "Traceback" not in demo.stderr
    assert f"{len(DEMO_TENANTS)} bundles ({len(DEMO_TENANTS)} newly published" in demo.stdout

    verified = _evidence(env, "ledger", "verify")
    assert verified.returncode == 0, verified.stderr[-3000:]
    assert "ledger verified" in verified.stdout

    engine = sa.create_engine(shared)
    try:
        tables = set(sa.inspect(engine).get_table_names())
        with engine.connect() as conn:
            published = conn.execute(sa.text("SELECT count(*) FROM evidence_publications")).scalar()
            dagster_runs = dict(
                conn.execute(
                    sa.text("SELECT pipeline_name, count(*) FROM runs WHERE status = 'SUCCESS' GROUP BY pipeline_name")
                ).all()
            )
    finally:
        engine.dispose()
    assert {"jobs", "runs", "event_logs", "evidence_jobs", "evidence_audit_events"} <= tables  # side by side
    assert published == len(DEMO_TENANTS)  # one run per tenant for its month, and one for its documents' page
    # three document page runs per tenant: its documents, its agreement's part reviews, the merge of the parts
    assert dagster_runs == {"monthly_evidence": len(DEMO_TENANTS), "document_page_job": 3 * len(DEMO_TENANTS)}
