"""Receiving an upload's body: the declared length checked against its ceiling before anything is read, then the
bytes streamed into a spool, hashed on the way, stopped at the ceiling whatever Content-Length said, and held to
the declared length and to X-Content-SHA256 when it is sent. Documents (POST /v1/documents) and source files
(PUT /v1/sources/{period}) arrive this way, each with its own ceiling and the reason code that refuses it."""

from __future__ import annotations

import hashlib
from typing import BinaryIO

from starlette.requests import ClientDisconnect, Request

from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.intake import admission
from evidence_pipeline.store.local import io_errors

SNIFF_BYTES = admission.SNIFF_BYTES


def declared_length(request: Request, ceiling: int, too_large: ReasonCode, what: str) -> int:
    length = request.headers.get("content-length")
    if length is None:
        raise EvidenceError(ReasonCode.LENGTH_REQUIRED, "Content-Length is required")
    if not length.isdigit():
        raise EvidenceError(ReasonCode.REQUEST_INVALID, "Content-Length must be a whole number")
    if int(length) > ceiling:
        raise EvidenceError(too_large, f"{what} are limited to {ceiling} bytes")
    return int(length)


async def receive(
    request: Request, out: BinaryIO, *, declared: int, ceiling: int, too_large: ReasonCode, what: str
) -> tuple[str, int, bytes]:
    """Stream the body into ``out``; returns (sha256, size, its first SNIFF_BYTES bytes)."""
    expected = admission.expected_digest(request.headers.get("x-content-sha256"))
    digest, size, head = hashlib.sha256(), 0, b""
    async for chunk in body(request):
        size += len(chunk)
        if size > ceiling:  # a lying Content-Length: stop reading at ceiling + 1 byte
            raise EvidenceError(too_large, f"{what} are limited to {ceiling} bytes")
        digest.update(chunk)
        with io_errors("a spool"):  # a full or read-only store: its own code, not a 500
            out.write(chunk)
        head += chunk[: SNIFF_BYTES - len(head)]
    if size != declared:
        raise EvidenceError(ReasonCode.LENGTH_MISMATCH, f"received {size} bytes, Content-Length said {declared}")
    sha256 = digest.hexdigest()
    if expected is not None and expected != sha256:
        raise EvidenceError(ReasonCode.CONTENT_DIGEST_MISMATCH, "the bytes do not match X-Content-SHA256")
    return sha256, size, head


async def body(request: Request):
    """The request body as it streams in; a client that leaves mid-body gets nothing stored and no traceback."""
    try:
        async for chunk in request.stream():
            yield chunk
    except ClientDisconnect:
        raise EvidenceError(
            ReasonCode.REQUEST_INVALID, "the client disconnected before the body was complete"
        ) from None
