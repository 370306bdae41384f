"""Intake: the authenticated HTTP front door (Starlette on uvicorn), its tokens and its admission gates.

The server only admits: it writes the document store and the ledger (and publishes tenants' source files through
the one publication path, sources_api.py), and never parses a PDF, renders or signs.
It imports no Dagster; the workers that process admitted jobs run in Dagster (defs/documents.py).
"""
