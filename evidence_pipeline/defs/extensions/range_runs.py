"""A version-guarded patch for range runs: ``add_asset_metadata(..., partition_key=pk)`` costs O(range) per call.

In Dagster 1.13.27, ``StepExecutionContext.add_asset_metadata`` validates ``partition_key`` by expanding the run's
whole partition range (``get_partition_keys_in_range``, reloading the dynamic ``tenant`` partitions from storage)
on every call. A multi_run asset records metadata once per partition, so a step costs O(range²): measured by
bench/range_overhead.py at tens of ms per partition and growing with the range. Dagster offers no extension point
for it (the check is inline in the method), hence this patch: the same method, with the targeted partitions
computed once per step. Anything it does not recognise as a valid call (no partition, unknown asset or partition)
goes to Dagster's original, which raises Dagster's own error.

It applies only to the exact version and source it was checked against; otherwise it warns and leaves Dagster
alone (correct, only slower). evidence_pipeline_tests/defs/test_range_runs.py fails until it is re-checked.
"""

from dagster._core.definitions.events import AssetKey
from dagster._core.definitions.partitions.context import partition_loading_context
from dagster._core.execution.context.system import StepExecutionContext

from evidence_pipeline.defs.extensions.guard import patch

# sha256 of inspect.getsource(StepExecutionContext.add_asset_metadata) in dagster==1.13.27.
CHECKED_SOURCE_SHA256 = "6dff312134cdce21b8831a8093fcea9090b7a650b4db4ded5d1d4600a085447e"
_CACHE = "_evidence_targeted_partitions"

_dagster_add_asset_metadata = StepExecutionContext.add_asset_metadata


def _targeted_partitions(context: StepExecutionContext) -> frozenset[str]:
    targeted = context.__dict__.get(_CACHE)
    if targeted is None:
        with partition_loading_context(dynamic_partitions_store=context.instance):
            targeted = frozenset(
                context.assets_def.partitions_def.get_partition_keys_in_range(
                    partition_key_range=context.partition_key_range
                )
            )
        context.__dict__[_CACHE] = targeted
    return targeted


def add_asset_metadata(self: StepExecutionContext, metadata, asset_key=None, partition_key=None) -> None:
    assets_def = self.assets_def
    if partition_key and assets_def is not None and assets_def.partitions_def is not None:
        key = (
            AssetKey.from_coercible(asset_key) if asset_key else (assets_def.key if len(assets_def.keys) == 1 else None)
        )
        if key in assets_def.keys and partition_key in _targeted_partitions(self):
            # What Dagster's method does after its checks pass.
            self._metadata_accumulator = self._metadata_accumulator.with_additional_asset_metadata(
                asset_key=key, metadata=metadata, partition_key=partition_key
            )
            return
    _dagster_add_asset_metadata(self, metadata, asset_key=asset_key, partition_key=partition_key)


def install() -> bool:
    """Patch StepExecutionContext.add_asset_metadata if Dagster is the checked version; True when patched."""
    return patch(
        StepExecutionContext,
        "add_asset_metadata",
        add_asset_metadata,
        what=__name__,
        consequence="not patching add_asset_metadata (range runs stay O(range²))",
        sources={_dagster_add_asset_metadata: CHECKED_SOURCE_SHA256},
    )
