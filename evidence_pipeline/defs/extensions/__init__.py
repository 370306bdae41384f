"""Our extensions of Dagster and the guarded patches of its internals: the only code that imports ``dagster._…``.

defs/ defines what runs (assets, checks, jobs, schedules, sensors, the resource, the run queue's policy); this
package holds what changes how Dagster itself runs them, each module with the upstream issue or the reason it
exists in its docstring:

- patches, each applied only to the Dagster version and source it was checked against (guard.py), installed when
  this package is imported: range_runs.py, provenance.py, pool_wait.py, quiet_failures.py, backfill_wake.py,
  run_fork.py;
- classes dagster.yaml names: the pooled storages (storage.py);
- helpers on Dagster's internals for the definitions: the slots of in-process runs (slots.py), run tags Dagster has no
  API to remove (run_tags.py), and the names Dagster does not export that defs/ uses (unexported.py).

Every process that loads the code location imports it through defs/, and so does every process that loads
dagster.yaml's storage classes (the daemon, the webserver), whether or not it loads the location.
"""

import os

from evidence_pipeline.defs.extensions import (
    backfill_wake,
    pool_wait,
    provenance,
    quiet_failures,
    range_runs,
    run_fork,
)

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
