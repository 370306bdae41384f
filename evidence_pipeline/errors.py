"""One error taxonomy for the whole product.

Every foreseeable failure is an ``EvidenceError`` with a stable string ``code`` that tools, the ledger and
dashboards can rely on, and a ``retryable`` flag that decides the retry policy: terminal failures (bad input,
policy rejections, tampering) are never retried; transient ones (I/O, unavailable services) are.
Messages never carry secrets, local paths or tenant data beyond validated ids.
"""

from __future__ import annotations

from enum import StrEnum


class ReasonCode(StrEnum):
    """Every reason code, declared once; the value is the stable string that tools, the ledger and dashboards see.
    The README's reason-code table lists the same codes (a test compares them)."""

    TENANT_ID_INVALID = "TENANT_ID_INVALID"
    PERIOD_INVALID = "PERIOD_INVALID"
    SOURCE_NOT_FOUND = "SOURCE_NOT_FOUND"
    SOURCE_INVALID = "SOURCE_INVALID"
    SOURCE_DIGEST_MISMATCH = "SOURCE_DIGEST_MISMATCH"
    REPORT_INVALID = "REPORT_INVALID"
    SIGNING_FAILED = "SIGNING_FAILED"
    TSA_UNAVAILABLE = "TSA_UNAVAILABLE"  # the time stamp authority did not answer or refused (B-T and above)
    REVOCATION_UNAVAILABLE = "REVOCATION_UNAVAILABLE"  # B-LT/B-LTA: no current CRL or OCSP answer to embed
    KEY_MATERIAL_INVALID = "KEY_MATERIAL_INVALID"
    CONFIG_INVALID = "CONFIG_INVALID"
    STORE_CONFLICT = "STORE_CONFLICT"
    STORE_DIGEST_MISMATCH = "STORE_DIGEST_MISMATCH"
    STORE_NOT_FOUND = "STORE_NOT_FOUND"
    STORE_KEY_INVALID = "STORE_KEY_INVALID"
    STORE_UNAVAILABLE = "STORE_UNAVAILABLE"
    STORE_ACCESS_DENIED = "STORE_ACCESS_DENIED"  # S3 AccessDenied, or EACCES/EPERM on a local store: needs an operator
    STORE_READ_ONLY = "STORE_READ_ONLY"  # EROFS: the store is mounted read-only; retrying within minutes cannot help
    STORE_FULL = "STORE_FULL"  # ENOSPC/EDQUOT: space can come back (sweeps, cleanups, quota); retried over the budget
    STORE_REJECTED = "STORE_REJECTED"
    STORE_SYMLINK_REFUSED = "STORE_SYMLINK_REFUSED"  # a local store never follows a symlink below its root
    STORE_NOT_REGULAR_FILE = "STORE_NOT_REGULAR_FILE"  # FIFO, device or folder as an object; non-folder as a folder
    STORE_OBJECT_TOO_LARGE = "STORE_OBJECT_TOO_LARGE"  # refused before reading
    LEDGER_CONFLICT = "LEDGER_CONFLICT"
    LEDGER_UNAVAILABLE = "LEDGER_UNAVAILABLE"
    LEDGER_INVALID = "LEDGER_INVALID"
    LEDGER_NOT_CHECKPOINTED = "LEDGER_NOT_CHECKPOINTED"
    LEDGER_NOT_FOUND = "LEDGER_NOT_FOUND"  # a read-only open found no ledger database file
    LEASE_BUSY = "LEASE_BUSY"  # another attempt holds a live lease: try again after it expires
    LEASE_FENCED = "LEASE_FENCED"  # this attempt's lease was lost: it must not commit anything
    JOB_NOT_FOUND = "JOB_NOT_FOUND"
    JOB_CLOSED = "JOB_CLOSED"  # rejected or dead: only `evidence replay` reopens it
    TENANT_MONTH_BUSY = "TENANT_MONTH_BUSY"  # another bundle of the tenant-month is being published: try again
    SUPERSEDES_STALE = "SUPERSEDES_STALE"  # a signed statement supersedes a bundle that is no longer current
    UPSTREAM_NOT_MATERIALIZED = "UPSTREAM_NOT_MATERIALIZED"
    RUN_PARTITIONS_MISMATCH = (
        "RUN_PARTITIONS_MISMATCH"  # a run's partitions are not the range its tags name: it must not run
    )
    WORKER_LOST = "WORKER_LOST"  # a worker process died mid-stage; the stage is safe to repeat
    UNEXPECTED_ERROR = "UNEXPECTED_ERROR"  # a defect; its traceback is in the run's logs
    LOCAL_IO_FAILED = "LOCAL_IO_FAILED"  # the command could not read or write a local file it needs (permissions, disk)
    DAGSTER_UNAVAILABLE = "DAGSTER_UNAVAILABLE"  # the Dagster instance's storage could not be read
    UPSTREAM_STEP_FAILED = "UPSTREAM_STEP_FAILED"
    POOL_WAIT_TIMEOUT = "POOL_WAIT_TIMEOUT"  # waited longer than EVIDENCE_POOL_WAIT_SECONDS for a Dagster pool slot
    RUN_WORKER_LOST = "RUN_WORKER_LOST"  # a run's process died (SIGKILL, OOM) while it held pool slots; they were freed
    INTERRUPTED = "INTERRUPTED"  # SIGINT or SIGTERM: the operator stopped the command
    # intake: answers of the HTTP front door (evidence_pipeline/intake/app.py maps each to its HTTP status)
    AUTH_REQUIRED = "AUTH_REQUIRED"  # no `Authorization: Bearer …`
    TOKEN_INVALID = "TOKEN_INVALID"  # unknown or revoked token
    TOKEN_NOT_FOUND = "TOKEN_NOT_FOUND"  # `evidence tenant token revoke` of an id that was never issued
    ROUTE_NOT_FOUND = "ROUTE_NOT_FOUND"
    METHOD_NOT_ALLOWED = "METHOD_NOT_ALLOWED"
    REQUEST_INVALID = "REQUEST_INVALID"  # a body or header that is not what the endpoint takes
    LENGTH_REQUIRED = "LENGTH_REQUIRED"
    DOCUMENT_TOO_LARGE = "DOCUMENT_TOO_LARGE"
    LENGTH_MISMATCH = "LENGTH_MISMATCH"  # received bytes differ from Content-Length
    CONTENT_DIGEST_MISMATCH = "CONTENT_DIGEST_MISMATCH"  # received bytes differ from X-Content-SHA256
    MEDIA_TYPE_UNSUPPORTED = "MEDIA_TYPE_UNSUPPORTED"  # declared or sniffed type not allowed, or they disagree
    DOCUMENT_NOT_FOUND = "DOCUMENT_NOT_FOUND"
    IDEMPOTENCY_KEY_INVALID = "IDEMPOTENCY_KEY_INVALID"
    IDEMPOTENCY_CONFLICT = "IDEMPOTENCY_CONFLICT"  # the key was used for a request with another digest
    OPERATION_UNKNOWN = "OPERATION_UNKNOWN"
    OPTIONS_INVALID = "OPTIONS_INVALID"
    INPUTS_INVALID = "INPUTS_INVALID"
    BATCH_NOT_FOUND = "BATCH_NOT_FOUND"
    PERIOD_NOT_AVAILABLE = "PERIOD_NOT_AVAILABLE"  # evidence asked for an incomplete month, or before the data
    PERIOD_CLOSED = "PERIOD_CLOSED"  # the month is older than the open window: its evidence is in the archive
    EVIDENCE_RUN_FAILED = "EVIDENCE_RUN_FAILED"  # the Dagster run of an evidence job failed for good
    JOB_CANCELLED = "JOB_CANCELLED"  # its batch was cancelled before the job started
    TENANT_OFFBOARDED = "TENANT_OFFBOARDED"  # the tenant was offboarded: no new work, no new tokens
    TENANT_QUOTA_EXCEEDED = "TENANT_QUOTA_EXCEEDED"  # too many outstanding jobs or stored bytes: try again later
    INTAKE_BACKPRESSURE = "INTAKE_BACKPRESSURE"  # the tenant's queue is behind its objective, or all are overloaded
    INTAKE_BUSY = "INTAKE_BUSY"  # too many connections or uploads in flight (per tenant or in all): try again later
    HEADERS_TOO_LARGE = "HEADERS_TOO_LARGE"  # more headers, or more header bytes, than the front door takes (431)
    REQUEST_TIMEOUT = "REQUEST_TIMEOUT"  # headers too slow, a body below the minimum rate, or a request too long (408)
    HEADER_REPEATED = "HEADER_REPEATED"  # a header that must be sent once (Authorization, X-Content-SHA256, …) twice
    REQUEST_TEXT_INVALID = "REQUEST_TEXT_INVALID"  # a string that is not valid Unicode text (a lone surrogate, a NUL)
    REQUEST_TOO_DEEP = "REQUEST_TOO_DEEP"  # JSON nested deeper than the documented depth
    # the worker-side document gate: terminal outcomes recorded on the job, nothing published
    DOCUMENT_NOT_PDF = "DOCUMENT_NOT_PDF"
    DOCUMENT_MALFORMED = "DOCUMENT_MALFORMED"
    DOCUMENT_ENCRYPTED = "DOCUMENT_ENCRYPTED"
    DOCUMENT_PAGE_TREE_LOOP = "DOCUMENT_PAGE_TREE_LOOP"
    DOCUMENT_LIMIT_EXCEEDED = "DOCUMENT_LIMIT_EXCEEDED"  # over a budget of documents/budgets.py (bombs, pages, ...)
    DOCUMENT_POLYGLOT = "DOCUMENT_POLYGLOT"  # also another format (a ZIP, markup, an executable), or trailing data
    DOCUMENT_UNSUPPORTED = "DOCUMENT_UNSUPPORTED"  # an encoding the service cannot decode, so cannot check (JBIG2)
    DOCUMENT_JAVASCRIPT = "DOCUMENT_JAVASCRIPT"
    DOCUMENT_LAUNCH_ACTION = "DOCUMENT_LAUNCH_ACTION"
    DOCUMENT_EMBEDDED_FILES = "DOCUMENT_EMBEDDED_FILES"
    DOCUMENT_XFA = "DOCUMENT_XFA"
    # contract review: a decision about the contract, or a dependency that did not answer while signing
    REVIEW_INPUT_INVALID = "REVIEW_INPUT_INVALID"  # passed the gate, but neither form fields nor text can be reviewed
    REVIEW_POLICY_REJECTED = "REVIEW_POLICY_REJECTED"  # the decision: required fields missing or rules failed
    REVIEW_DEPENDENCY_TIMEOUT = "REVIEW_DEPENDENCY_TIMEOUT"  # the approval's signing or storing did not complete
    RULESET_INVALID = "RULESET_INVALID"  # unregistered, or its file differs from its registered or pinned digest
    RULESET_CANARY_CONFLICT = "RULESET_CANARY_CONFLICT"  # a canary of the version in force, of no tenant, or while
    # tenants are routed to another candidate
    RETRY_NOT_DUE = "RETRY_NOT_DUE"  # a job waiting to be retried was asked to run before its next_attempt_at
    # redaction templates and the `redact` operation
    TEMPLATE_INVALID = "TEMPLATE_INVALID"  # a template file breaks the format (evidence template submit)
    TEMPLATE_NOT_FOUND = "TEMPLATE_NOT_FOUND"  # no such template version of this tenant
    TEMPLATE_SELF_APPROVAL = "TEMPLATE_SELF_APPROVAL"  # the author tried to approve their own version
    TEMPLATE_NOT_IN_EFFECT = "TEMPLATE_NOT_IN_EFFECT"  # no approved, effective version (a redact job is refused)
    # any operation: what its processor's worker process ended with when it raised no classified error
    PROCESSOR_FAILED = "PROCESSOR_FAILED"  # an unclassified exception, or the worker process died (abort, signal)
    PROCESSOR_RESOURCE_EXHAUSTED = "PROCESSOR_RESOURCE_EXHAUSTED"  # it reached its memory limit
    PROCESSOR_TIMED_OUT = "PROCESSOR_TIMED_OUT"  # it ran past its wall-time limit and was killed
    REDACTION_INPUT_MISSING = "REDACTION_INPUT_MISSING"  # the input is gone or not the bytes admitted
    REDACTION_UNSUPPORTED_CONTENT = "REDACTION_UNSUPPORTED_CONTENT"  # what it cannot read (illegible images, fonts)
    REDACTION_VERIFICATION_FAILED = "REDACTION_VERIFICATION_FAILED"  # the second pass found a value or a match
    # split and merge, and `evidence lineage`
    MERGE_INPUT_NOT_APPROVED = "MERGE_INPUT_NOT_APPROVED"  # a merge input's latest review decision is not approved
    LINEAGE_NOT_FOUND = "LINEAGE_NOT_FOUND"  # `evidence lineage` of an id that names no artifact or upload
    LINEAGE_DIGEST_MISMATCH = "LINEAGE_DIGEST_MISMATCH"  # a link's bytes differ from what its event records
    LINEAGE_STATEMENT_INVALID = "LINEAGE_STATEMENT_INVALID"  # a link's DSSE statement or manifest does not hold
    LINEAGE_EVENT_INVALID = "LINEAGE_EVENT_INVALID"  # a link's ledger event is missing, altered or contradicts it
    LINEAGE_NOT_APPROVED = "LINEAGE_NOT_APPROVED"  # a merge's parent has no approved review decision on record
    # who acts: signed actor requests (evidence_pipeline/actors/), refused before anything changes, each refusal
    # recorded as an `action.refused` event (with the request only when its signature verified)
    ACTION_UNSIGNED = "ACTION_UNSIGNED"  # a privileged action came without a signed request (or with no signature)
    ACTION_REQUEST_INVALID = "ACTION_REQUEST_INVALID"  # the envelope or its request is not the format, or its args
    # are not what the action takes, or it was signed for another action
    ACTION_SIGNATURE_INVALID = "ACTION_SIGNATURE_INVALID"  # the signature does not verify with the key it names
    ACTOR_UNKNOWN = "ACTOR_UNKNOWN"  # no registered actor holds the key the request names under the name it gives
    ACTOR_EXISTS = "ACTOR_EXISTS"  # registering a name that is already an actor's
    ACTOR_KEY_REVOKED = "ACTOR_KEY_REVOKED"  # the request's key is revoked (or revoking a key already revoked)
    ACTOR_LAST_ADMIN = "ACTOR_LAST_ADMIN"  # the change would leave no admin with a valid key
    ACTOR_ALREADY_BOOTSTRAPPED = "ACTOR_ALREADY_BOOTSTRAPPED"  # the first admin is bootstrapped once
    ACTION_EXPIRED = "ACTION_EXPIRED"  # the request's time is further from the service's clock than
    # EVIDENCE_ACTION_MAX_AGE_SECONDS
    ACTION_FORBIDDEN = "ACTION_FORBIDDEN"  # none of the actor's roles permits the action
    ACTION_REPLAYED = "ACTION_REPLAYED"  # the request's nonce was used before: each signed request acts once
    FOUR_EYES_REQUIRED = "FOUR_EYES_REQUIRED"  # the approver is the author's identity (same name, or a shared key)
    # verification outcomes (what `evidence verify` reports)
    BUNDLE_NOT_FOUND = "BUNDLE_NOT_FOUND"
    BUNDLE_INCOMPLETE = "BUNDLE_INCOMPLETE"
    MANIFEST_INVALID = "MANIFEST_INVALID"
    STATEMENT_INVALID = "STATEMENT_INVALID"
    STATEMENT_SIGNATURE_INVALID = "STATEMENT_SIGNATURE_INVALID"
    STATEMENT_KEY_MISMATCH = "STATEMENT_KEY_MISMATCH"
    KEY_UNKNOWN = "KEY_UNKNOWN"
    KEYRING_INVALID = "KEYRING_INVALID"  # the newest keyring document is missing, malformed or not signed by the root
    KEY_NOT_VALID_AT_SIGNING_TIME = "KEY_NOT_VALID_AT_SIGNING_TIME"  # signed outside the key's validity window
    KEY_REVOKED = "KEY_REVOKED"  # signed by a revoked key at or after its revocation
    SUBJECT_DIGEST_MISMATCH = "SUBJECT_DIGEST_MISMATCH"
    PDF_SIGNATURE_INVALID = "PDF_SIGNATURE_INVALID"
    PDF_SIGNATURE_UNTRUSTED = "PDF_SIGNATURE_UNTRUSTED"
    UNSIGNED_DIGEST_MISMATCH = "UNSIGNED_DIGEST_MISMATCH"
    MANIFEST_STATEMENT_MISMATCH = "MANIFEST_STATEMENT_MISMATCH"
    SUPERSEDES_FORKED = "SUPERSEDES_FORKED"  # two published bundles of a tenant-month supersede the same one
    # offline audit packages (`evidence export`, `evidence verify --package`) and checkpoint witnesses
    PACKAGE_NOT_FOUND = "PACKAGE_NOT_FOUND"  # the path is not a folder holding a package.json
    PACKAGE_EXISTS = "PACKAGE_EXISTS"  # export refuses to replace anything already at OUT
    PACKAGE_INVALID = "PACKAGE_INVALID"  # package.json malformed, of another format version, or the package holds
    # what its index does not list
    PACKAGE_INCOMPLETE = "PACKAGE_INCOMPLETE"  # a file the index lists (or implies) is missing
    CHECKPOINT_INVALID = "CHECKPOINT_INVALID"  # a checkpoint's statement-key signature or its body does not verify
    PROOF_INVALID = "PROOF_INVALID"  # an inclusion or consistency proof does not reach its signed checkpoint root
    LEDGER_EVENT_MISMATCH = "LEDGER_EVENT_MISMATCH"  # the bundle is not what its bundle.published event committed
    WITNESS_SIGNATURE_MISSING = "WITNESS_SIGNATURE_MISSING"  # a checkpoint lacks the required witness's signature
    WITNESS_SIGNATURE_INVALID = "WITNESS_SIGNATURE_INVALID"  # the witness's signature on a checkpoint does not verify


