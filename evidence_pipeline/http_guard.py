"""The one guarded protocol of every HTTP server the project runs (the tenant API, the operator API, the witness,
`evidence metrics serve`), below each app: uvicorn's httptools protocol bounds nothing about a connection (no header
size or count, no time to headers), so a slow or huge request could hold a worker's memory and its file descriptors
forever. ``guarded_protocol`` bounds the header phase (bytes, count, time) and the number of connections, and ends a
connection whose answer came before its body with a bounded drain rather than a reset; ``BoundedRequests`` (ASGI)
bounds the body's rate and the request's total time, and refuses ambiguous requests (a security header sent twice);
``server_config`` is how every server is started (the limits
are the EVIDENCE_INTAKE_* connection settings, whichever server reads them), ``guarded`` how an app that has no
error vocabulary of its own is put behind the guard; ``error_body`` and ``exception_handlers`` are how an app
behind the guard answers a failure.

Over 400 lines because the header-phase protocol and the ASGI body guard are one set of limits that every
server starts with together."""

from __future__ import annotations

import asyncio
import json
import logging
import resource
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import httptools
import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from evidence_pipeline.config import Settings
from evidence_pipeline.errors import EvidenceError, ReasonCode

RETRY_AFTER_SECONDS = 30  # what a 429, 503 or 507 asks the client to wait
FD_RESERVE = 64  # descriptors kept for the ledger, the stores, spools and logs beside the connections
# After a refusal the rest of the request is read and dropped for a moment before closing: closing with unread
# bytes makes the kernel send a reset, and the client never sees the answer.
LINGER_SECONDS, LINGER_BYTES = 1.0, 1 << 20
# headers whose second copy would be silently ignored (the first one wins in Starlette)
SINGLE_HEADERS = frozenset(
    {b"authorization", b"x-content-sha256", b"idempotency-key", b"content-type", b"content-length", b"host"}
)


@dataclass(frozen=True)
class Limits:
    max_headers: int
    max_header_bytes: int  # request line and headers together
    header_timeout: float  # from connection (or the request's first byte) to its last header
    min_body_rate: int  # bytes/s a body must keep up once the app reads it, after a grace of header_timeout
    request_timeout: float  # from the last header to the end of the answer
    max_connections: int
    max_uploads: int  # uploads in flight in this process
    tenant_max_uploads: int  # ... of one tenant
    retry_after: int

    @classmethod
    def of(cls, settings: Settings, retry_after: int) -> Limits:
        return cls(
            max_headers=settings.intake_max_headers,
            max_header_bytes=settings.intake_max_header_bytes,
            header_timeout=settings.intake_header_timeout_seconds,
            min_body_rate=settings.intake_min_body_rate,
            request_timeout=settings.intake_request_timeout_seconds,
            max_connections=min(settings.intake_max_connections, fd_budget()),
            max_uploads=settings.intake_max_uploads,
            tenant_max_uploads=settings.intake_tenant_max_uploads,
            retry_after=retry_after,
        )


def fd_budget() -> int:
    """Connections this process can hold: its descriptor limit less a reserve (an accept that fails with EMFILE
    stops the whole listener, refusing everyone)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(1, soft - FD_RESERVE) if soft != resource.RLIM_INFINITY else 1 << 20


def error_body(code: str, message: str) -> bytes:
    return json.dumps({"error": {"code": code, "message": message}}).encode()


def exception_handlers(answer: Callable[[Request, EvidenceError], Response], log: logging.Logger) -> dict:
    """An app's handlers of every failure, each answered by ``answer(request, error)``: an EvidenceError as it is,
    an unknown route or method as ROUTE_NOT_FOUND or METHOD_NOT_ALLOWED, anything else as UNEXPECTED_ERROR with a
    generic message (its traceback goes to ``log``, never to the client)."""

    async def evidence_error(request: Request, error: EvidenceError) -> Response:
        return answer(request, error)

    async def http_error(request: Request, error: HTTPException) -> Response:
        if error.status_code == 405:
            return answer(request, EvidenceError(ReasonCode.METHOD_NOT_ALLOWED, "method not allowed"))
        return answer(request, EvidenceError(ReasonCode.ROUTE_NOT_FOUND, "no such endpoint"))

    async def unexpected(request: Request, error: Exception) -> Response:
        log.exception("unexpected error in %s %s", request.method, request.url.path)
        return answer(
            request, EvidenceError(ReasonCode.UNEXPECTED_ERROR, "internal error; the server log has the details")
        )

    return {EvidenceError: evidence_error, HTTPException: http_error, Exception: unexpected}


# the statuses of the guard's own refusals and of an app's routing failures
STATUS = {
    ReasonCode.REQUEST_INVALID: 400,
    ReasonCode.HEADER_REPEATED: 400,
    ReasonCode.ROUTE_NOT_FOUND: 404,
    ReasonCode.METHOD_NOT_ALLOWED: 405,
    ReasonCode.REQUEST_TIMEOUT: 408,
    ReasonCode.HEADERS_TOO_LARGE: 431,
    ReasonCode.INTAKE_BUSY: 503,
}


def server_config(app, settings: Settings, **options) -> uvicorn.Config:
    """uvicorn's configuration of any server of ours: the guarded protocol with ``settings``' limits."""
    return uvicorn.Config(
        app,
        http=guarded_protocol(Limits.of(settings, RETRY_AFTER_SECONDS)),
        ws="none",
        server_header=False,
        proxy_headers=False,
        **options,
    )


def guarded(routes: list, settings: Settings, log: logging.Logger) -> ASGIApp:
    """A Starlette app of ``routes`` behind BoundedRequests, whose failures (a body too slow, an unknown route,
    an unexpected error) are answered in our envelope with STATUS."""

    def answer(_request: Request, error: EvidenceError) -> Response:
        return Response(
            error_body(error.code, error.message), STATUS.get(error.code, 500), media_type="application/json"
        )

    return BoundedRequests(
        Starlette(routes=routes, exception_handlers=exception_handlers(answer, log)),
        Limits.of(settings, RETRY_AFTER_SECONDS),
    )


class _Refused(Exception):
    """Raised from a parser callback to stop parsing; the refusal is on the protocol."""


def guarded_protocol(limits: Limits) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol with ``limits`` (pass as ``uvicorn.Config(http=...)``)."""
    return type("GuardedProtocol", (GuardedProtocol,), {"limits": limits})


