"""Signed, tamper-evident monthly compliance evidence per tenant, orchestrated by Dagster. The domain is plain
Python in the packages below (monthly/, documents/, audit/, ledger/, signing/, store/, synthetic/); intake/ and
the command line are its front doors, and defs/ (the definitions, assembled by definitions.py) over
defs/extensions/ (Dagster's extensions and guarded patches) is the only Dagster code."""
