"""Names of Dagster 1.13 that defs/ uses and `dagster` does not export (no patch: values and a record type).

- The run tags of a range run (``dagster/asset_partition_range_start`` / ``_end``) and the prefix of a run's
  per-dimension partition tags (``dagster/partition/<dimension>``): a run launched outside a backfill (the demo, a
  test, a sensor's range run) carries them as a backfill's run does, and the run queue reads them
  (defs/partitions.py).
- ``AssetCheckEvaluationTargetMaterializationData``: the pointer from a check evaluation to the materialization it
  evaluated, which the bundle step records for the check (defs/verdicts.py).

Imported from Dagster, not spelled again, so that a rename upstream fails at import instead of silently.
"""

from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluationTargetMaterializationData,
)
from dagster._core.storage.tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    MULTIDIMENSIONAL_PARTITION_PREFIX,
)

__all__ = [
    "ASSET_PARTITION_RANGE_END_TAG",
    "ASSET_PARTITION_RANGE_START_TAG",
    "AssetCheckEvaluationTargetMaterializationData",
    "MULTIDIMENSIONAL_PARTITION_PREFIX",
]
