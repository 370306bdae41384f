"""The tenant API's contract: an OpenAPI 3.1 document, served at /openapi.json and built here from the code that
answers (the status of each reason code is app.STATUS; limits are admission's constants), so that the
contract and the server cannot drift apart unnoticed: the tests validate real responses against it and run
Schemathesis (property-based requests generated from it) against a live server.

Each operation lists the reason codes it can answer, grouped by status; every error body is
``{"error": {"code", "message"}}``. Answers any request can get (authentication, the connection guard's limits,
an overloaded ledger or store) are listed on every operation.

Over 400 lines because it is the contract itself, one operation after another, built from the code that
answers."""

from __future__ import annotations

from collections import defaultdict

from evidence_pipeline.errors import ReasonCode as R
from evidence_pipeline.intake import admission
from evidence_pipeline.monthly import source_format

VERSION = "1.0.0"
_ID = {"type": "string", "minLength": 1, "maxLength": 200}
_TIME = {"type": ["string", "null"], "format": "date-time"}
_SHA256 = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
_IDEMPOTENCY_KEY = {"type": "string", "pattern": admission.IDEMPOTENCY_KEY_PATTERN}
# what any request may be answered (after the token is checked, or by the connection guard before anything); a
# live token of a tenant the registry does not hold (or no longer does) admits nobody
_ALWAYS = (
    R.AUTH_REQUIRED,
    R.TOKEN_INVALID,
    R.TENANT_UNKNOWN,
    R.TENANT_OFFBOARDED,
    R.HEADER_REPEATED,
    R.HEADERS_TOO_LARGE,
    R.REQUEST_TIMEOUT,
    R.INTAKE_BUSY,
    R.LEDGER_UNAVAILABLE,
    R.LEDGER_CONFLICT,
    R.STORE_UNAVAILABLE,
    R.REQUEST_TEXT_INVALID,
    R.REQUEST_INVALID,
)
_JSON_BODY = (R.REQUEST_TOO_DEEP,)
_ACCEPT = (
    R.IDEMPOTENCY_KEY_INVALID,
    R.IDEMPOTENCY_CONFLICT,
    R.TENANT_QUOTA_EXCEEDED,
    R.REQUEST_EXCEEDS_QUOTA,
    R.INTAKE_BACKPRESSURE,
)
_JOB_SPEC = (
    R.OPERATION_UNKNOWN,
    R.OPTIONS_INVALID,
    R.INPUTS_INVALID,
    R.DOCUMENT_NOT_FOUND,
    R.TEMPLATE_NOT_IN_EFFECT,
    R.MERGE_INPUT_NOT_APPROVED,
)


def schema_ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def object_schema(properties: dict, required: list[str] | None = None, extra: bool = False) -> dict:
    return {
        "type": "object",
        "properties": properties,
        "required": required or sorted(properties),
        "additionalProperties": extra,
    }


