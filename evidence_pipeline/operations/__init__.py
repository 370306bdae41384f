"""What operators run by hand or on a schedule, over the ledger and the stores: periodic upkeep (maintenance.py:
the signed checkpoint and the sweep of abandoned attempt directories), tenant offboarding (offboarding.py),
replaying a job (replay.py), the dead letters: failed jobs with the next step for each kind (dead_letters.py),
rotating and revoking the service's signing keys (signing_keys.py), the import of a file of tenant ids into the
registry (tenant_file.py) and stage latency percentiles (stats.py). Each is plain Python that the CLI and the Dagster
jobs call; none holds state of its own. A privileged action takes its actor's signed request and runs through the
action gate (evidence_pipeline/actors/authorize.py)."""