# Transient failures, retried with backoff; every other code is terminal.
RETRYABLE = frozenset(
    {
        ReasonCode.STORE_UNAVAILABLE,
        ReasonCode.STORE_FULL,
        ReasonCode.LEDGER_CONFLICT,
        ReasonCode.LEDGER_UNAVAILABLE,
        ReasonCode.LEASE_BUSY,
        ReasonCode.TENANT_MONTH_BUSY,
        ReasonCode.WORKER_LOST,
        ReasonCode.LOCAL_IO_FAILED,
        ReasonCode.DAGSTER_UNAVAILABLE,
        ReasonCode.UPSTREAM_STEP_FAILED,
        ReasonCode.POOL_WAIT_TIMEOUT,
        ReasonCode.RUN_WORKER_LOST,
        ReasonCode.TENANT_QUOTA_EXCEEDED,
        ReasonCode.INTAKE_BACKPRESSURE,
        ReasonCode.INTAKE_BUSY,
        ReasonCode.REQUEST_TIMEOUT,
        ReasonCode.TSA_UNAVAILABLE,
        ReasonCode.REVOCATION_UNAVAILABLE,
        ReasonCode.REVIEW_DEPENDENCY_TIMEOUT,
        ReasonCode.RETRY_NOT_DUE,
        # not known to be the input's fault: retried until the job's budget is spent, then it is dead
        ReasonCode.PROCESSOR_FAILED,
        ReasonCode.PROCESSOR_RESOURCE_EXHAUSTED,
        ReasonCode.PROCESSOR_TIMED_OUT,
    }
)