class GuardedProtocol(HttpToolsProtocol):
    limits: Limits

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self._refusal: tuple[int, str, str] | None = None
        self._header_timer: asyncio.TimerHandle | None = None
        self._header_started = 0.0
        self._began, self._raw_header_bytes, self._parsed_header_bytes = False, 0, 0
        self._lingering, self._linger_bytes = False, 0
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections and not self._evict_slowest():
            self._refuse(503, ReasonCode.INTAKE_BUSY, "too many connections; try again later")
            return
        self._start_header_clock()

    def connection_lost(self, exc) -> None:
        self._stop_header_clock()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._lingering:  # answered: dropped, never parsed or kept
            self._linger_bytes -= len(data)
            if self._linger_bytes < 0:
                self.transport.close()
            return
        self._unset_keepalive_if_required()
        self._began = False
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            return  # served as plain HTTP (there is no WebSocket here), as uvicorn does
        except httptools.HttpParserError:
            if self._refusal is None:
                self._refuse(400, ReasonCode.REQUEST_INVALID, "the request is not valid HTTP/1.1")
            else:
                self._refuse(*self._refusal)
            return
        # Bytes of a request whose headers are still incomplete are held by the parser: count them here, since a
        # header value reaches on_header only once complete. A read that began the request is left to the exact
        # counts of on_url/on_header, so the parser holds at most the limit plus one read.
        if self._header_timer is not None and not self._began:
            self._raw_header_bytes += len(data)
            if self._raw_header_bytes > self.limits.max_header_bytes:
                self._refuse(*self._too_large())

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._began, self._raw_header_bytes, self._parsed_header_bytes = True, 0, 0
        if self._header_timer is None:
            self._start_header_clock()

    def on_url(self, url: bytes) -> None:
        self._check_header_bytes(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._check_header_bytes(len(name) + len(value) + 4)
        if len(self.headers) >= self.limits.max_headers:
            self._refusal = (431, ReasonCode.HEADERS_TOO_LARGE, f"at most {self.limits.max_headers} headers")
            raise _Refused
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._stop_header_clock()
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle.transport is self.transport:
            cycle.transport = _LingerOnClose(self.transport, lambda: self._close_after(cycle))

    def _close_after(self, cycle) -> None:
        """uvicorn closes the connection after an answer that says `Connection: close` (a refused upload's, sent
        before its body was read). Closing with the body still arriving makes the kernel send a reset, and a client
        still sending loses the answer: linger instead, as after a refusal of our own."""
        if cycle.more_body:
            self._linger()
        else:
            self.transport.close()

    def _check_header_bytes(self, adding: int) -> None:
        """In a parser callback: stop parsing once the request line and headers pass the limit."""
        self._parsed_header_bytes += adding
        if self._parsed_header_bytes > self.limits.max_header_bytes:
            self._refusal = self._too_large()
            raise _Refused

    def _too_large(self) -> tuple[int, str, str]:
        return 431, ReasonCode.HEADERS_TOO_LARGE, f"headers are limited to {self.limits.max_header_bytes} bytes"

    def _start_header_clock(self) -> None:
        self._header_started = time.monotonic()
        self._header_timer = self.loop.call_later(self.limits.header_timeout, self._headers_too_slow)

    def _stop_header_clock(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        self._refuse(
            408, ReasonCode.REQUEST_TIMEOUT, f"the headers took longer than {self.limits.header_timeout:g} seconds"
        )

    def _evict_slowest(self) -> bool:
        """Make room by closing the connection that has waited longest for headers, or sat idle between requests
        longest (either holds a descriptor for nothing; a busy one is never cut off). False when every connection
        is busy."""
        waiting = [c for c in self.connections if c is not self and c._waiting()]
        if not waiting:
            return False
        slowest = min(waiting, key=lambda c: c._header_started)
        if slowest._header_timer is None:  # idle: closed quietly, as the keep-alive timeout would
            slowest.connections.discard(slowest)
            slowest.transport.close()
            return True
        # it is sending next to nothing, so it is closed at once: a lingering descriptor is the room it was evicted for
        slowest._refuse(
            408, ReasonCode.REQUEST_TIMEOUT, "the server needed the connection; send headers promptly", linger=False
        )
        return True

    def _waiting(self) -> bool:
        """Waiting for a request's headers, or idle between requests (kept alive)."""
        return self._header_timer is not None or self.cycle is None or self.cycle.response_complete

    def _refuse(self, status: int, code: str, message: str, linger: bool = True) -> None:
        """Answer with an error of our envelope and close, parsing nothing more."""
        self._stop_header_clock()
        self._refusal = (status, code, message)
        self.connections.discard(self)  # its descriptor is being released: count the room now
        if self.transport.is_closing():
            return
        body = error_body(code, message)
        retry = f"retry-after: {self.limits.retry_after}\r\n".encode() if status == 503 else b""
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%sconnection: close\r\n\r\n"
            % (status, _REASONS[status], len(body), retry)
            + body
        )
        if linger:
            self._linger()
        else:
            self.transport.close()

    def _linger(self) -> None:
        """Close once the answer is out: our side is shut (the client reads the answer, then the end), and what the
        client still sends is read and dropped for up to LINGER_SECONDS or LINGER_BYTES, then the socket closed."""
        self.connections.discard(self)
        if self.transport.is_closing():
            return
        if not self.transport.can_write_eof():
            self.transport.close()
            return
        self.transport.write_eof()
        self._lingering, self._linger_bytes = True, LINGER_BYTES
        self.flow.resume_reading()  # uvicorn pauses reading while a body waits unread
        self.loop.call_later(LINGER_SECONDS, self.transport.close)


class _LingerOnClose:
    """A connection's transport as one request's cycle sees it: the same, but its close() is the protocol's."""

    def __init__(self, transport, close: Callable[[], None]):
        self._transport, self.close = transport, close

    def __getattr__(self, name: str):
        return getattr(self._transport, name)


_REASONS = {
    400: b"Bad Request",
    408: b"Request Timeout",
    431: b"Request Header Fields Too Large",
    503: b"Service Unavailable",
}


class BoundedRequests:
    """ASGI middleware: one copy of each security header, a normalized path, a minimum body rate and a total time
    per request."""

    def __init__(self, app, limits: Limits):
        self.app, self.limits = app, limits

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        names = Counter(name for name, _ in scope["headers"] if name in SINGLE_HEADERS)
        repeated = sorted(name.decode() for name, count in names.items() if count > 1)
        scope["path"] = _normalized(scope["path"])
        reading_since: float | None = None
        received = 0

        async def paced_receive():
            # the body must have arrived at min_body_rate since the grace ended: a slow client cannot hold a slot.
            # The clock starts when the app first reads the body, not when it was called: an app that reads late
            # (after a slow token lookup) finds the body waiting, and a client is not late for the server's delay.
            nonlocal received, reading_since
            loop = asyncio.get_running_loop()
            reading_since = loop.time() if reading_since is None else reading_since
            deadline = reading_since + self.limits.header_timeout + received / self.limits.min_body_rate
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                raise EvidenceError(
                    ReasonCode.REQUEST_TIMEOUT, f"the body arrived slower than {self.limits.min_body_rate} bytes/s"
                ) from None
            received += len(message.get("body", b""))
            return message

        answered = False

        async def tracked_send(message):
            nonlocal answered
            answered = True
            await send(message)

        if repeated:
            return await self._answer(send, 400, ReasonCode.HEADER_REPEATED, f"send {repeated[0]} once")
        try:
            async with asyncio.timeout(self.limits.request_timeout):
                await self.app(scope, paced_receive, tracked_send)
        except TimeoutError:
            if not answered:  # else the answer is cut short: uvicorn closes the connection
                await self._answer(
                    send,
                    408,
                    ReasonCode.REQUEST_TIMEOUT,
                    f"the request took longer than {self.limits.request_timeout:g} seconds",
                )

    async def _answer(self, send, status: int, code: str, message: str) -> None:
        body = error_body(code, message)
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def _normalized(path: str) -> str:
    """Repeated and trailing slashes dropped: ``/v1/jobs/`` is ``/v1/jobs``, answered in place (a redirect would
    be built from the client's Host header)."""
    return "/" + "/".join(part for part in path.split("/") if part)
