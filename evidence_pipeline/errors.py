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
    "STORE_ACCESS_DENIED": False,  # S3 AccessDenied, or EACCES/EPERM on a local store: needs an operator
    "STORE_READ_ONLY": False,  # EROFS: the store is mounted read-only; retrying within minutes cannot help
    "STORE_FULL": True,  # ENOSPC/EDQUOT: space can come back (sweeps, cleanups, quota); retried over the budget
    "STORE_REJECTED": False,
    "STORE_SYMLINK_REFUSED": False,  # a local store never follows a symlink below its root
    "STORE_NOT_REGULAR_FILE": False,  # a FIFO, device or folder where an object belongs
    "STORE_OBJECT_TOO_LARGE": False,  # refused before reading
    "LEDGER_CONFLICT": True,
    "LEDGER_UNAVAILABLE": True,
    "LEDGER_INVALID": False,
    "LEDGER_NOT_CHECKPOINTED": False,
    "LEDGER_NOT_FOUND": False,  # a read-only open found no ledger database file
    "LEASE_BUSY": True,  # another attempt holds a live lease: try again after it expires
    "LEASE_FENCED": False,  # this attempt's lease was lost: it must not commit anything
    "JOB_NOT_FOUND": False,
    "JOB_CLOSED": False,  # rejected or dead: only `evidence replay` reopens it
    "UPSTREAM_NOT_MATERIALIZED": False,
    "RUN_PARTITIONS_MISMATCH": False,  # a run's partitions are not the range its tags name: it must not run
    "WORKER_LOST": True,  # a worker process died mid-stage; the stage is safe to repeat
    "UNEXPECTED_ERROR": False,  # a defect; its traceback is in the run's logs
    "LOCAL_IO_FAILED": True,  # the command could not read or write a local file it needs (permissions, disk)
    "DAGSTER_UNAVAILABLE": True,  # the Dagster instance's storage could not be read
    "UPSTREAM_STEP_FAILED": True,  # another tenant-month of the run failed an earlier step, so this one was skipped
    "POOL_WAIT_TIMEOUT": True,  # waited longer than EVIDENCE_POOL_WAIT_SECONDS for a Dagster pool slot
    "RUN_WORKER_LOST": True,  # a run's process died (SIGKILL, OOM) while it held pool slots; they were freed
    "INTERRUPTED": False,  # SIGINT or SIGTERM: the operator stopped the command
    # verification outcomes (what `evidence verify` reports)
    "BUNDLE_NOT_FOUND": False,
    "BUNDLE_INCOMPLETE": False,
    "MANIFEST_INVALID": False,
    "STATEMENT_INVALID": False,
    "STATEMENT_SIGNATURE_INVALID": False,
    "STATEMENT_KEY_MISMATCH": False,  # the statement names another key than the one whose signature verified
    "KEY_UNKNOWN": False,
    "SUBJECT_DIGEST_MISMATCH": False,
    "PDF_SIGNATURE_INVALID": False,
    "PDF_SIGNATURE_UNTRUSTED": False,
    "UNSIGNED_DIGEST_MISMATCH": False,
    "MANIFEST_STATEMENT_MISMATCH": False,
}


# `evidence` exit codes: 0 verified/ok, 1 a check failed (tampering, invalid input), 2 usage or not found,
# 3 infrastructure unavailable. Codes not listed below exit 1.
EXIT_OK, EXIT_CHECK_FAILED, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3
USAGE_CODES = frozenset({
    "TENANT_ID_INVALID", "PERIOD_INVALID", "CONFIG_INVALID", "STORE_KEY_INVALID", "BUNDLE_NOT_FOUND",
    "STORE_NOT_FOUND", "JOB_NOT_FOUND", "LEDGER_NOT_FOUND", "LEDGER_NOT_CHECKPOINTED",
})
UNAVAILABLE_CODES = frozenset({
    "STORE_UNAVAILABLE", "STORE_ACCESS_DENIED", "LEDGER_UNAVAILABLE", "DAGSTER_UNAVAILABLE", "LOCAL_IO_FAILED",
})


def exit_code(code: str) -> int:
    """The command-line exit code of a reason code."""
    if code in UNAVAILABLE_CODES:
        return EXIT_UNAVAILABLE
    return EXIT_USAGE if code in USAGE_CODES else EXIT_CHECK_FAILED


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
