"""Outbound HTTP calls with a total deadline (webhooks, witnesses; S3 calls use its Watchdog, store/s3.py).

A socket timeout bounds each read, not the call: a peer that sends one byte just inside it every time, in its status
line, its headers or its body, held a webhook attempt open 152 s against a 3 s timeout. Here a watchdog shuts the
socket down when the call's time is up, whatever phase the call is in (connecting, the TLS handshake, sending,
waiting for or reading the answer), and a call whose time ran out fails with TimeoutError even if some answer had
arrived; the name is resolved under the same deadline. So a call ends by its deadline whatever the peer does.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import http.client
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Target:
    scheme: str  # http or https
    host: str
    port: int
    path: str  # with its query


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    body: bytes  # its first ``max_body`` bytes


def target(url: str) -> Target:
    """The parts of an http(s) URL already checked by its setting."""
    parts = urlsplit(url)
    https = parts.scheme == "https"
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(parts.scheme, parts.hostname or "", parts.port or (443 if https else 80), path)


def resolve(host: str, port: int, timeout: float) -> list[tuple]:
    """``socket.getaddrinfo`` (stream sockets), given up after ``timeout`` with TimeoutError: the resolver's own
    retries can take far longer. A lookup given up finishes on its own in the background."""
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="resolve")
    try:
        return pool.submit(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM).result(timeout)
    finally:
        pool.shutdown(wait=False)


def request(
    method: str,
    to: Target,
    *,
    headers: dict[str, str],
    body: bytes,
    timeout: float,
    address: str | None = None,
    max_body: int = 4096,
) -> Answer:
    """``method`` ``to`` with ``body``, connecting to ``address`` (already resolved and checked; by default the
    host), over in at most ``timeout`` seconds from now: TimeoutError past it, another OSError or an
    http.client.HTTPException when the peer fails first."""
    deadline = time.monotonic() + timeout
    connection = _Connection(to, address or to.host, deadline)
    with Watchdog(timeout) as watchdog:
        watchdog.watch(connection)
        try:
            connection.request(method, to.path, body=body, headers=headers)
            answer = connection.getresponse()
            received = Answer(answer.status, answer.getheader("content-type", ""), answer.read(max_body))
        except (OSError, http.client.HTTPException):
            if watchdog.expired.is_set():
                raise TimeoutError(f"no complete answer within {timeout:g} s") from None
            raise
        finally:
            connection.close()
    if watchdog.expired.is_set():  # the watchdog ran as the answer completed: it may have been cut short
        raise TimeoutError(f"no complete answer within {timeout:g} s")
    return received


class Watchdog:
    """A call's total deadline: when ``timeout`` seconds have passed since it was entered, it sets ``expired`` and
    shuts down the socket of every connection it watches (and of any watched later), which wakes a blocked send or
    receive in the calling thread, whatever phase the call is in. A connection's socket is its ``sock``."""

    def __init__(self, timeout: float):
        self.timeout = timeout
        self.expired = threading.Event()
        self._connections: list = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(timeout, self._cut)
        self._timer.daemon = True

    def __enter__(self) -> Watchdog:
        self._timer.start()
        return self

    def __exit__(self, *_exc) -> None:
        self._timer.cancel()
        with self._lock:
            self._connections.clear()

    def watch(self, connection) -> None:
        with self._lock:
            self._connections.append(connection)
        if self.expired.is_set():
            _shut(connection)

    def _cut(self) -> None:
        self.expired.set()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            _shut(connection)


def _shut(connection) -> None:
    sock = getattr(connection, "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):  # already closed
            socket.socket.shutdown(sock, socket.SHUT_RDWR)  # the descriptor's, under TLS too


class _Connection(http.client.HTTPSConnection):
    """A connection to ``address`` (the host name is only the Host header and, for https, the name the certificate
    must carry), whose socket is in ``self.sock`` from its creation on, so the watchdog can cut a slow handshake."""

    def __init__(self, to: Target, address: str, deadline: float):
        super().__init__(
            to.host, to.port, timeout=max(0.001, deadline - time.monotonic()), context=ssl.create_default_context()
        )
        self._address, self._https = address, to.scheme == "https"
        self.default_port = 443 if self._https else 80  # the Host header names a port only when it is another

    def connect(self) -> None:
        self.sock = socket.create_connection((self._address, self.port), self.timeout)
        if self._https:
            self.sock = self._context.wrap_socket(self.sock, server_hostname=self.host, do_handshake_on_connect=False)
            self.sock.do_handshake()
