"""Removing a run's tags, which Dagster 1.13 has no API for (``add_run_tags`` only adds or overwrites).

The run queue (defs/coordinator.py) removes the per-dimension partition tags that Dagster copies into every range
run of a job backfill (upstream dagster-io/dagster#28861, #30786) before the run is queued. The rewrite writes the
run row and its tag rows the way ``SqlRunStorage.add_run_tags`` does, for SQL run storages only, and only while that
method's source is as checked (guard.py; test_fairness.py fails until it is re-checked).
"""

import dagster
from dagster import DagsterRun
from dagster._core.storage.runs.schema import RunsTable, RunTagsTable
from dagster._core.storage.runs.sql_run_storage import SqlRunStorage
from dagster_shared.serdes import serialize_value

from evidence_pipeline.defs.extensions.guard import still_checked

CHECKED_ADD_RUN_TAGS_SHA256 = "a681180ccedf1f37890e3bba003b0b45997911cb33caa9a38cb2520d82cde629"


def remove_run_tags(instance: dagster.DagsterInstance, run: DagsterRun, keys: list[str]) -> DagsterRun:
    """``run`` stored without the tags ``keys``, before it is queued (so nothing else writes it meanwhile)."""
    storage = instance.run_storage
    if not isinstance(storage, SqlRunStorage) or not still_checked(
        __name__,
        "not removing contradicting partition tags; such runs fail RUN_PARTITIONS_MISMATCH",
        {SqlRunStorage.add_run_tags: CHECKED_ADD_RUN_TAGS_SHA256},
    ):
        return run
    stripped = run.with_tags({key: value for key, value in run.tags.items() if key not in keys})
    with storage.connect() as conn:
        conn.execute(
            RunsTable.update().where(RunsTable.c.run_id == run.run_id).values(run_body=serialize_value(stripped))
        )
        conn.execute(RunTagsTable.delete().where(RunTagsTable.c.run_id == run.run_id, RunTagsTable.c.key.in_(keys)))
    return instance.get_run_by_id(run.run_id)
