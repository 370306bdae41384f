"""The intake HTTP API: Starlette routes over admission.py, served by uvicorn.

Every non-2xx answer is ``{"error": {"code", "message"}}`` with a stable reason code; messages are the
EvidenceError messages, which never carry local paths, and an unexpected exception answers UNEXPECTED_ERROR with
a generic message (its traceback goes to the server's log). The tenant comes only from the bearer token;
anything of another tenant answers 404 as if it did not exist.

Over 400 lines because the routes and the server that runs them (its worker processes, shared port and
parent watch) are one unit: each route is a few lines over admission.py, called with its arguments named.
"""

from __future__ import annotations

import ctypes
import json
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import sys
import time

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from evidence_pipeline.config import Settings
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.http_guard import (
    RETRY_AFTER_SECONDS,
    BoundedRequests,
    Limits,
    error_body,
    exception_handlers,
    server_config,
)
from evidence_pipeline.intake import admission, downloads, openapi, receive, sources_api
from evidence_pipeline.intake.uploads import UploadsInFlight
from evidence_pipeline.ledger.admission import Clock
from evidence_pipeline.metrics.http import (
    AdmissionTimer,
    admission_histogram,
    metrics_route,
    registry_for,
    shared_between_workers,
    uploads_receiving,
)
from evidence_pipeline.monthly.source_format import SourceRejected
from evidence_pipeline.runtime import Runtime, runtime_for
from evidence_pipeline.store.local import io_errors

log = logging.getLogger(__name__)
MAX_JSON_BYTES = 64 * 1024
MAX_BATCH_BYTES = 4 * 1024 * 1024  # a manifest of 5,000 job specs
MAX_JSON_DEPTH = 32  # nesting of arrays and objects in a request body (REQUEST_TOO_DEEP beyond)
ACTOR = "intake"

# reason code -> HTTP status; a code not listed is a server-side failure (500)
STATUS = {
    ReasonCode.AUTH_REQUIRED: 401,
    ReasonCode.TOKEN_INVALID: 401,
    ReasonCode.REQUEST_INVALID: 400,
    ReasonCode.HEADER_REPEATED: 400,
    ReasonCode.REQUEST_TEXT_INVALID: 400,
    ReasonCode.REQUEST_TOO_DEEP: 400,
    ReasonCode.LENGTH_MISMATCH: 400,
    ReasonCode.CONTENT_DIGEST_MISMATCH: 400,
    ReasonCode.IDEMPOTENCY_KEY_INVALID: 400,
    ReasonCode.ROUTE_NOT_FOUND: 404,
    ReasonCode.DOCUMENT_NOT_FOUND: 404,
    ReasonCode.JOB_NOT_FOUND: 404,
    ReasonCode.BATCH_NOT_FOUND: 404,
    ReasonCode.OUTPUT_NOT_FOUND: 404,
    ReasonCode.EVIDENCE_NOT_FOUND: 404,
    ReasonCode.METHOD_NOT_ALLOWED: 405,
    ReasonCode.REQUEST_TIMEOUT: 408,
    ReasonCode.IDEMPOTENCY_CONFLICT: 409,
    ReasonCode.LENGTH_REQUIRED: 411,
    ReasonCode.DOCUMENT_TOO_LARGE: 413,
    ReasonCode.MEDIA_TYPE_UNSUPPORTED: 415,
    ReasonCode.OPERATION_UNKNOWN: 422,
    ReasonCode.OPTIONS_INVALID: 422,
    ReasonCode.INPUTS_INVALID: 422,
    ReasonCode.PERIOD_INVALID: 422,
    ReasonCode.PERIOD_NOT_AVAILABLE: 422,
    ReasonCode.TEMPLATE_NOT_IN_EFFECT: 422,
    ReasonCode.MERGE_INPUT_NOT_APPROVED: 422,
    ReasonCode.PERIOD_CLOSED: 422,
    ReasonCode.SOURCE_INVALID: 422,
    ReasonCode.SOURCE_TOO_LARGE: 413,
    ReasonCode.TENANT_OFFBOARDED: 403,
    ReasonCode.TENANT_UNKNOWN: 403,
    ReasonCode.TENANT_MONTH_BUSY: 503,
    ReasonCode.TENANT_QUOTA_EXCEEDED: 429,
    ReasonCode.REQUEST_EXCEEDS_QUOTA: 413,  # never fits: no Retry-After, an obedient client would loop forever
    ReasonCode.HEADERS_TOO_LARGE: 431,
    ReasonCode.INTAKE_BACKPRESSURE: 503,
    ReasonCode.LEDGER_UNAVAILABLE: 503,
    ReasonCode.LEDGER_CONFLICT: 503,
    ReasonCode.STORE_UNAVAILABLE: 503,
    ReasonCode.INTAKE_BUSY: 503,
    ReasonCode.STORE_READ_ONLY: 503,  # an operator remounts it; nothing the client sent is wrong
    ReasonCode.STORE_ACCESS_DENIED: 503,
    ReasonCode.STORE_FULL: 507,  # Insufficient Storage: space can come back, so it is retried
    ReasonCode.STORE_DIGEST_MISMATCH: 500,  # a download whose archived bytes are not the committed ones
}
CONTRACT = openapi.document(STATUS, RETRY_AFTER_SECONDS)
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def error_response(code: str, message: str, close: bool = False, report: dict | None = None) -> Response:
    """The error body, with ``report`` beside the code and message when given (a source file's problems)."""
    status = STATUS.get(code, 500)
    # the unread rest of a refused upload, or of a body too slow to wait for, is not read
    headers = {"Connection": "close"} if close or status == 408 else {}
    if status in (429, 503, 507):
        headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    body = (
        error_body(code, message)
        if report is None
        else json.dumps({"error": {"code": code, "message": message, **report}}).encode()
    )
    return Response(body, status_code=status, headers=headers, media_type="application/json")


