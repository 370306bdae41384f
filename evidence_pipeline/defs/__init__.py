"""The only Dagster code: partitions, resources, assets, checks, schedules and sensors over the domain modules."""

import warnings

from dagster import PreviewWarning

# The report gate is a partitioned asset check, which Dagster 1.13 marks as preview; we pin 1.13.27 and test it.
warnings.filterwarnings("ignore", category=PreviewWarning, message="Specifying a partitions_def on an AssetCheckSpec")

from evidence_pipeline.defs import range_runs  # noqa: E402  (after the filter: importing defs modules is quiet)

# Range runs (BackfillPolicy.multi_run) record metadata per partition; see range_runs.py for why this is a patch.
range_runs.install()
