"""The operator API's contract: an OpenAPI 3.1 document, served at its /openapi.json and built here from the code
that answers (the status of each reason code is app.STATUS), in the tenant API's form (intake/openapi.py): each
operation lists the reason codes it can answer, grouped by status, and every error body is
``{"error": {"code", "message"}}``. There is no security scheme: each body carries the actor's signed request.
"""

from __future__ import annotations

from evidence_pipeline.actors.requests import ACTION_PAYLOAD_TYPE
from evidence_pipeline.actors.roles import Action
from evidence_pipeline.errors import ReasonCode as R
from evidence_pipeline.intake.openapi import error_responses, json_content, object_schema, schema_ref
from evidence_pipeline.operations.dead_letters import KINDS

VERSION = "1.0.0"
_SHA256 = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
_TEXT = {"type": ["string", "null"]}
# what any operation may answer: the connection guard's limits, the body, the signed request, the ledger
_ALWAYS = (
    R.REQUEST_INVALID,
    R.REQUEST_TEXT_INVALID,
    R.HEADER_REPEATED,
    R.HEADERS_TOO_LARGE,
    R.REQUEST_TIMEOUT,
    R.INTAKE_BUSY,
    R.LEDGER_UNAVAILABLE,
    R.LEDGER_CONFLICT,
    R.ACTION_UNSIGNED,
    R.ACTION_REQUEST_INVALID,
    R.ACTION_SIGNATURE_INVALID,
    R.ACTOR_UNKNOWN,
    R.ACTOR_KEY_REVOKED,
    R.ACTION_EXPIRED,
    R.ACTION_FORBIDDEN,
    R.ACTION_REPLAYED,
)
_SIGNED = {
    "type": "object",
    "description": "the actor's signed request (see Who acts), whose action is the operation's",
    "properties": {"authorization": schema_ref("SignedRequest")},
}

SCHEMAS = {
    "Error": object_schema({"error": object_schema({"code": {"type": "string"}, "message": {"type": "string"}})}),
    "SignedRequest": object_schema(
        {
            "payloadType": {"type": "string", "const": ACTION_PAYLOAD_TYPE},
            "payload": {
                "type": "string",
                "contentEncoding": "base64",
                "description": "the request's canonical JSON text, exactly as signed",
            },
            "signatures": {
                "type": "array",
                "minItems": 1,
                "maxItems": 1,
                "items": object_schema(
                    {
                        "keyid": _SHA256
                        | {
                            "description": "the signing key's id (the request's key_id), outside the signed "
                            "bytes: the key is chosen, and the signature verified, before the "
                            "payload is read"
                        },
                        "sig": {
                            "type": "string",
                            "contentEncoding": "base64",
                            "description": "Ed25519 over the DSSE pre-authentication encoding of the payload",
                        },
                    }
                ),
            },
        }
    ),
    "Signed": object_schema(_SIGNED["properties"]),
    "TemplateSubmission": object_schema(
        {
            **_SIGNED["properties"],
            "organization": {"type": "string", "description": "the organization template's JSON text"},
            "program": {"type": "string", "description": "the program template's JSON text"},
        }
    ),
    "DeadLetters": object_schema(
        {"dead_letters": {"type": "array", "items": schema_ref("DeadLetter"), "description": "oldest ending first"}}
    ),
    "DeadLetter": object_schema(
        {
            "job_id": {"type": "string"},
            "attempt_id": _SHA256,
            "kind": {"type": "string", "enum": list(KINDS)},
            "tenant": {"type": "string"},
            "period": {"type": "string"},
            "operation": _TEXT,
            "state": {"type": "string", "enum": ["rejected", "dead"]},
            "reason": _TEXT,
            "message": _TEXT,
            "tries": {"type": "integer", "minimum": 0},
            "next_step": {"type": "string"},
            "ended_at": {"type": "string", "format": "date-time"},
        }
    ),
    "Replayed": object_schema(
        {
            "job_id": {"type": "string"},
            "attempt_id": _SHA256,
            "replay_of": _SHA256,
            "tenant": {"type": "string"},
            "period": {"type": "string"},
            "state": {"type": "string"},
            "next_step": {"type": "string"},
        }
    ),
    "PartDecision": object_schema(
        {
            "artifact_id": {"type": "string"},
            "sha256": _SHA256,
            "decision": {"type": "string", "enum": ["approved", "rejected"]},
            "reason": {"type": "string"},
            "authorization": schema_ref("SignedRequest"),
        }
    ),
    "TemplateVersion": object_schema(
        {
            "version_id": _SHA256,
            "author": {"type": "string"},
            "submitted_at": {"type": "string"},
            "effective_at": {"type": "string"},
            "approved_by": _TEXT,
            "approved_at": _TEXT,
            "approval_seq": {"type": ["integer", "null"]},
        }
    ),
}

