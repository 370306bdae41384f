"""What operators run by hand or on a schedule, over the ledger and the stores: periodic upkeep (maintenance.py:
the signed checkpoint and the sweep of abandoned attempt directories), tenant offboarding (offboarding.py), the
import of a file of tenant ids into the registry (tenant_file.py), stage latency percentiles (stats.py) and the
dead letters: failed jobs with the next step for each kind (dead_letters.py). Each is
plain Python that the CLI and the Dagster jobs call; none holds state of its own."""
