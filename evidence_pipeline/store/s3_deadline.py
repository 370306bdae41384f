"""A total deadline on every S3 call.

botocore's connect and read timeouts bound each socket operation, not the call: an endpoint that sends one byte
just inside the read timeout, of its headers or of its body, holds a call for as long as it likes. ``install``
gives a boto3 S3 client connections that join the current call's outbound.Watchdog when they connect or send, and
stops botocore's retries once that watchdog has fired; S3Store runs each of its calls (botocore's retries and the
body it reads included) under ``call``, so a call ends by its deadline whatever the endpoint does, failing with
STORE_UNAVAILABLE (a transient failure: the work is retried later, as for any S3 outage).
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from botocore.awsrequest import AWSHTTPConnection, AWSHTTPConnectionPool, AWSHTTPSConnection, AWSHTTPSConnectionPool

from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.outbound import Watchdog

_deadlines: weakref.WeakKeyDictionary[S3Client, float] = weakref.WeakKeyDictionary()  # client -> seconds
_current: ContextVar[Watchdog | None] = ContextVar("s3_call", default=None)


if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

    _Connection = AWSHTTPConnection  # what _Watched's super() calls reach, for the type checker only
else:
    _Connection = object


class _Watched(_Connection):
    """A connection that joins the current call's watchdog, if any, as it connects and as it sends a request (a
    pooled connection serves many calls)."""

    def connect(self) -> None:
        _join(self)
        return super().connect()

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        _join(self)
        return super().request(method, url, *args, **kwargs)


# botocore-stubs' AWSConnection and http.client's HTTPConnection disagree on send and response_class (misc)
class _HTTPConnection(_Watched, AWSHTTPConnection):  # type: ignore[misc]
    pass


class _HTTPSConnection(_Watched, AWSHTTPSConnection):  # type: ignore[misc]
    pass


class _HTTPPool(AWSHTTPConnectionPool):
    ConnectionCls = _HTTPConnection


class _HTTPSPool(AWSHTTPSConnectionPool):
    ConnectionCls = _HTTPSConnection


def install(client: S3Client, seconds: float) -> None:
    """Every call an S3Store makes with ``client`` ends within ``seconds``."""
    # botocore has no public hook for its connections: its session's pool classes are swapped for watched ones
    # (a test against a trickling endpoint holds this to botocore's internals).
    # (the stubs type neither the private endpoint nor a needs-retry handler's answer, which botocore reads)
    client._endpoint.http_session._pool_classes_by_scheme.update(  # type: ignore[attr-defined]
        http=_HTTPPool, https=_HTTPSPool
    )
    client.meta.events.register_first("needs-retry.s3", _no_retry_past_deadline, unique_id="evidence-deadline")  # type: ignore[arg-type]
    _deadlines[client] = seconds


@contextlib.contextmanager
def call(client: S3Client, key: str) -> Iterator[None]:
    """One S3Store call about ``key``, ended at the client's deadline (none: not installed); a call inside another
    (a put that reads back what it found) shares the outer one's."""
    seconds = _deadlines.get(client)
    if seconds is None or _current.get() is not None:
        yield
        return
    with Watchdog(seconds) as watchdog:
        token = _current.set(watchdog)
        try:
            yield
        except Exception:  # whatever a cut socket raised, in botocore, urllib3 or the body's reader
            if not watchdog.expired.is_set():
                raise
            raise EvidenceError(
                ReasonCode.STORE_UNAVAILABLE, f"S3 did not complete the call for {key} within {seconds:g} s"
            ) from None
        finally:
            _current.reset(token)


def _join(connection: _Watched) -> None:
    watchdog = _current.get()
    if watchdog is not None:
        watchdog.watch(connection)


def _no_retry_past_deadline(**_kwargs: object) -> bool | None:
    """False (no retry) once the current call's deadline has passed; None leaves the decision to botocore."""
    watchdog = _current.get()
    return False if watchdog is not None and watchdog.expired.is_set() else None