def create_app(rt: Runtime) -> AdmissionTimer:
    """The tenant API, `/healthz`, `/openapi.json` and `/metrics` (unauthenticated, no tenant data: metrics/http.py),
    behind the request guard; every request's time is observed, the guard's own refusals included."""
    settings = rt.settings
    registry = registry_for(rt)
    tokens = rt.tokens
    limits = Limits.of(settings, RETRY_AFTER_SECONDS)
    uploads = UploadsInFlight(limits, uploads_receiving(registry))

    async def caller_of(request: Request) -> tuple[str, str]:
        """(tenant, token id) of the request's bearer token."""
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise EvidenceError(ReasonCode.AUTH_REQUIRED, "send Authorization: Bearer <token>")
        caller = await run_in_threadpool(tokens.caller_of_token, token.strip())
        if caller is None:
            raise EvidenceError(ReasonCode.TOKEN_INVALID, "the token is unknown or revoked")
        return caller

    async def tenant_of(request: Request) -> str:
        return (await caller_of(request))[0]

    async def post_document(request: Request) -> JSONResponse:
        clock = Clock(time.perf_counter())
        tenant = await tenant_of(request)
        declared = receive.declared_length(
            request, settings.intake_max_bytes, ReasonCode.DOCUMENT_TOO_LARGE, "documents"
        )
        media_type = admission.declared_media_type(request.headers.get("content-type"))
        await run_in_threadpool(admission.check_byte_quota, rt, tenant, declared)
        # 0600 and nameless: gone on every exit path (SIGKILL too) unless stored; storing it neither copies nor hashes
        with uploads.slot(tenant), rt.document_store.spool(settings.work_dir) as received:
            sha256, size, head = await receive.receive(
                request,
                received,
                declared=declared,
                ceiling=settings.intake_max_bytes,
                too_large=ReasonCode.DOCUMENT_TOO_LARGE,
                what="documents",
            )
            if admission.sniff(head) != media_type:
                raise EvidenceError(ReasonCode.MEDIA_TYPE_UNSUPPORTED, f"the bytes are not {media_type}")
            row, created = await run_in_threadpool(
                admission.store_document,
                rt,
                tenant,
                spool=received,
                sha256=sha256,
                size=size,
                media_type=media_type,
                actor=ACTOR,
                clock=clock,
            )
        return JSONResponse(admission.document_view(row), status_code=201 if created else 200)

    async def accept(request: Request, submit) -> JSONResponse:
        clock = Clock(time.perf_counter())
        tenant = await tenant_of(request)
        key = admission.check_idempotency_key(request.headers.get("idempotency-key"))
        body = await _json_body(request)
        job, created = await run_in_threadpool(
            submit, rt, tenant, idempotency_key=key, body=body, actor=ACTOR, clock=clock
        )
        view = {"job_id": job.job_id, "state": job.state, "status_url": f"/v1/jobs/{job.job_id}"}
        return JSONResponse(view, status_code=202 if created else 200)

    async def post_job(request: Request) -> JSONResponse:
        return await accept(request, admission.submit_job)

    async def post_evidence_job(request: Request) -> JSONResponse:
        return await accept(request, admission.submit_evidence_job)

    async def get_job(request: Request) -> JSONResponse:
        tenant = await tenant_of(request)
        job_id = _check_text(request.path_params["job_id"])
        view = await run_in_threadpool(admission.job_status, rt, tenant, job_id)
        return JSONResponse(view)

    async def post_batch(request: Request) -> JSONResponse:
        clock = Clock(time.perf_counter())
        tenant = await tenant_of(request)
        body = await _json_body(request, MAX_BATCH_BYTES)
        batch, created = await run_in_threadpool(admission.submit_batch, rt, tenant, body, ACTOR, clock)
        return JSONResponse(
            {"batch_id": batch.batch_id, "status_url": f"/v1/batches/{batch.batch_id}"},
            status_code=202 if created else 200,
        )

    async def get_batch(request: Request) -> JSONResponse:
        tenant = await tenant_of(request)
        view = await run_in_threadpool(_batch_view, rt, tenant, _check_text(request.path_params["batch_id"]))
        return JSONResponse(view)

    async def cancel_batch(request: Request) -> JSONResponse:
        tenant = await tenant_of(request)
        counts = await run_in_threadpool(
            admission.cancel_batch, rt, tenant, _check_text(request.path_params["batch_id"]), ACTOR
        )
        return JSONResponse(counts)

    async def contract(request: Request) -> JSONResponse:
        return JSONResponse(CONTRACT)

    async def healthz(request: Request) -> JSONResponse:
        checks = await run_in_threadpool(_health, rt)
        healthy = all(value == "ok" for value in checks.values())
        return JSONResponse({"ok": healthy, "checks": checks}, status_code=200 if healthy else 503)

    def answer(request: Request, error: EvidenceError) -> Response:
        upload = request.url.path == "/v1/documents" or request.url.path.startswith("/v1/sources/")
        report = error.report() if isinstance(error, SourceRejected) else None  # each problem's line, column, code
        return error_response(error.code, error.message, close=upload, report=report)

    return AdmissionTimer(
        BoundedRequests(
            Starlette(
                routes=[
                    Route("/healthz", healthz, methods=["GET"]),
                    metrics_route(registry),
                    Route("/openapi.json", contract, methods=["GET"]),
                    Route("/v1/documents", uploads.bounded(post_document), methods=["POST"]),
                    Route("/v1/jobs", post_job, methods=["POST"]),
                    Route("/v1/jobs/{job_id}", get_job, methods=["GET"]),
                    Route("/v1/evidence-jobs", post_evidence_job, methods=["POST"]),
                    Route("/v1/batches", post_batch, methods=["POST"]),
                    Route("/v1/batches/{batch_id}", get_batch, methods=["GET"]),
                    Route("/v1/batches/{batch_id}/cancel", cancel_batch, methods=["POST"]),
                    *downloads.routes(rt, tenant_of, _check_text),
                    Route(
                        "/v1/sources/{period}",
                        uploads.bounded(sources_api.put_source(rt, caller_of, uploads)),
                        methods=["PUT"],
                    ),
                ],
                exception_handlers=exception_handlers(answer, log),
            ),
            limits,
        ),
        admission_histogram(registry),
    )


