"""The only Dagster code: partitions, resources, assets, schedules, sensors, the run coordinator and storages."""

import os
import warnings

from dagster import BetaWarning, PreviewWarning

from evidence_pipeline.defs import backfill_wake, pool_wait, provenance, quiet_failures, range_runs, run_fork

# Backfill policies are beta in Dagster 1.13; we pin 1.13.27 and test range runs, so the warning says nothing new.
warnings.filterwarnings("ignore", category=BetaWarning, message="Parameter `backfill_policy`")
# So are owners on the sensors Dagster builds itself from the assets' automation (the assets name their owners).
warnings.filterwarnings("ignore", category=BetaWarning, message="Parameter `owners`")
# So are partitioned asset checks (checks.py: one verification result per tenant-month), tested the same way.
warnings.filterwarnings("ignore", category=PreviewWarning, message="Specifying a partitions_def on an AssetCheckSpec")

# A range run's step stores one materialization per partition; with batched writes they are stored together (on
# PostgreSQL one INSERT and one index transaction for the step's output, instead of ~6 statements per partition).
# Dagster reads this variable at every event, in the process that executes the run; an operator's value wins.
os.environ.setdefault("DAGSTER_EVENT_BATCH_SIZE", "1000")
# Range runs (BackfillPolicy.multi_run) record metadata per partition; see range_runs.py for why this is a patch.
range_runs.install()
# Each partition of a range run records its own data version and upstream events; see provenance.py.
provenance.install()
# A run waiting for a pool slot sleeps between its claims instead of spinning a core; see pool_wait.py.
pool_wait.install()
# A foreseeable step failure (a Failure with a reason code) reads as its one-line description, with no stack trace
# of Dagster's frames; unexpected errors keep theirs. See quiet_failures.py.
quiet_failures.install()
# The backfill daemon starts a newly requested backfill within a second instead of at its 30 s tick (in the
# daemon, which imports this package with dagster.yaml's storage classes); see backfill_wake.py.
backfill_wake.install()
# The code server forks each run from a process that has imported this code location instead of spawning a fresh
# interpreter (in the code server, which imports this package when it loads the location); see run_fork.py.
run_fork.install()
