"""The only Dagster definitions: partitions, resources, assets, checks, schedules, sensors and the run queue's
policy. Dagster's extensions and the guarded patches of its internals are evidence_pipeline.defs.extensions,
imported (so installed) here."""

import warnings

from dagster import BetaWarning, PreviewWarning

import evidence_pipeline.defs.extensions  # noqa: F401  (installs the guarded patches)

# Backfill policies are beta in Dagster 1.13; we pin 1.13.27 and test range runs, so the warning says nothing new.
warnings.filterwarnings("ignore", category=BetaWarning, message="Parameter `backfill_policy`")
# So are owners on the sensors Dagster builds itself from the assets' automation (the assets name their owners).
warnings.filterwarnings("ignore", category=BetaWarning, message="Parameter `owners`")
# So are partitioned asset checks (checks.py: one verification result per tenant-month), tested the same way.
warnings.filterwarnings("ignore", category=PreviewWarning, message="Specifying a partitions_def on an AssetCheckSpec")