async def _json_body(request: Request, limit: int = MAX_JSON_BYTES):
    length = request.headers.get("content-length")
    if length is None or not length.isdigit() or int(length) > limit:
        raise EvidenceError(ReasonCode.REQUEST_INVALID, f"a JSON body of at most {limit} bytes with Content-Length")
    body = bytearray()  # grows in place: appending to bytes would copy it whole for each chunk
    async for chunk in receive.body(request):
        body += chunk
        if len(body) > limit:
            raise EvidenceError(ReasonCode.REQUEST_INVALID, f"a JSON body of at most {limit} bytes")
    try:
        value = json.loads(body)
    except RecursionError:
        raise EvidenceError(ReasonCode.REQUEST_TOO_DEEP, f"JSON nests at most {MAX_JSON_DEPTH} levels") from None
    except (ValueError, UnicodeDecodeError):
        raise EvidenceError(ReasonCode.REQUEST_INVALID, "the body is not JSON") from None
    return _checked_json(value)


def _checked_json(value):
    """``value`` once every string in it is text the ledger can store (no lone surrogate, no NUL) and it nests at
    most MAX_JSON_DEPTH levels; walked without recursion, so a deep value cannot exhaust the stack here either."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            _check_text(item)
        elif isinstance(item, dict | list):
            if depth >= MAX_JSON_DEPTH:
                raise EvidenceError(ReasonCode.REQUEST_TOO_DEEP, f"JSON nests at most {MAX_JSON_DEPTH} levels")
            stack += ((child, depth + 1) for child in ([*item, *item.values()] if isinstance(item, dict) else item))
    return value


def _check_text(text: str) -> str:
    if "\0" in text or not text.isascii() and not _encodable(text):
        raise EvidenceError(ReasonCode.REQUEST_TEXT_INVALID, "a string holds a NUL or a lone surrogate")
    return text


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _batch_view(rt: Runtime, tenant: str, batch_id: str) -> dict:
    batch = rt.batches.batch(tenant, batch_id)
    if batch is None:
        raise EvidenceError(ReasonCode.BATCH_NOT_FOUND, "no such batch")
    return admission.batch_view(rt, batch)


def _health(rt: Runtime) -> dict[str, str]:
    checks = {}
    scratch = rt.settings.work_dir
    probes = {
        "ledger": rt.tokens.ping,
        "documents": lambda: _write_probe(rt.document_store, scratch),
        "archive": lambda: _write_probe(rt.archive, scratch),
    }
    for name, probe in probes.items():
        try:
            probe()
            checks[name] = "ok"
        except EvidenceError as error:
            checks[name] = error.code
    return checks


def _write_probe(store, scratch) -> None:
    """A store answers and its spool takes a synced write (local: a nameless file in the store's own root, so a
    full or read-only store fails here; S3: the scratch file uploads are received into). Nothing is left behind."""
    store.exists("healthz")
    with store.spool(scratch) as probe, io_errors("a probe"):
        probe.write(b"healthz")
        probe.flush()
        os.fsync(probe.fileno())


def app_from_env() -> AdmissionTimer:
    """The app of one server process, on the environment's settings: every worker of ``serve`` builds its own."""
    return create_app(runtime_for(Settings.from_env()))