SCHEMAS = {
    "Error": object_schema(
        {
            "error": object_schema(
                {
                    "code": {"type": "string"},
                    "message": {"type": "string"},
                    "problems": {
                        "type": "array",
                        "maxItems": source_format.MAX_REPORTED,
                        "items": object_schema(
                            {
                                "line": {"type": "integer", "minimum": 1},
                                "column": {"type": "string"},
                                "code": {"type": "string"},
                            }
                        ),
                        "description": "SOURCE_INVALID: the file's first problems, in file order",
                    },
                    "problems_total": {"type": "integer", "minimum": 1, "description": "SOURCE_INVALID: every problem"},
                },
                required=["code", "message"],
            )
        }
    ),
    "SourceRevision": object_schema(
        {
            "tenant": {"type": "string"},
            "period": {"type": "string", "pattern": r"^\d{4}-\d{2}$"},
            "sequence": {"type": "integer", "minimum": 1},
            "sha256": _SHA256,
            "bytes": {"type": "integer", "minimum": 1},
            "rows": {"type": "integer", "minimum": 1},
            "event_id": {"type": "string"},
            "correlation_id": {"type": "string"},
        }
    ),
    "Document": object_schema(
        {
            "document_id": _ID,
            "sha256": _SHA256,
            "bytes": {"type": "integer", "minimum": 0},
            "media_type": {"type": "string", "enum": sorted(admission.ALLOWED_MEDIA_TYPES)},
        }
    ),
    "JobAccepted": object_schema({"job_id": _ID, "state": {"type": "string"}, "status_url": {"type": "string"}}),
    "JobSpec": object_schema(
        {
            "operation": {"type": "string"},
            "inputs": {"type": "array", "items": _ID, "maxItems": admission.MAX_INPUTS},
            "options": {"type": "object"},
        },
        required=["operation", "inputs"],
    ),
    "EvidenceJobSpec": object_schema({"period": {"type": "string", "pattern": r"^\d{4}-\d{2}$"}}),
    "Job": object_schema(
        {
            "job_id": _ID,
            "operation": {"type": "string"},
            "state": {"type": "string"},
            "stage": {"type": ["string", "null"]},
            "reason": {"type": ["string", "null"]},
            "message": {"type": ["string", "null"]},
            "attempts": {"type": "integer", "minimum": 0},
            "next_attempt_at": _TIME,
            "inputs": {"type": "array", "items": _ID},
            "options": {"type": "object"},
            "accepted_at": _TIME,
            "started_at": _TIME,
            "finished_at": _TIME,
            "outputs": {
                "type": "array",
                "items": object_schema(
                    {"artifact_id": {"type": "string"}, "sha256": _SHA256, "bytes": {"type": "integer"}}
                ),
            },
            "findings": {"type": ["object", "null"]},
            "period": {"type": "string"},
            "run_id": {"type": ["string", "null"]},
            "bundle": {"type": ["object", "string", "null"]},
            "status_url": {"type": "string"},
            "job_attempts": {
                "type": "array",
                "minItems": 1,
                "items": schema_ref("JobAttempt"),
                "description": "every attempt of the job, the first first; the last is the current one "
                "(whose state is the job's); each replay adds one",
            },
        },
        required=[
            "job_id",
            "operation",
            "state",
            "stage",
            "reason",
            "message",
            "attempts",
            "next_attempt_at",
            "inputs",
            "options",
            "accepted_at",
            "started_at",
            "finished_at",
            "outputs",
            "findings",
            "job_attempts",
            "status_url",
        ],
    ),
    "JobAttempt": object_schema(
        {
            "attempt_id": _SHA256,
            "replay_of": {"type": ["string", "null"], "pattern": "^[0-9a-f]{64}$"},
            "state": {"type": "string", "enum": ["accepted", "running", "succeeded", "rejected", "dead"]},
            "reason": {"type": ["string", "null"]},
            "message": {"type": ["string", "null"]},
            "tries": {"type": "integer", "minimum": 0},
            "policy_version": {"type": "string"},
            "opened_at": {"type": "string", "format": "date-time"},
            "ended_at": _TIME,
        }
    ),
    "BatchSpec": object_schema(
        {
            "jobs": {
                "type": "array",
                "minItems": 1,
                "maxItems": admission.MAX_BATCH_JOBS,
                "items": schema_ref("BatchJobSpec"),
            }
        }
    ),
    "BatchJobSpec": object_schema(
        {
            "idempotency_key": _IDEMPOTENCY_KEY,
            "operation": {"type": "string"},
            "inputs": {"type": "array", "items": _ID, "maxItems": admission.MAX_INPUTS},
            "options": {"type": "object"},
        },
        required=["idempotency_key", "operation", "inputs"],
    ),
    "BatchAccepted": object_schema({"batch_id": _ID, "status_url": {"type": "string"}}),
    "Batch": object_schema(
        {
            "batch_id": _ID,
            "jobs": {"type": "integer"},
            "state": {"type": "string"},
            "undispatched": {"type": "integer"},
            "states": {"type": "object", "additionalProperties": {"type": "integer"}},
        }
    ),
    "BatchCancelled": object_schema(
        {"cancelled": {"type": "integer"}, "running": {"type": "integer"}, "finished": {"type": "integer"}}
    ),
    "Outputs": object_schema(
        {
            "job_id": _ID,
            "state": {"type": "string"},
            "committed": {
                "type": "boolean",
                "description": "whether the job's outputs are committed; nothing is listed or served before",
            },
            "outputs": {"type": "array", "items": schema_ref("Output")},
        }
    ),
    "Output": object_schema(
        {
            "name": {"type": "string"},
            "artifact_id": {"type": "string"},
            "sha256": _SHA256,
            "bytes": {"type": "integer", "minimum": 0},
            "media_type": {"type": "string"},
            "url": {"type": "string"},
        }
    ),
    "Evidence": object_schema(
        {
            "tenant": {"type": "string"},
            "period": {"type": "string", "pattern": r"^\d{4}-\d{2}$"},
            "identity": _SHA256,
            "published_at": {"type": "string", "format": "date-time"},
            "manifest": {"type": "object", "description": "the bundle's manifest.json (evidence-bundle-manifest/v1)"},
            "supersedes": {
                "type": "array",
                "description": "the bundles this one supersedes, the newest first",
                "items": object_schema(
                    {
                        "identity": _SHA256,
                        "reason": {"type": "array", "items": {"type": "string"}},
                        "published_at": {"type": "string", "format": "date-time"},
                    }
                ),
            },
            "bundle": object_schema(
                {
                    "url": {"type": "string"},
                    "bytes": {"type": "integer", "minimum": 0},
                    "media_type": {"type": "string", "const": "application/x-tar"},
                    "etag": {"type": "string"},
                }
            ),
        }
    ),
    "Health": object_schema(
        {"ok": {"type": "boolean"}, "checks": {"type": "object", "additionalProperties": {"type": "string"}}}
    ),
}

