"""One error taxonomy for the whole product.

Every foreseeable failure is an ``EvidenceError`` with a stable string ``code`` that tools, the ledger and
dashboards can rely on, and a ``retryable`` flag that decides the retry policy: terminal failures (bad input,
policy rejections, tampering) are never retried; transient ones (I/O, unavailable services) are.
Messages never carry secrets, local paths or tenant data beyond validated ids.
"""

from __future__ import annotations

# code -> retryable
REASON_CODES: dict[str, bool] = {
    "TENANT_ID_INVALID": False,
    "PERIOD_INVALID": False,
    "SOURCE_NOT_FOUND": False,
    "SOURCE_INVALID": False,
    "SOURCE_DIGEST_MISMATCH": False,
    "REPORT_INVALID": False,
    "SIGNING_FAILED": False,
    "KEY_MATERIAL_INVALID": False,
    "CONFIG_INVALID": False,
    "STORE_CONFLICT": False,
    "STORE_DIGEST_MISMATCH": False,
    "STORE_NOT_FOUND": False,
    "STORE_KEY_INVALID": False,
    "STORE_UNAVAILABLE": True,
    "STORE_ACCESS_DENIED": False,
    "STORE_REJECTED": False,
    "LEDGER_CONFLICT": True,
    "LEDGER_UNAVAILABLE": True,
    "LEDGER_INVALID": False,
    "LEDGER_NOT_CHECKPOINTED": False,
    "LEASE_BUSY": True,  # another attempt holds a live lease: try again after it expires
    "LEASE_FENCED": False,  # this attempt's lease was lost: it must not commit anything
    "JOB_NOT_FOUND": False,
    "JOB_CLOSED": False,  # rejected or dead: only `evidence replay` reopens it
    "UPSTREAM_NOT_MATERIALIZED": False,
    "RUN_PARTITIONS_MISMATCH": False,  # a run's partitions are not the range its tags name: it must not run
    "WORKER_LOST": True,  # a worker process died mid-stage; the stage is safe to repeat
    "UNEXPECTED_ERROR": False,  # a defect; its traceback is in the run's logs
    "DAGSTER_UNAVAILABLE": True,  # the Dagster instance's storage could not be read
    # intake: answers of the HTTP front door (evidence_pipeline/intake/app.py maps each to its HTTP status)
    "AUTH_REQUIRED": False,  # no `Authorization: Bearer …`
    "TOKEN_INVALID": False,  # unknown or revoked token
    "TOKEN_NOT_FOUND": False,  # `evidence tenant token revoke` of an id that was never issued
    "ROUTE_NOT_FOUND": False,
    "METHOD_NOT_ALLOWED": False,
    "REQUEST_INVALID": False,  # a body or header that is not what the endpoint takes
    "LENGTH_REQUIRED": False,
    "DOCUMENT_TOO_LARGE": False,
    "LENGTH_MISMATCH": False,  # received bytes differ from Content-Length
    "CONTENT_DIGEST_MISMATCH": False,  # received bytes differ from X-Content-SHA256
    "MEDIA_TYPE_UNSUPPORTED": False,  # declared or sniffed type not allowed, or they disagree
    "DOCUMENT_NOT_FOUND": False,
    "IDEMPOTENCY_KEY_INVALID": False,
    "IDEMPOTENCY_CONFLICT": False,  # the key was used for a request with another digest
    "OPERATION_UNKNOWN": False,
    "OPTIONS_INVALID": False,
    "INPUTS_INVALID": False,
    "BATCH_NOT_FOUND": False,
    "PERIOD_NOT_AVAILABLE": False,  # an evidence job for a month not complete yet, or before the tenant's data
    "EVIDENCE_RUN_FAILED": False,  # the Dagster run of an evidence job failed for good
    "JOB_CANCELLED": False,  # its batch was cancelled before the job started
    "TENANT_QUOTA_EXCEEDED": True,  # too many outstanding jobs or stored bytes: try again later
    "INTAKE_BACKPRESSURE": True,  # the queue is older than its objective: try again later
    # the worker-side document gate: terminal outcomes recorded on the job, nothing published
    "DOCUMENT_NOT_PDF": False,
    "DOCUMENT_MALFORMED": False,
    "DOCUMENT_ENCRYPTED": False,
    "DOCUMENT_PAGE_TREE_LOOP": False,
    "DOCUMENT_LIMIT_EXCEEDED": False,  # decompression bombs, too many pages, objects or nesting
    "DOCUMENT_JAVASCRIPT": False,
    "DOCUMENT_LAUNCH_ACTION": False,
    "DOCUMENT_EMBEDDED_FILES": False,
    "DOCUMENT_XFA": False,
    # verification outcomes (what `evidence verify` reports)
    "BUNDLE_NOT_FOUND": False,
    "BUNDLE_INCOMPLETE": False,
    "MANIFEST_INVALID": False,
    "STATEMENT_INVALID": False,
    "STATEMENT_SIGNATURE_INVALID": False,
    "KEY_UNKNOWN": False,
    "SUBJECT_DIGEST_MISMATCH": False,
    "PDF_SIGNATURE_INVALID": False,
    "PDF_SIGNATURE_UNTRUSTED": False,
    "UNSIGNED_DIGEST_MISMATCH": False,
    "MANIFEST_STATEMENT_MISMATCH": False,
}


class EvidenceError(Exception):
    """A classified failure: ``code`` is stable, ``retryable`` picks the retry policy.

    ``lease_token`` is set when the failure happened while the attempt held a job lease, so that recording the
    failure can be fenced like every other transition.
    """

    lease_token: int | None = None

    def __init__(self, code: str, message: str):
        if code not in REASON_CODES:
            raise ValueError(f"unknown reason code {code!r}")
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.retryable = REASON_CODES[code]

    def __reduce__(self):
        # Errors cross process boundaries (parallel workers); keep the code, message and lease token.
        return type(self), (self.code, self.message), {"lease_token": self.lease_token}
