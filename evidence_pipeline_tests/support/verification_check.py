"""The offline_verification asset check as a run of its own."""

from __future__ import annotations

from dagster import AssetCheckKey

from evidence_pipeline.definitions import defs
from evidence_pipeline.defs.assets import evidence_bundle
from evidence_pipeline.defs.checks import CHECK_NAME

CHECK = AssetCheckKey(evidence_bundle.key, CHECK_NAME)
# A run of the asset job with only the check: with a partition, or with none (the UI's "Execute all").
CHECK_ONLY = defs.resolve_implicit_global_asset_job_def().get_subset(
    asset_selection=set(), asset_check_selection={CHECK}
)