_IDEMPOTENCY = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": True,
    "description": "1-255 visible ASCII characters; the same key and request answer the same job",
    "schema": _IDEMPOTENCY_KEY,
}


_IF_NONE_MATCH = {
    "name": "If-None-Match",
    "in": "header",
    "required": False,
    "schema": {"type": "string"},
    "description": "an ETag this endpoint gave: 304 Not Modified when it still names the bytes",
}
_PERIOD = {
    "name": "period",
    "in": "path",
    "required": True,
    "schema": {"type": "string"},
    "description": "the month, YYYY-MM",
}
_STRING = {"schema": {"type": "string"}}
_ETAG = {
    "ETag": {"required": True, **_STRING, "description": "quoted; the same ETag names the same bytes"},
    "Cache-Control": {"required": True, **_STRING},
}
_DOWNLOAD = {
    "Content-Length": {"required": True, "schema": {"type": "integer", "minimum": 0}},
    "Content-Disposition": {"required": True, **_STRING, "description": "attachment; filename=…"},
}
_NOT_MODIFIED = {"description": "the bytes are those If-None-Match named: nothing is sent", "headers": _ETAG}


def _path_id(name: str) -> dict:
    return {"name": name, "in": "path", "required": True, "schema": _ID}


def json_content(schema: str) -> dict:
    return {"content": {"application/json": {"schema": schema_ref(schema)}}}