# (path, action) -> summary, request body schema, {status: response schema}, reason codes beside _ALWAYS
OPERATIONS = {
    ("/v1/dead-letters/list", Action.JOBS_READ): (
        "Failed jobs (dead, or rejected by a terminal failure) with the next step for each, as `evidence dead-letter "
        "list --json` lists them. Args, each optional: tenant, kinds, codes, older_than_seconds, since",
        "Signed",
        {200: "DeadLetters"},
        (),
    ),
    ("/v1/jobs/replay", Action.JOB_REPLAY): (
        "Replay a dead or rejected job as a new attempt linked to the ended one (`evidence replay`). Args: job_id, "
        "reason and, optionally, policy_version",
        "Signed",
        {201: "Replayed"},
        (R.JOB_NOT_FOUND, R.JOB_CLOSED, R.REPLAY_POLICY_MISMATCH),
    ),
    ("/v1/templates/submit", Action.TEMPLATE_SUBMIT): (
        "Submit a redaction template version of the request's tenant (`evidence template submit`). Args: version_id "
        "(these rules' version), effective_at; 200 when the same rules were submitted before",
        "TemplateSubmission",
        {201: "TemplateVersion", 200: "TemplateVersion"},
        (R.TEMPLATE_INVALID, R.OCR_LANGUAGE_UNAVAILABLE),
    ),
    ("/v1/templates/approve", Action.TEMPLATE_APPROVE): (
        "Approve another identity's template version (`evidence template approve`). Args: version_id; 200 when it "
        "was approved before",
        "Signed",
        {201: "TemplateVersion", 200: "TemplateVersion"},
        (R.TEMPLATE_NOT_FOUND, R.TEMPLATE_SELF_APPROVAL),
    ),
    ("/v1/parts/decide", Action.PART_DECIDE): (
        "Decide on a derived part of the request's tenant, approved or rejected, with a reason (`evidence part "
        "decide`). Args: artifact_id, decision, reason; a merge admits a part whose latest decision, this or its "
        "contract review's, approves it",
        "Signed",
        {201: "PartDecision"},
        (R.DOCUMENT_NOT_FOUND,),
    ),
}


def document(status: dict[str, int], retry_after: int) -> dict:
    """The contract, given the status of each reason code and the Retry-After of a 503."""
    paths = {}
    for (path, action), (summary, body, successes, codes) in OPERATIONS.items():
        responses = {
            str(answered): {"description": "success", **json_content(schema)} for answered, schema in successes.items()
        }
        responses |= error_responses({*codes, *_ALWAYS}, status, retry_after)
        paths[path] = {
            "post": {
                "summary": summary,
                "operationId": f"post_{path}".replace("/", "_").replace("-", "_").strip("_"),
                "x-action": str(action),
                "security": [],
                "requestBody": {"required": True, **json_content(body)},
                "responses": responses,
            }
        }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "evidence_pipeline operator API",
            "version": VERSION,
            "description": "Operators', approvers' and auditors' actions, each body carrying its actor's signed "
            "request (`authorization`) for the action the operation names (`x-action`). Tenant "
            "bearer tokens authenticate nothing here.",
        },
        "paths": paths,
        "components": {"schemas": SCHEMAS},
    }
