"""The operator API's routes: Starlette on uvicorn, in one process, behind the tenant API's connection guard.

Every operation is a POST whose JSON body carries the actor's signed request under ``authorization`` (and, to submit
a template, the templates' text); the request's action must be the operation's (``x-action`` in the contract) and
passes the same ActionGate as the command line, which records its refusals. The server reads no Authorization
header: a tenant's bearer token is no credential here, and a request that brings only one is ACTION_UNSIGNED.
Every non-2xx answer is ``{"error": {"code", "message"}}`` with a stable reason code, as the tenant API's; an
unexpected exception answers UNEXPECTED_ERROR with a generic message (its traceback goes to the server's log).
"""

from __future__ import annotations

import logging

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from evidence_pipeline import jsonread
from evidence_pipeline.actors.authorize import ActionGate
from evidence_pipeline.actors.roles import Action
from evidence_pipeline.config import Settings
from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.errors import ReasonCode as R
from evidence_pipeline.http_guard import (
    RETRY_AFTER_SECONDS,
    BoundedRequests,
    Limits,
    error_body,
    exception_handlers,
    server_config,
)
from evidence_pipeline.operator_api import actions, contract
from evidence_pipeline.runtime import Runtime, runtime_for

log = logging.getLogger(__name__)
MAX_BODY_BYTES = 1 << 20  # a signed request is a few hundred bytes; two templates of at most 64 KiB, escaped

# reason code -> HTTP status; a code not listed is a server-side failure (500)
STATUS = {
    R.REQUEST_INVALID: 400,
    R.REQUEST_TEXT_INVALID: 400,
    R.HEADER_REPEATED: 400,
    # not authenticated: no signed request, or one that names no registered actor's valid key, or too old
    R.ACTION_UNSIGNED: 401,
    R.ACTION_SIGNATURE_INVALID: 401,
    R.ACTOR_UNKNOWN: 401,
    R.ACTOR_KEY_REVOKED: 401,
    R.ACTION_EXPIRED: 401,
    # authenticated, but not allowed: the role, or four-eyes between identities
    R.ACTION_FORBIDDEN: 403,
    R.TEMPLATE_SELF_APPROVAL: 403,
    R.ROUTE_NOT_FOUND: 404,
    R.DOCUMENT_NOT_FOUND: 404,
    R.JOB_NOT_FOUND: 404,
    R.TEMPLATE_NOT_FOUND: 404,
    R.METHOD_NOT_ALLOWED: 405,
    R.REQUEST_TIMEOUT: 408,
    R.ACTION_REPLAYED: 409,
    R.JOB_CLOSED: 409,
    R.ACTION_REQUEST_INVALID: 422,
    R.TEMPLATE_INVALID: 422,
    R.OCR_LANGUAGE_UNAVAILABLE: 422,
    R.REPLAY_POLICY_MISMATCH: 422,
    R.HEADERS_TOO_LARGE: 431,
    R.INTAKE_BUSY: 503,
    R.LEDGER_UNAVAILABLE: 503,
    R.LEDGER_CONFLICT: 503,
}
CONTRACT = contract.document(STATUS, RETRY_AFTER_SECONDS)


def error_response(code: str, message: str) -> Response:
    status = STATUS.get(code, 500)
    headers = {"Retry-After": str(RETRY_AFTER_SECONDS)} if status == 503 else {}
    return Response(error_body(code, message), status_code=status, headers=headers, media_type="application/json")


def create_app(runtime: Runtime) -> BoundedRequests:
    gate = ActionGate(runtime.actors, runtime.settings.action_max_age_seconds)

    async def list_dead_letters(request: Request) -> JSONResponse:
        signed = await _body(request)
        letters = await run_in_threadpool(actions.list_dead_letters, runtime, gate, signed.get("authorization"))
        return JSONResponse({"dead_letters": letters})

    async def replay(request: Request) -> JSONResponse:
        signed = await _body(request)
        return JSONResponse(
            await run_in_threadpool(actions.replay, runtime, gate, signed.get("authorization")), status_code=201
        )

    async def submit_template(request: Request) -> JSONResponse:
        body = await _body(request, "organization", "program")
        version, created = await run_in_threadpool(
            actions.submit_template, gate, body.get("authorization"), body["organization"], body["program"]
        )
        return JSONResponse(version, status_code=201 if created else 200)

    async def approve_template(request: Request) -> JSONResponse:
        signed = await _body(request)
        version, created = await run_in_threadpool(actions.approve_template, gate, signed.get("authorization"))
        return JSONResponse(version, status_code=201 if created else 200)

    async def decide_part(request: Request) -> JSONResponse:
        signed = await _body(request)
        return JSONResponse(
            await run_in_threadpool(actions.decide_part, runtime, gate, signed.get("authorization")), status_code=201
        )

    async def served_contract(request: Request) -> JSONResponse:
        return JSONResponse(CONTRACT)

    endpoints = {
        Action.JOBS_READ: list_dead_letters,
        Action.JOB_REPLAY: replay,
        Action.TEMPLATE_SUBMIT: submit_template,
        Action.TEMPLATE_APPROVE: approve_template,
        Action.PART_DECIDE: decide_part,
    }
    return BoundedRequests(
        Starlette(
            routes=[
                Route("/openapi.json", served_contract, methods=["GET"]),  # the routes are the contract's paths
                *(Route(path, endpoints[action], methods=["POST"]) for path, action in contract.OPERATIONS),
            ],
            exception_handlers=exception_handlers(
                lambda _request, error: error_response(error.code, error.message), log
            ),
        ),
        Limits.of(runtime.settings, RETRY_AFTER_SECONDS),
    )


async def _body(request: Request, *required: str) -> dict:
    """The JSON body: an object of ``authorization`` (absent: the gate answers ACTION_UNSIGNED) and ``required``."""
    length = request.headers.get("content-length")
    if length is None or not length.isdigit() or int(length) > MAX_BODY_BYTES:
        raise EvidenceError(R.REQUEST_INVALID, f"a JSON body of at most {MAX_BODY_BYTES} bytes with Content-Length")
    try:
        raw = await request.body()
    except ClientDisconnect:
        raise EvidenceError(R.REQUEST_INVALID, "the client disconnected before the body was complete") from None
    body = jsonread.loads(raw, R.REQUEST_INVALID, "the body", MAX_BODY_BYTES)
    if not isinstance(body, dict) or not set(required) <= body.keys() <= {"authorization", *required}:
        raise EvidenceError(
            R.REQUEST_INVALID,
            "the body is an object of " + ", ".join(["authorization (the signed request)", *required]),
        )
    return body


def app_from_env() -> BoundedRequests:
    return create_app(runtime_for(Settings.from_env()))


def serve(settings: Settings, host: str) -> None:
    """Serve the operator API on EVIDENCE_OPERATOR_API_PORT until interrupted (CONFIG_INVALID when it is unset:
    the API is off by default)."""
    if settings.operator_api_port is None:
        raise EvidenceError(R.CONFIG_INVALID, "the operator API is off: set EVIDENCE_OPERATOR_API_PORT to serve it")
    runtime_for(settings)  # fail here, once, on a bad configuration; the ledger is migrated before serving
    uvicorn.Server(
        server_config(
            f"{__name__}:app_from_env",
            settings,
            factory=True,
            host=host,
            port=settings.operator_api_port,
            log_level="info",
        )
    ).run()
