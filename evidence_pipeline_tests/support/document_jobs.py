"""Document jobs driven as the sensor, the run and the clock would drive them, without waiting for them."""

from __future__ import annotations

import time

from evidence_pipeline.documents.review import SIGNED
from evidence_pipeline.documents.worker import run_page
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.runtime import RunInfo


def dispatch(documents, run_id: str = "run-1") -> list:
    """What the sensor and the document job do, without Dagster: page the accepted jobs and work every page."""
    documents.pages.assign_pages(documents.settings.document_page_size)
    return [
        outcome
        for page_id, _, _ in documents.pages.open_pages()
        for outcome in run_page(documents, page_id, RunInfo(run_id))
    ]


def make_due(documents, job_id: str) -> None:
    """The clock reaches a job's next_attempt_at (its retry_wait ends now), without waiting for it."""
    jobs = documents.ledger.jobs
    with documents.ledger.writing() as conn:
        conn.execute(jobs.update().where(jobs.c.job_id == job_id).values(next_attempt_at=time.time()))


class AmbiguousArchive:
    """The archive, except that storing the approval reports a timeout after the object was stored (an S3 answer
    lost on the way back): the same protocol as the real store, which does all the work."""

    def __init__(self, archive):
        self.archive = archive

    def __getattr__(self, name):
        return getattr(self.archive, name)

    def put_file(self, key, file, *args, **kwargs):
        stored = self.archive.put_file(key, file, *args, **kwargs)
        if key.endswith(f"/{SIGNED}"):
            raise EvidenceError(ReasonCode.STORE_UNAVAILABLE, "read timeout")
        return stored
