"""`PUT /v1/sources/{period}`: a tenant's data system publishes the tenant-month's source file with its token.

The body streams into a private spool like a document upload (receive.py), bounded by the format's MAX_BYTES,
then goes through the one publication path (monthly/publication.py): checked whole (422 with the per-row report
when it breaks the format, nothing stored), stored as a content-addressed revision, recorded as
`source.published` with the token's id. 201: a new revision; 200: these rows were published before (the same
revision again).

With an `Idempotency-Key`, the key names one request: the same period and body again answers 200 and the same
revision; another period or body under the key answers 409 (IDEMPOTENCY_CONFLICT) and stores nothing. The key is
bound put-once in the sources store (``<tenant>/requests/<sha256 of the key>.json``) before the revision is
stored, so of two different requests racing under one key exactly one publishes.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Awaitable, Callable

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse

from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.intake import admission, receive
from evidence_pipeline.intake.uploads import UploadsInFlight
from evidence_pipeline.models import TenantMonth, validate_period
from evidence_pipeline.monthly import publication, source_format
from evidence_pipeline.runtime import Runtime

ACTOR = "intake"
MEDIA_TYPE = "text/csv"


def put_source(rt: Runtime, caller_of: Callable[[Request], Awaitable[tuple[str, str]]], uploads: UploadsInFlight):
    """The endpoint, over the app's authentication (``caller_of``) and its uploads in flight (the tenant's slot;
    the app bounds the process's around the endpoint)."""

    async def endpoint(request: Request) -> JSONResponse:
        tenant, token_id = await caller_of(request)
        tenant_month = TenantMonth(tenant, validate_period(request.path_params["period"]))
        key = request.headers.get("idempotency-key")
        key = None if key is None else admission.check_idempotency_key(key)
        declared = receive.declared_length(
            request, source_format.MAX_BYTES, ReasonCode.SOURCE_TOO_LARGE, "source files"
        )
        media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media_type != MEDIA_TYPE:
            raise EvidenceError(ReasonCode.MEDIA_TYPE_UNSUPPORTED, f"a source file is sent as {MEDIA_TYPE}")
        with uploads.slot(tenant), rt.sources.spool(rt.settings.work_dir) as received:
            body_sha256, _, _ = await receive.receive(
                request,
                received,
                declared=declared,
                ceiling=source_format.MAX_BYTES,
                too_large=ReasonCode.SOURCE_TOO_LARGE,
                what="source files",
            )
            received.seek(0)
            data = received.read()
        publisher = publication.Publisher(ACTOR, f"intake-{uuid.uuid4().hex}", token_id, key)
        published = await run_in_threadpool(_publish, rt, tenant_month, data, body_sha256, publisher)
        return JSONResponse(published.view(), status_code=201 if published.created else 200)

    return endpoint


def _publish(
    rt: Runtime, tenant_month: TenantMonth, data: bytes, body_sha256: str, publisher: publication.Publisher
) -> publication.Publication:
    prepared = publication.prepare(tenant_month, data)
    if publisher.idempotency_key is not None:
        _bind_key(rt, tenant_month, publisher.idempotency_key, body_sha256)
    return publication.publish(rt, prepared, publisher)


def _bind_key(rt: Runtime, tenant_month: TenantMonth, key: str, body_sha256: str) -> None:
    """The key names this request (period and body) from now on: put-once, so another request under it is 409."""
    name = hashlib.sha256(key.encode()).hexdigest()
    request = json.dumps({"period": tenant_month.period, "body_sha256": body_sha256}, sort_keys=True).encode()
    try:
        rt.sources.put_once(f"{tenant_month.tenant}/requests/{name}.json", request)
    except EvidenceError as error:
        if error.code != ReasonCode.STORE_CONFLICT:
            raise
        raise EvidenceError(
            ReasonCode.IDEMPOTENCY_CONFLICT, "the Idempotency-Key was used for another period or body"
        ) from None