# (path, method) -> summary, parameters, request body, {status: response schema}, reason codes
OPERATIONS = {
    ("/v1/documents", "post"): (
        "Upload one document: the body is its bytes, streamed",
        [
            {"name": "Content-Length", "in": "header", "required": True, "schema": {"type": "integer", "minimum": 0}},
            {
                "name": "X-Content-SHA256",
                "in": "header",
                "required": False,
                "schema": _SHA256,
                "description": "the bytes' SHA-256, checked before anything is stored",
            },
        ],
        {
            "required": True,
            "content": {
                media: {"schema": {"type": "string", "format": "binary"}}
                for media in sorted(admission.ALLOWED_MEDIA_TYPES)
            },
        },
        {201: "Document", 200: "Document"},
        (
            R.LENGTH_REQUIRED,
            R.LENGTH_MISMATCH,
            R.DOCUMENT_TOO_LARGE,
            R.MEDIA_TYPE_UNSUPPORTED,
            R.CONTENT_DIGEST_MISMATCH,
            R.REQUEST_EXCEEDS_QUOTA,
            R.STORE_FULL,
            R.STORE_READ_ONLY,
            R.STORE_ACCESS_DENIED,
        ),
    ),
    ("/v1/jobs", "post"): (
        "Ask for an operation on documents",
        [_IDEMPOTENCY],
        {"required": True, **json_content("JobSpec")},
        {202: "JobAccepted", 200: "JobAccepted"},
        _JSON_BODY + _ACCEPT + _JOB_SPEC,
    ),
    ("/v1/jobs/{job_id}", "get"): ("A job's status", [_path_id("job_id")], None, {200: "Job"}, (R.JOB_NOT_FOUND,)),
    ("/v1/evidence-jobs", "post"): (
        "Ask for a complete month's evidence bundle",
        [_IDEMPOTENCY],
        {"required": True, **json_content("EvidenceJobSpec")},
        {202: "JobAccepted", 200: "JobAccepted"},
        _JSON_BODY + _ACCEPT + (R.PERIOD_INVALID, R.PERIOD_NOT_AVAILABLE, R.PERIOD_CLOSED),
    ),
    ("/v1/batches", "post"): (
        "Submit up to 5,000 job specs at once",
        [],
        {"required": True, **json_content("BatchSpec")},
        {202: "BatchAccepted", 200: "BatchAccepted"},
        _JSON_BODY + _ACCEPT + _JOB_SPEC + (R.STORE_FULL,),
    ),
    ("/v1/sources/{period}", "put"): (
        "Publish the tenant-month's source file (CSV, the source format): its bytes, streamed",
        [
            {"name": "period", "in": "path", "required": True, "schema": {"type": "string"}},
            {
                **_IDEMPOTENCY,
                "required": False,
                "description": "optional; the same key, period and body answer the same revision, another period or "
                "body under the key is 409",
            },
            {"name": "Content-Length", "in": "header", "required": True, "schema": {"type": "integer", "minimum": 0}},
            {
                "name": "X-Content-SHA256",
                "in": "header",
                "required": False,
                "schema": _SHA256,
                "description": "the body's SHA-256, checked before anything is stored",
            },
        ],
        {"required": True, "content": {"text/csv": {"schema": {"type": "string"}}}},
        {201: "SourceRevision", 200: "SourceRevision"},
        (
            R.PERIOD_INVALID,
            R.IDEMPOTENCY_KEY_INVALID,
            R.IDEMPOTENCY_CONFLICT,
            R.LENGTH_REQUIRED,
            R.LENGTH_MISMATCH,
            R.SOURCE_TOO_LARGE,
            R.MEDIA_TYPE_UNSUPPORTED,
            R.CONTENT_DIGEST_MISMATCH,
            R.SOURCE_INVALID,
            R.TENANT_MONTH_BUSY,
            R.STORE_FULL,
            R.STORE_READ_ONLY,
            R.STORE_ACCESS_DENIED,
        ),
    ),
    ("/v1/batches/{batch_id}", "get"): (
        "A batch's progress",
        [_path_id("batch_id")],
        None,
        {200: "Batch"},
        (R.BATCH_NOT_FOUND,),
    ),
    ("/v1/batches/{batch_id}/cancel", "post"): (
        "Stop a batch",
        [_path_id("batch_id")],
        None,
        {200: "BatchCancelled"},
        (R.BATCH_NOT_FOUND,),
    ),
    ("/v1/jobs/{job_id}/outputs", "get"): (
        "A job's committed outputs (none before its commit)",
        [_path_id("job_id")],
        None,
        {200: "Outputs"},
        (R.JOB_NOT_FOUND,),
    ),
    ("/v1/jobs/{job_id}/outputs/{name}", "get"): (
        "Download one committed output, streamed",
        [_path_id("job_id"), _path_id("name"), _IF_NONE_MATCH],
        None,
        {
            200: {
                "description": "the output's bytes",
                "headers": _ETAG
                | _DOWNLOAD
                | {
                    "Repr-Digest": {
                        "required": True,
                        **_STRING,
                        "description": "RFC 9530: sha-256=:<base64 of the sha256>:",
                    }
                },
                "content": {
                    media: {"schema": {"type": "string", "format": "binary"}}
                    for media in ("application/pdf", "application/json", "application/xml", "application/octet-stream")
                },
            },
            303: {
                "description": "with an S3 archive and EVIDENCE_DOWNLOAD_PRESIGN_SECONDS set: fetch the bytes from "
                "Location, a presigned URL valid that long (send no Authorization header there)",
                "headers": {"Location": {"required": True, **_STRING}, "Cache-Control": {"required": True, **_STRING}},
            },
            304: _NOT_MODIFIED,
        },
        (R.JOB_NOT_FOUND, R.OUTPUT_NOT_FOUND, R.STORE_ACCESS_DENIED, R.STORE_DIGEST_MISMATCH),
    ),
    ("/v1/evidence/{period}", "get"): (
        "A month's current evidence bundle: identity, manifest, what it supersedes",
        [_PERIOD],
        None,
        {200: "Evidence"},
        (R.PERIOD_INVALID, R.EVIDENCE_NOT_FOUND, R.STORE_ACCESS_DENIED),
    ),
    ("/v1/evidence/{period}/bundle", "get"): (
        "Download the month's current bundle as one file that `evidence verify` checks",
        [_PERIOD, _IF_NONE_MATCH],
        None,
        {
            200: {
                "description": "a deterministic, uncompressed tar: keys/ and the bundle folder, as in the archive, "
                "and its c2sp.org/tlog-proof@v1 once a co-signed checkpoint covers it",
                "headers": _ETAG | _DOWNLOAD,
                "content": {"application/x-tar": {"schema": {"type": "string", "format": "binary"}}},
            },
            304: _NOT_MODIFIED,
        },
        (R.PERIOD_INVALID, R.EVIDENCE_NOT_FOUND, R.STORE_ACCESS_DENIED),
    ),
}