def serve(settings: Settings, host: str, port: int, workers: int) -> None:
    """Serve intake until interrupted, in ``workers`` processes: one receives and hashes every body on its one
    event loop thread, so it uses one core whatever the machine has."""
    runtime_for(settings).document_store  # fail here, once, on a bad configuration; the ledger migrated before workers
    if workers == 1:
        _serve_process(host, port)
        return
    # Each worker listens on a socket of its own (SO_REUSEPORT), so the kernel spreads connections over them: on
    # one shared socket the first worker to wake accepts a whole burst. The port is reserved here (bound, never
    # listening, so it is given no connection), which also resolves port 0.
    with _reuse_port_socket(host, port) as reserved, shared_between_workers():
        port = reserved.getsockname()[1]
        spawn = multiprocessing.get_context("spawn")
        processes = [spawn.Process(target=_serve_process, args=(host, port, os.getpid())) for _ in range(workers)]
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stop the workers on the way out
        for process in processes:
            process.start()
        try:
            multiprocessing.connection.wait([process.sentinel for process in processes])
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                process.join()
    raise SystemExit("an intake worker exited: the server stopped")


def _serve_process(host: str, port: int, worker_of: int | None = None) -> None:
    """Serve in this process; ``worker_of``: as a worker of that parent process, on a SO_REUSEPORT socket."""
    if worker_of is not None:
        _exit_with_parent(worker_of)
    config = server_config(
        f"{__name__}:app_from_env", Settings.from_env(), factory=True, host=host, port=port, log_level="info"
    )
    uvicorn.Server(config).run(sockets=None if worker_of is None else [_reuse_port_socket(host, port)])


def _exit_with_parent(parent: int) -> None:
    """A worker whose parent dies (SIGKILL included) gets SIGTERM: no orphan keeps serving the port."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before the request was made
        sys.exit(0)


def _reuse_port_socket(host: str, port: int) -> socket.socket:
    family, kind, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(address)
    return sock
