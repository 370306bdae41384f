"""Intake: the authenticated HTTP front door (Starlette on uvicorn), its tokens and its admission gates.

The server only admits: it writes the document store and the ledger, and never parses a PDF, renders or signs.
It imports no Dagster; the workers that process admitted jobs run in Dagster (defs/documents.py).
"""

from __future__ import annotations

import os

from evidence_pipeline.config import Settings
from evidence_pipeline.documents import Documents
from evidence_pipeline.pipeline import Runtime


def open_documents(settings: Settings) -> Documents:
    """Documents on ``settings``, without Dagster: S3 clients come straight from boto3 (the standard AWS chain)."""
    client = None
    if settings.uses_s3:
        import boto3

        client = boto3.client("s3", endpoint_url=settings.s3_endpoint_url, region_name=settings.s3_region)
    runtime = Runtime.from_settings(
        settings, generate_dev_keys=os.environ.get("EVIDENCE_GENERATE_DEV_KEYS", "1") != "0", s3_client=client)
    return Documents.open(runtime, client)