# `evidence` exit codes: 0 verified/ok, 1 a check failed (tampering, invalid input), 2 usage or not found,
# 3 infrastructure unavailable. Codes not listed below exit 1.
EXIT_OK, EXIT_CHECK_FAILED, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3
USAGE_CODES = frozenset(
    {
        ReasonCode.TENANT_ID_INVALID,
        ReasonCode.PERIOD_INVALID,
        ReasonCode.CONFIG_INVALID,
        ReasonCode.STORE_KEY_INVALID,
        ReasonCode.BUNDLE_NOT_FOUND,
        ReasonCode.STORE_NOT_FOUND,
        ReasonCode.JOB_NOT_FOUND,
        ReasonCode.LEDGER_NOT_FOUND,
        ReasonCode.LEDGER_NOT_CHECKPOINTED,
        ReasonCode.TOKEN_NOT_FOUND,
        ReasonCode.TEMPLATE_NOT_FOUND,
        ReasonCode.LINEAGE_NOT_FOUND,
        ReasonCode.PACKAGE_NOT_FOUND,
        ReasonCode.PACKAGE_EXISTS,
    }
)
UNAVAILABLE_CODES = frozenset(
    {
        ReasonCode.STORE_UNAVAILABLE,
        ReasonCode.STORE_ACCESS_DENIED,
        ReasonCode.LEDGER_UNAVAILABLE,
        ReasonCode.DAGSTER_UNAVAILABLE,
        ReasonCode.LOCAL_IO_FAILED,
    }
)


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

    def __init__(self, code: ReasonCode | str, message: str):
        declared = ReasonCode(code)  # ValueError for a code that is not declared
        self.code = declared.value  # the plain string: it goes into ledgers, metadata and JSON as is
        super().__init__(f"{self.code}: {message}")
        self.message = message
        self.retryable = declared in RETRYABLE

    def __reduce__(self):
        # Errors cross process boundaries (parallel workers); keep the code, message and lease token.
        return type(self), (self.code, self.message), {"lease_token": self.lease_token}
