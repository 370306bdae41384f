"""Intake: the authenticated HTTP front door (Starlette on uvicorn), its tokens and its admission gates.

The server only admits: it writes the document store and the ledger (and publishes tenants' source files through
the one publication path, sources_api.py), and never parses a PDF, renders or signs.
It imports no Dagster; the workers that process admitted jobs run in Dagster (defs/documents.py).
"""

from __future__ import annotations

from evidence_pipeline.config import Settings
from evidence_pipeline.documents import Documents
from evidence_pipeline.runtime import runtime_for


def open_documents(settings: Settings) -> Documents:
    """Documents on ``settings``, without Dagster (this process's runtime for them)."""
    return Documents.open(runtime_for(settings))