def error_responses(codes: set[str], status: dict[str, int], retry_after: int) -> dict:
    """An operation's refusals: one response per status, naming the reason codes it answers with (the schema
    "Error" is the components'; a 429, 503 or 507 carries Retry-After)."""
    by_status: dict[int, set[str]] = defaultdict(set)
    for code in codes:
        by_status[status[code]].add(str(code))
    return {
        str(answered): {
            "description": "refused: " + ", ".join(sorted(named)),
            "content": {
                "application/json": {
                    "schema": {
                        "allOf": [schema_ref("Error")],
                        "properties": {"error": {"properties": {"code": {"enum": sorted(named)}}}},
                    }
                }
            },
            **(
                {"headers": {"Retry-After": {"required": True, "schema": {"type": "integer", "const": retry_after}}}}
                if answered in (429, 503, 507)
                else {}
            ),
        }
        for answered, named in sorted(by_status.items())
    }


def document(status: dict[str, int], retry_after: int) -> dict:
    """The contract, given the status of each reason code and the Retry-After of a 429, 503 or 507."""
    paths: dict[str, dict] = defaultdict(dict)
    for (path, method), (summary, parameters, body, successes, codes) in OPERATIONS.items():
        responses = {
            str(status): {"description": "success", **json_content(schema)} if isinstance(schema, str) else schema
            for status, schema in successes.items()
        }
        responses |= error_responses({*codes, *_ALWAYS}, status, retry_after)
        operation = {
            "summary": summary,
            "operationId": f"{method}_{path}".replace("/", "_").strip("_"),
            "parameters": parameters,
            "responses": responses,
            "security": [{"bearer": []}],
        }
        if body is not None:
            operation["requestBody"] = body
        paths[path][method] = operation
    paths["/healthz"]["get"] = {
        "summary": "Whether the ledger and the stores can be written",
        "operationId": "get_healthz",
        "security": [],
        "responses": {
            "200": {"description": "healthy", **json_content("Health")},
            "503": {"description": "a check failed", **json_content("Health")},
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "evidence_pipeline intake",
            "version": VERSION,
            "description": "Tenants' documents and jobs. The tenant is the bearer token's; anything of another "
            "tenant answers 404 as if it did not exist.",
        },
        "paths": dict(paths),
        "components": {"schemas": SCHEMAS, "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }
