"""One error taxonomy for the whole product.

Every foreseeable failure is an ``EvidenceError`` with a stable string ``code`` that tools, the ledger and
dashboards can rely on, and a ``retryable`` flag that decides the retry policy: terminal failures (bad input,
policy rejections, tampering) are never retried; transient ones (I/O, unavailable services) are.
Messages never carry secrets, local paths or tenant data beyond validated ids.

Over 400 lines because every code carries its meaning here, one entry per code, so that the generated reference
(docs/gen_reference.py) is the code.
"""

from __future__ import annotations

from enum import StrEnum


class Vocabulary(StrEnum):
    """A closed vocabulary whose members carry what they mean: ``NAME = "value", "what it means"``. The value is
    the stable string; ``meaning`` is what the reference pages print (docs/gen_reference.py), so the docs cannot
    list a member the code lacks or describe one it does not have."""

    meaning: str

    def __new__(cls, value: str, meaning: str):
        member = str.__new__(cls, value)
        member._value_ = value
        member.meaning = meaning
        return member


class ReasonCode(Vocabulary):
    """Every reason code, declared once with its meaning; the value is the stable string that tools, the ledger and
    dashboards see. The reference page of reason codes is generated from this enum, RETRYABLE and exit_code."""

    TENANT_ID_INVALID = "TENANT_ID_INVALID", "a tenant id is not a slug `^[a-z0-9][a-z0-9-]{0,62}$`"
    PERIOD_INVALID = "PERIOD_INVALID", "a period is not `YYYY-MM`"
    SOURCE_NOT_FOUND = "SOURCE_NOT_FOUND", "no source revision is published for the tenant-month"
    SOURCE_INVALID = "SOURCE_INVALID", "a source revision breaks the schema or the value rules (row and column named)"
    SOURCE_DIGEST_MISMATCH = "SOURCE_DIGEST_MISMATCH", "a source revision's bytes differ from its pinned digest"
    # a source file's problems, each reported with its line and column in SOURCE_INVALID's report (source_format.py)
    SOURCE_TOO_LARGE = "SOURCE_TOO_LARGE", "a source file above its limit (128 MiB), refused before it is read"
    SOURCE_ENCODING_INVALID = (
        "SOURCE_ENCODING_INVALID",
        "a source file is not UTF-8 text (the line of the first bad byte)",
    )
    SOURCE_NOT_CSV = "SOURCE_NOT_CSV", "a source file stops being CSV (an unterminated quote, a NUL)"
    SOURCE_COLUMN_MISSING = "SOURCE_COLUMN_MISSING", "the header lacks a column of the source format"
    SOURCE_COLUMN_UNKNOWN = "SOURCE_COLUMN_UNKNOWN", "the header names a column the source format does not have"
    SOURCE_COLUMN_REPEATED = "SOURCE_COLUMN_REPEATED", "the header names a column twice"
    SOURCE_NO_ROWS = "SOURCE_NO_ROWS", "a source holds no data row"
    SOURCE_TOO_MANY_ROWS = "SOURCE_TOO_MANY_ROWS", "a source holds more than 1,000,000 data rows"
    SOURCE_ROW_FIELDS = "SOURCE_ROW_FIELDS", "a row has another number of fields than the header"
    SOURCE_VALUE_MISSING = "SOURCE_VALUE_MISSING", "a cell is empty"
    SOURCE_VALUE_INVALID = "SOURCE_VALUE_INVALID", "a cell breaks its column's rule (the source format's table)"
    SOURCE_DATE_OUTSIDE_PERIOD = "SOURCE_DATE_OUTSIDE_PERIOD", "a `booked_on` date is not a day of the tenant-month"
    SOURCE_TXN_ID_DUPLICATE = "SOURCE_TXN_ID_DUPLICATE", "a `txn_id` repeats one of an earlier row"
    # the landing location's refusals (monthly/landing.py): marked beside the entry, which is never read
    LANDING_SYMLINK = (
        "LANDING_SYMLINK",
        "a landing entry (a tenant or month folder, or a file) is a symbolic link: links are never followed",
    )
    LANDING_HARD_LINK = "LANDING_HARD_LINK", "a landing file has more than one hard link: another name shares its bytes"
    LANDING_NOT_REGULAR = (
        "LANDING_NOT_REGULAR",
        "a landing entry named like a source file is not a regular file (a folder, FIFO, socket or device)",
    )
    LANDING_FILE_CHANGED = (
        "LANDING_FILE_CHANGED",
        "a landing file changed after it was seen unchanged for a tick (still being written): it is taken once "
        "it stays unchanged across two ticks",
    )
    REPORT_INVALID = "REPORT_INVALID", "the rendered report failed the validation gate"
    SIGNING_FAILED = "SIGNING_FAILED", "PAdES signing failed"
    TSA_UNAVAILABLE = (
        "TSA_UNAVAILABLE",
        "B-T and above: the time stamp authority (`EVIDENCE_TSA_URL`) did not grant a time stamp",
    )
    REVOCATION_UNAVAILABLE = (
        "REVOCATION_UNAVAILABLE",
        "B-LT and B-LTA: no current CRL or OCSP answer could be fetched for the signer or the time stamp authority",
    )
    KEY_MATERIAL_INVALID = "KEY_MATERIAL_INVALID", "keys are missing or unreadable (and dev keys are off)"
    CONFIG_INVALID = "CONFIG_INVALID", "a setting is invalid"
    STORE_CONFLICT = "STORE_CONFLICT", "a put-once key already holds different bytes"
    STORE_DIGEST_MISMATCH = "STORE_DIGEST_MISMATCH", "bytes read back differ from their recorded digest"
    STORE_NOT_FOUND = "STORE_NOT_FOUND", "an object does not exist"
    STORE_KEY_INVALID = "STORE_KEY_INVALID", "an object key is malformed"
    STORE_UNAVAILABLE = "STORE_UNAVAILABLE", "the store did not answer (timeouts, 5xx, I/O errors)"
    STORE_ACCESS_DENIED = "STORE_ACCESS_DENIED", "S3 AccessDenied, or EACCES/EPERM on a local store"
    STORE_READ_ONLY = (
        "STORE_READ_ONLY",
        "the local store is mounted read-only (EROFS); retrying within minutes cannot help",
    )
    STORE_FULL = (
        "STORE_FULL",
        "the local store is full (ENOSPC, EDQUOT); space can come back (sweeps, clean-ups, quota), so it is retried "
        "over the job's budget",
    )
    STORE_REJECTED = "STORE_REJECTED", "S3 refused the request for another reason"
    STORE_SYMLINK_REFUSED = "STORE_SYMLINK_REFUSED", "a local store met a symlink below its root"
    STORE_NOT_REGULAR_FILE = (
        "STORE_NOT_REGULAR_FILE",
        "a FIFO, device or folder where an object belongs (or a non-folder where a folder does)",
    )
    STORE_OBJECT_TOO_LARGE = (
        "STORE_OBJECT_TOO_LARGE",
        "an object is larger than its reader's cap (refused before reading)",
    )
    LEDGER_CONFLICT = "LEDGER_CONFLICT", "the ledger stayed contended through every append retry"
    LEDGER_UNAVAILABLE = "LEDGER_UNAVAILABLE", "the ledger database did not answer"
    LEDGER_INVALID = (
        "LEDGER_INVALID",
        "the ledger's chain, checkpoints or mirrored columns (the tenant registry's rows among them) do not verify",
    )
    LEDGER_NOT_CHECKPOINTED = "LEDGER_NOT_CHECKPOINTED", "no signed checkpoint covers the event yet"
    LEDGER_NOT_FOUND = "LEDGER_NOT_FOUND", "a read-only open found no ledger database"
    HOME_NOT_FOUND = "HOME_NOT_FOUND", "a command that only reads was run where EVIDENCE_HOME names no folder"
    LEASE_BUSY = "LEASE_BUSY", "another attempt holds the job's live lease"
    LEASE_FENCED = "LEASE_FENCED", "this attempt lost its lease and must not commit"
    JOB_NOT_FOUND = "JOB_NOT_FOUND", "no job has that id"
    JOB_CLOSED = (
        "JOB_CLOSED",
        "the job is rejected or dead: only `evidence replay` reopens it; or a replay found the job's current attempt "
        "not ended (already replayed, still working, or succeeded): one live attempt at a time",
    )
    REPLAY_POLICY_MISMATCH = (
        "REPLAY_POLICY_MISMATCH",
        "a replay named a policy version other than the one its job's input was pinned with: a replay reruns the "
        "same input under the same policy; work under another policy is a new request",
    )
    TENANT_MONTH_BUSY = (
        "TENANT_MONTH_BUSY",
        "another bundle of the tenant-month was being published for longer than a lease's lifetime",
    )
    SUPERSEDES_STALE = (
        "SUPERSEDES_STALE",
        "a signed statement supersedes a bundle that is no longer the tenant-month's current one: committing it would "
        "fork the corrections chain",
    )
    UPSTREAM_NOT_MATERIALIZED = (
        "UPSTREAM_NOT_MATERIALIZED",
        "an upstream asset has no (matching) materialization for the partition",
    )
    RUN_PARTITIONS_MISMATCH = "RUN_PARTITIONS_MISMATCH", "a run's partitions are not the range its tags name"
    WORKER_LOST = (
        "WORKER_LOST",
        "a worker process died mid-stage; a job whose run died holding its lease gets it when the expired lease is "
        "found (by the dispatch sensor or a page run for a document job, by the tenant-month retry sensor for a "
        "tenant-month), counted against its budget",
    )
    UNEXPECTED_ERROR = "UNEXPECTED_ERROR", "a defect; its traceback is in the run's logs"
    LOCAL_IO_FAILED = "LOCAL_IO_FAILED", "a command could not read or write a local file it needs"
    DAGSTER_UNAVAILABLE = "DAGSTER_UNAVAILABLE", "the Dagster instance's storage could not be read"
    UPSTREAM_STEP_FAILED = "UPSTREAM_STEP_FAILED", "another tenant-month of the run failed an earlier step"
    POOL_WAIT_TIMEOUT = "POOL_WAIT_TIMEOUT", "waited longer than `EVIDENCE_POOL_WAIT_SECONDS` for a pool slot"
    RUN_WORKER_LOST = "RUN_WORKER_LOST", "a run's process died while holding pool slots; they were freed"
    INTERRUPTED = "INTERRUPTED", "SIGINT or SIGTERM stopped the command"
    # intake: answers of the HTTP front door (evidence_pipeline/intake/app.py maps each to its HTTP status)
    AUTH_REQUIRED = "AUTH_REQUIRED", "no `Authorization: Bearer …`"
    TOKEN_INVALID = "TOKEN_INVALID", "unknown or revoked token"
    TOKEN_NOT_FOUND = "TOKEN_NOT_FOUND", "`evidence tenant token revoke` of an id that was never issued"
    ROUTE_NOT_FOUND = "ROUTE_NOT_FOUND", "no such endpoint"
    METHOD_NOT_ALLOWED = "METHOD_NOT_ALLOWED", "the endpoint does not take this method"
    REQUEST_INVALID = "REQUEST_INVALID", "a body or header that is not what the endpoint takes"
    LENGTH_REQUIRED = "LENGTH_REQUIRED", "an upload without `Content-Length`"
    DOCUMENT_TOO_LARGE = "DOCUMENT_TOO_LARGE", "an upload above `EVIDENCE_INTAKE_MAX_BYTES`"
    LENGTH_MISMATCH = (
        "LENGTH_MISMATCH",
        "the body the server handed the app ended before its Content-Length (the app's own count, for servers that "
        "do not hold the client to it; uvicorn closes the connection instead, or the body rate limit answers 408)",
    )
    CONTENT_DIGEST_MISMATCH = "CONTENT_DIGEST_MISMATCH", "received bytes differ from X-Content-SHA256"
    MEDIA_TYPE_UNSUPPORTED = "MEDIA_TYPE_UNSUPPORTED", "declared or sniffed type not allowed, or they disagree"
    DOCUMENT_NOT_FOUND = "DOCUMENT_NOT_FOUND", "no such document of this tenant"
    IDEMPOTENCY_KEY_INVALID = (
        "IDEMPOTENCY_KEY_INVALID",
        "`Idempotency-Key` missing or not 1–255 visible ASCII characters",
    )
    IDEMPOTENCY_CONFLICT = "IDEMPOTENCY_CONFLICT", "the key was used for a request with another digest"
    OPERATION_UNKNOWN = "OPERATION_UNKNOWN", "the job names no registered operation"
    OPTIONS_INVALID = "OPTIONS_INVALID", "the operation's options are not what it takes"
    INPUTS_INVALID = "INPUTS_INVALID", "the job has the wrong number of inputs"
    BATCH_NOT_FOUND = "BATCH_NOT_FOUND", "no such batch of this tenant"
    REQUEST_EXCEEDS_QUOTA = (
        "REQUEST_EXCEEDS_QUOTA",
        "the request can never fit: alone it is more than the tenant's job quota or than the service queues (split "
        "it), or the document would take the tenant past its stored-bytes quota (documents are kept, so stored bytes "
        "never go down: an operator raises `EVIDENCE_TENANT_MAX_BYTES`); it is not retried",
    )
    OUTPUT_NOT_FOUND = (
        "OUTPUT_NOT_FOUND",
        "the job has no committed output of that name (it is another tenant's, or its job has not committed)",
    )
    EVIDENCE_NOT_FOUND = "EVIDENCE_NOT_FOUND", "the tenant-month has no published evidence bundle"
    PERIOD_NOT_AVAILABLE = "PERIOD_NOT_AVAILABLE", "evidence asked for an incomplete month, or before the data"
    PERIOD_CLOSED = (
        "PERIOD_CLOSED",
        "the month is older than the open months (`EVIDENCE_OPEN_MONTHS`, `EVIDENCE_FIRST_PERIOD`): its evidence is in "
        "the archive and the ledger",
    )
    EVIDENCE_RUN_FAILED = "EVIDENCE_RUN_FAILED", "the Dagster run of an evidence job failed for good"
    JOB_CANCELLED = "JOB_CANCELLED", "its batch was cancelled before the job started"
    TENANT_OFFBOARDED = (
        "TENANT_OFFBOARDED",
        "the tenant was offboarded: no new runs, jobs or tokens, and `evidence tenant add` does not register it again",
    )
    TENANT_UNKNOWN = (
        "TENANT_UNKNOWN",
        "a tenant the tenant registry does not hold (e.g. a tenant partition added in the UI's launch dialog, a "
        "landing folder of a tenant nobody registered, or an API token of one): register it with `evidence tenant add`",
    )
    TENANT_QUOTA_EXCEEDED = "TENANT_QUOTA_EXCEEDED", "too many outstanding jobs: try again later"
    INTAKE_BACKPRESSURE = (
        "INTAKE_BACKPRESSURE",
        "the tenant's queue is older than its objective, or every tenant's outstanding jobs reach their limit: try "
        "again later",
    )
    INTAKE_BUSY = (
        "INTAKE_BUSY",
        "the server process holds its most connections, or uploads in flight of the tenant or in all",
    )
    HEADERS_TOO_LARGE = (
        "HEADERS_TOO_LARGE",
        "more than `EVIDENCE_INTAKE_MAX_HEADERS` headers or `EVIDENCE_INTAKE_MAX_HEADER_BYTES` of request line and "
        "headers",
    )
    REQUEST_TIMEOUT = (
        "REQUEST_TIMEOUT",
        "headers not complete in time, a body below the minimum rate, or a request over its total time",
    )
    HEADER_REPEATED = (
        "HEADER_REPEATED",
        "a header that must come once (`Authorization`, `X-Content-SHA256`, `Idempotency-Key`, `Content-Type`, "
        "`Content-Length`, `Host`) came twice",
    )
    REQUEST_TEXT_INVALID = (
        "REQUEST_TEXT_INVALID",
        "a string in the body or an id in the path holds a NUL or a lone surrogate",
    )
    REQUEST_TOO_DEEP = "REQUEST_TOO_DEEP", "a JSON body nests arrays and objects deeper than 32 levels"
    # the worker-side document gate: terminal outcomes recorded on the job, nothing published
    DOCUMENT_NOT_PDF = "DOCUMENT_NOT_PDF", "the stored bytes are not a PDF"
    DOCUMENT_MALFORMED = (
        "DOCUMENT_MALFORMED",
        "the PDF does not parse strictly (truncated, broken cross-references, ...)",
    )
    DOCUMENT_ENCRYPTED = "DOCUMENT_ENCRYPTED", "the PDF is encrypted with a password, or for certificates"
    DOCUMENT_PERMISSIONS_ONLY = (
        "DOCUMENT_PERMISSIONS_ONLY",
        "the PDF is encrypted with an empty user password (permission restrictions only): `inspect` reads it, an "
        "operation that writes a new PDF from it or signs it refuses it; send an unencrypted copy",
    )
    DOCUMENT_PAGE_TREE_LOOP = "DOCUMENT_PAGE_TREE_LOOP", "the page tree refers back to itself"
    DOCUMENT_LIMIT_EXCEEDED = (
        "DOCUMENT_LIMIT_EXCEEDED",
        "over one of the document limits (documents/budgets.py): bombs, pages, objects, glyph codes, operators, "
        "pixels, nesting, ...",
    )
    DOCUMENT_POLYGLOT = (
        "DOCUMENT_POLYGLOT",
        "the PDF is also another format (a ZIP archive, HTML, an executable) or has data after its last `%%EOF`",
    )
    DOCUMENT_UNSUPPORTED = (
        "DOCUMENT_UNSUPPORTED",
        "the PDF uses an encoding the service cannot decode, so cannot check (a JBIG2 image, an unreadable JPX or "
        "JPEG)",
    )
    DOCUMENT_JAVASCRIPT = "DOCUMENT_JAVASCRIPT", "the PDF carries JavaScript"
    DOCUMENT_LAUNCH_ACTION = "DOCUMENT_LAUNCH_ACTION", "the PDF carries a Launch action"
    DOCUMENT_EMBEDDED_FILES = "DOCUMENT_EMBEDDED_FILES", "the PDF carries embedded files"
    DOCUMENT_XFA = "DOCUMENT_XFA", "the PDF carries an XFA form"
    # contract review: a decision about the contract, or a dependency that did not answer while signing
    REVIEW_INPUT_INVALID = (
        "REVIEW_INPUT_INVALID",
        "`contract-review`: the document passed the gate but has neither form fields nor text that can be reviewed",
    )
    REVIEW_POLICY_REJECTED = (
        "REVIEW_POLICY_REJECTED",
        "`contract-review` decided against the contract: required fields missing or rules failed (its decision is "
        "published)",
    )
    REVIEW_DEPENDENCY_TIMEOUT = (
        "REVIEW_DEPENDENCY_TIMEOUT",
        "`contract-review`: storing or signing the approval did not complete; the retry adopts what was stored",
    )
    RULESET_INVALID = (
        "RULESET_INVALID",
        "a review ruleset is not registered, or its file differs from its registered or pinned digest",
    )
    RULESET_CANARY_CONFLICT = (
        "RULESET_CANARY_CONFLICT",
        "`evidence ruleset canary` of the version in force, of no tenant, or while tenants are routed to another "
        "candidate (roll it back first)",
    )
    RETRY_NOT_DUE = (
        "RETRY_NOT_DUE",
        "a job in `retry_wait` (a document's, or a tenant-month's) was asked to run before its `next_attempt_at` "
        "(nothing moved)",
    )
    RETRY_RUN_FAILED = (
        "RETRY_RUN_FAILED",
        "a tenant-month's retry run failed or was cancelled before it worked the job (the pin failed, the run died "
        "before any stage recorded): counted against the job's budget",
    )
    # redaction templates and the `redact` operation
    TEMPLATE_INVALID = (
        "TEMPLATE_INVALID",
        "a redaction template file breaks the template format (the message says where)",
    )
    TEMPLATE_NOT_FOUND = "TEMPLATE_NOT_FOUND", "no such template version of this tenant"
    TEMPLATE_SELF_APPROVAL = "TEMPLATE_SELF_APPROVAL", "the author of a template version tried to approve it"
    TEMPLATE_NOT_IN_EFFECT = (
        "TEMPLATE_NOT_IN_EFFECT",
        "no approved template version is in effect: a `redact` job is refused",
    )
    OCR_LANGUAGE_UNAVAILABLE = (
        "OCR_LANGUAGE_UNAVAILABLE",
        "a redaction template names an OCR language whose Tesseract data is not installed (at submission, or on the "
        "worker that runs the job: it is refused, never read in English instead)",
    )
    # any operation: what its processor's worker process ended with when it raised no classified error
    PROCESSOR_FAILED = (
        "PROCESSOR_FAILED",
        "a document job's worker process died (an abort, a signal) or its work failed to read or write a file (an "
        "`OSError`); counts against the job's budget, then `dead`",
    )
    PROCESSOR_INPUT_FAILED = (
        "PROCESSOR_INPUT_FAILED",
        "a document job's processor raised an exception no code classifies while reading the document (the type in "
        "the message): the same bytes fail the same way, so the job ends at once, without retries, and is listed "
        "among the dead letters",
    )
    PROCESSOR_RESOURCE_EXHAUSTED = (
        "PROCESSOR_RESOURCE_EXHAUSTED",
        "a document job's worker process reached its memory limit (`EVIDENCE_PROCESSOR_MEMORY_MB`) and was stopped; "
        "counts against the budget",
    )
    PROCESSOR_TIMED_OUT = (
        "PROCESSOR_TIMED_OUT",
        "a document job's worker process ran past `EVIDENCE_PROCESSOR_SECONDS` and was killed; counts against the "
        "budget",
    )
    REDACTION_INPUT_MISSING = (
        "REDACTION_INPUT_MISSING",
        "a redaction's input is missing or fails its digest (a gate refusal keeps the gate's code)",
    )
    REDACTION_UNSUPPORTED_CONTENT = (
        "REDACTION_UNSUPPORTED_CONTENT",
        "what the redactor cannot promise to remove: an image OCR cannot read on a page no region covers, an image or "
        "font it cannot decode",
    )
    REDACTION_VERIFICATION_FAILED = (
        "REDACTION_VERIFICATION_FAILED",
        "the second pass found a removed value or a rule's match in the derivative: it was deleted, nothing published",
    )
    # split and merge, and `evidence lineage`
    MERGE_INPUT_NOT_APPROVED = (
        "MERGE_INPUT_NOT_APPROVED",
        "a `merge` input is not a derivative whose latest contract review decision is approved (422 at admission; the "
        "worker checks the pinned reviews again)",
    )
    LINEAGE_NOT_FOUND = "LINEAGE_NOT_FOUND", "`evidence lineage` of an id that names no committed artifact"
    LINEAGE_DIGEST_MISMATCH = (
        "LINEAGE_DIGEST_MISMATCH",
        "`evidence lineage`: a link's bytes (a derivative, a decision, a signature check record, an upload) are missing"
        " or differ from what its ledger event records; the link is named",
    )
    LINEAGE_STATEMENT_INVALID = (
        "LINEAGE_STATEMENT_INVALID",
        "`evidence lineage`: a link's DSSE statement does not verify, is about other bytes or carries another lineage, "
        "or a derivative's manifest disagrees with its event",
    )
    LINEAGE_EVENT_INVALID = (
        "LINEAGE_EVENT_INVALID",
        "`evidence lineage`: a link's ledger event is missing, breaks the hash chain, or contradicts what it links "
        "(another parent, original or decision)",
    )
    LINEAGE_NOT_APPROVED = (
        "LINEAGE_NOT_APPROVED",
        "`evidence lineage`: a merge's parent has no approving review decision on record",
    )
    # who acts: signed actor requests (evidence_pipeline/actors/), refused before anything changes, each refusal
    # recorded as an `action.refused` event (with the request only when its signature verified)
    ACTION_UNSIGNED = "ACTION_UNSIGNED", "a privileged action came without a signed request (or with no signature)"
    ACTION_REQUEST_INVALID = (
        "ACTION_REQUEST_INVALID",
        "the envelope or its request is not the format, its args are not what the action takes, or it was signed "
        "for another action",
    )
    ACTION_SIGNATURE_INVALID = "ACTION_SIGNATURE_INVALID", "the signature does not verify with the key it names"
    ACTOR_UNKNOWN = "ACTOR_UNKNOWN", "no registered actor holds the key the request names under the name it gives"
    ACTOR_EXISTS = "ACTOR_EXISTS", "registering a name that is already an actor's"
    ACTOR_KEY_REVOKED = "ACTOR_KEY_REVOKED", "the request's key is revoked (or revoking a key already revoked)"
    ACTOR_LAST_ADMIN = "ACTOR_LAST_ADMIN", "the change would leave no admin with a valid key"
    ACTOR_ALREADY_BOOTSTRAPPED = "ACTOR_ALREADY_BOOTSTRAPPED", "the first admin is bootstrapped once"
    ACTION_EXPIRED = (
        "ACTION_EXPIRED",
        "the request's time is further from the service's clock than `EVIDENCE_ACTION_MAX_AGE_SECONDS`",
    )
    ACTION_FORBIDDEN = "ACTION_FORBIDDEN", "none of the actor's roles permits the action"
    ACTION_REPLAYED = "ACTION_REPLAYED", "the request's nonce was used before: each signed request acts once"
    WEBHOOK_URL_INVALID = (
        "WEBHOOK_URL_INVALID",
        "a webhook URL is not `http(s)://host[:port]/path` (no user info, no fragment, at most 2048 characters)",
    )
    WEBHOOK_HOST_REFUSED = (
        "WEBHOOK_HOST_REFUSED",
        "a webhook host resolves to an address outside `EVIDENCE_WEBHOOK_ALLOWED_NETWORKS` (loopback by default)",
    )
    WEBHOOK_HOST_UNRESOLVED = "WEBHOOK_HOST_UNRESOLVED", "a webhook host name did not resolve: retried"
    WEBHOOK_UNREACHABLE = "WEBHOOK_UNREACHABLE", "a webhook receiver refused the connection or timed out: retried"
    WEBHOOK_RECEIVER_FAILED = "WEBHOOK_RECEIVER_FAILED", "a webhook receiver answered other than 2xx: retried"
    WEBHOOK_NOT_SET = "WEBHOOK_NOT_SET", "the tenant has no webhook (set one with `evidence tenant webhook set`)"
    WEBHOOK_DELIVERY_NOT_DEAD = "WEBHOOK_DELIVERY_NOT_DEAD", "no dead webhook delivery has that id: nothing to replay"
    FOUR_EYES_REQUIRED = (
        "FOUR_EYES_REQUIRED",
        "the approver is the author's identity (the same name, or a shared key)",
    )
    OFFBOARDING_NOT_REQUESTED = (
        "OFFBOARDING_NOT_REQUESTED",
        "an offboarding was approved that no operator requested (`evidence tenant offboard TENANT --reason`)",
    )
    # verification outcomes (what `evidence verify` reports)
    BUNDLE_NOT_FOUND = "BUNDLE_NOT_FOUND", "the path holds no bundle"
    BUNDLE_INCOMPLETE = "BUNDLE_INCOMPLETE", "a bundle file is missing (e.g. no manifest yet)"
    BUNDLE_FILE_INVALID = (
        "BUNDLE_FILE_INVALID",
        "`verify FILE`: not a bundle file as `GET /v1/evidence/{period}/bundle` answers it (an uncompressed tar of "
        "regular files: `keys/` and one bundle folder)",
    )
    MANIFEST_INVALID = "MANIFEST_INVALID", "`manifest.json` is malformed or carries fields nothing vouches for"
    STATEMENT_INVALID = "STATEMENT_INVALID", "the DSSE envelope or in-toto statement is malformed"
    STATEMENT_SIGNATURE_INVALID = "STATEMENT_SIGNATURE_INVALID", "the DSSE signature does not verify"
    STATEMENT_KEY_MISMATCH = "STATEMENT_KEY_MISMATCH", "the statement names another key than the one that verified"
    KEY_UNKNOWN = (
        "KEY_UNKNOWN",
        "no published (or pinned) key matches the envelope; with a keyring: the statement key or PDF signer certificate"
        " is not listed in it (or `evidence keys revoke` of a key id it does not list)",
    )
    KEYRING_INVALID = (
        "KEYRING_INVALID",
        "the newest keyring document (`keys/keyring-*.json`) is malformed, not signed by the (pinned) trust root, or "
        "not the sequence its name says; or only `--root-id` is pinned and the archive has no keyring",
    )
    KEY_NOT_VALID_AT_SIGNING_TIME = (
        "KEY_NOT_VALID_AT_SIGNING_TIME",
        "a signature was made outside its key's validity window in the keyring (e.g. by a signer still using a retired "
        "key)",
    )
    KEY_REVOKED = "KEY_REVOKED", "a signature was made by a revoked key at or after its revocation time"
    SUBJECT_DIGEST_MISMATCH = "SUBJECT_DIGEST_MISMATCH", "the statement's subject is not the sha256 of `report.pdf`"
    PDF_SIGNATURE_INVALID = "PDF_SIGNATURE_INVALID", "the PAdES signature is broken or does not cover the whole file"
    PDF_SIGNATURE_UNTRUSTED = (
        "PDF_SIGNATURE_UNTRUSTED",
        "the PAdES signature does not chain to the trust root (or its time stamps to the TSA root) at the validation "
        "time",
    )
    UNSIGNED_DIGEST_MISMATCH = (
        "UNSIGNED_DIGEST_MISMATCH",
        "`report.pdf` does not begin with the recorded unsigned report",
    )
    MANIFEST_STATEMENT_MISMATCH = (
        "MANIFEST_STATEMENT_MISMATCH",
        "the manifest or the bundle's location disagrees with the statement",
    )
    SUPERSEDES_FORKED = "SUPERSEDES_FORKED", "two published bundles of the tenant-month supersede the same bundle"
    RENEWAL_INVALID = (
        "RENEWAL_INVALID",
        "a bundle's newest renewed report (`renewals/NNNN.pdf`) does not begin with the published `report.pdf`, "
        "or does not end with a new document time stamp over the whole file",
    )
    RENEWAL_FUTILE = (
        "RENEWAL_FUTILE",
        "`evidence timestamps renew`: the time stamp authority's certificate expires no later than the one the new "
        "document time stamp would renew (rotate the TSA's certificate first); nothing was published",
    )
    # offline audit packages (`evidence export`, `evidence verify --package`) and checkpoint witnesses
    PACKAGE_NOT_FOUND = (
        "PACKAGE_NOT_FOUND",
        "`verify --package`: the path is not a folder holding a `package.json` (unpack a `.tar`/`.zip` first)",
    )
    PACKAGE_EXISTS = "PACKAGE_EXISTS", "`export`: something already exists at OUT; nothing is replaced"
    PACKAGE_TOO_LARGE = (
        "PACKAGE_TOO_LARGE",
        "`export`: the package would list more files than its index may hold (64 MiB, ~250,000 files): export fewer "
        "periods; nothing is written",
    )
    PACKAGE_INVALID = (
        "PACKAGE_INVALID",
        "`package.json` is malformed or of another format version, a proof file is malformed, or the package holds a "
        "bundle its index does not list",
    )
    PACKAGE_INCOMPLETE = (
        "PACKAGE_INCOMPLETE",
        "a file the package's index lists or implies (bundle file, event, proof, checkpoint) is missing",
    )
    PACKAGE_INDEX_UNSIGNED = (
        "PACKAGE_INDEX_UNSIGNED",
        "`verify --package`: `package.json` is an unsigned (format version 1) index; `--allow-unsigned-index` accepts "
        "it knowingly",
    )
    PACKAGE_INDEX_SIGNATURE_INVALID = (
        "PACKAGE_INDEX_SIGNATURE_INVALID",
        "the signature on `package.json` does not verify with a statement key of the package (or that key was not "
        "valid when the package was exported)",
    )
    PACKAGE_FILE_MISSING = "PACKAGE_FILE_MISSING", "a file the signed package index lists is not in the package"
    PACKAGE_FILE_UNLISTED = (
        "PACKAGE_FILE_UNLISTED",
        "the package holds a file (or a symlink, or a hidden file) that its signed index does not list",
    )
    PACKAGE_FILE_MISMATCH = (
        "PACKAGE_FILE_MISMATCH",
        "a file of the package is not the bytes its signed index lists (swapped or changed)",
    )
    CHECKPOINT_INVALID = (
        "CHECKPOINT_INVALID",
        "a packaged checkpoint's statement-key signature or its body does not verify",
    )
    PROOF_INVALID = "PROOF_INVALID", "an inclusion or consistency proof does not reach its signed checkpoint root"
    LEDGER_EVENT_MISMATCH = (
        "LEDGER_EVENT_MISMATCH",
        "a packaged bundle's files or manifest are not what its `bundle.published` event committed",
    )
    AUTHORIZATION_INVALID = (
        "AUTHORIZATION_INVALID",
        "`verify --package`: a packaged event's signed request does not re-check against the actor events before it "
        "(the message names the event and the failed check's code)",
    )
    WITNESS_SIGNATURE_MISSING = (
        "WITNESS_SIGNATURE_MISSING",
        "`--require-witness`: a checkpoint carries no signature by the pinned witness key",
    )
    WITNESS_SIGNATURE_INVALID = (
        "WITNESS_SIGNATURE_INVALID",
        "`--require-witness` or `--witness`: a pinned witness's signature on a checkpoint does not verify",
    )
    LOG_ORIGIN_MISMATCH = (
        "LOG_ORIGIN_MISMATCH",
        "`verify --package` / `ledger verify`: a checkpoint note is of another log origin than the pinned one "
        "(`--origin`, or the package's tlog-policy file) or than the notes before it",
    )
    ASSESSMENT_MISMATCH = (
        "ASSESSMENT_MISMATCH",
        "`verify --package`: a bundle's OSCAL assessment results are not about its month, identity, ledger position "
        "and files",
    )
    LOG_ORIGIN_NOT_PINNED = (
        "LOG_ORIGIN_NOT_PINNED",
        "`verify`: checkpoint notes to check and nothing that names the log's origin (no `--origin`, no `log` line "
        "in `--policy` or in the package's or bundle file's tlog-policy)",
    )
    CHECKPOINT_CONFLICT = (
        "CHECKPOINT_CONFLICT",
        "two properly signed checkpoints of one size have different roots (a split view); the message names both",
    )
    WITNESS_POLICY_NOT_MET = (
        "WITNESS_POLICY_NOT_MET",
        "`--witness-policy N`: fewer than N of the pinned witnesses co-signed the package's newest checkpoint (its "
        "C2SP note)",
    )
    WITNESS_UNAVAILABLE = (
        "WITNESS_UNAVAILABLE",
        "`evidence ledger checkpoint`: a configured witness did not answer; it catches up at the next checkpoint",
    )
    WITNESS_REFUSED = (
        "WITNESS_REFUSED",
        "`evidence ledger checkpoint`: a configured witness refused the checkpoint (HTTP status in the message): "
        "it does not extend what the witness co-signed, or the witness does not trust the log's key",
    )


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
        ReasonCode.RETRY_RUN_FAILED,
        ReasonCode.LANDING_FILE_CHANGED,
        # not known to be the input's fault: retried until the job's budget is spent, then it is dead
        ReasonCode.PROCESSOR_FAILED,
        ReasonCode.PROCESSOR_RESOURCE_EXHAUSTED,
        ReasonCode.PROCESSOR_TIMED_OUT,
        # a webhook delivery's attempt: retried with backoff until its budget is spent, then the delivery is dead
        ReasonCode.WEBHOOK_HOST_UNRESOLVED,
        ReasonCode.WEBHOOK_UNREACHABLE,
        ReasonCode.WEBHOOK_RECEIVER_FAILED,
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
        ReasonCode.HOME_NOT_FOUND,
        ReasonCode.LEDGER_NOT_CHECKPOINTED,
        ReasonCode.TOKEN_NOT_FOUND,
        ReasonCode.TEMPLATE_NOT_FOUND,
        ReasonCode.OFFBOARDING_NOT_REQUESTED,
        ReasonCode.LINEAGE_NOT_FOUND,
        ReasonCode.PACKAGE_NOT_FOUND,
        ReasonCode.PACKAGE_EXISTS,
        ReasonCode.WEBHOOK_URL_INVALID,
        ReasonCode.WEBHOOK_NOT_SET,
        ReasonCode.WEBHOOK_DELIVERY_NOT_DEAD,
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


def meaning_of(code: str) -> str:
    """What the reason code whose stable string is ``code`` means."""
    return ReasonCode(code).meaning  # type: ignore[call-arg]  # an Enum lookup by value, not a member's __new__


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
