"""What operators run by hand or on a schedule, over the ledger and the stores: periodic upkeep (maintenance.py:
the signed checkpoint and the sweep of abandoned attempt directories), tenant offboarding (offboarding.py), the
import of a file of tenant ids into the registry (tenant_file.py) and stage latency percentiles (stats.py). Each is
plain Python that the CLI and the Dagster jobs call; none holds state of its own."""
