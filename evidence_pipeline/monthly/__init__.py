"""The monthly evidence of a tenant: a pinned, immutable source revision (sources.py; its file format and checks in
source_format.py; published by the one publication path, publication.py, which the CLI, the tenant API and the
landing location, landing.py, call) rendered to a deterministic PDF (render.py), validated by the report gate
(validate.py), signed and published as a bundle exactly once (pipeline.py, bundle.py), with the month's document
jobs closed into one revision (document_outcomes.py). Plain Python: Dagster runs it from defs/.
"""
