"""S3 ArtifactStore: put-once with If-None-Match, SHA-256 checksums verified client-side, optional Object Lock/SSE.

The client is any boto3 S3 client (the Dagster layer builds it with dagster-aws's S3Resource). S3 emulators do not
validate checksums and a real S3 does, so we rely on neither: every read re-hashes the bytes and compares them with
the digest recorded in the object's metadata at upload (and with the caller's expectation, if any). Puts stream
from a file and reads stream into one, a chunk at a time, hashing on the way. Each call ends within the client's
total deadline, its retries and the body it reads included (s3_deadline.py).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Concatenate, ParamSpec, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.store import (
    CHUNK,
    DISCARD,
    Reader,
    Sink,
    StoredObject,
    StreamingStore,
    check_digest,
    check_key,
    check_size,
    copy_hashing,
    sha256_file,
)
from evidence_pipeline.tempfiles import scratch_file

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

_TRANSIENT_CODES = {
    "InternalError",
    "ServiceUnavailable",
    "SlowDown",
    "Throttling",
    "ThrottlingException",
    "RequestTimeout",
    "RequestTimeTooSkewed",
    "ConditionalRequestConflict",
    "OperationAborted",
}


@dataclass(frozen=True)
class S3Options:
    object_lock_mode: str | None = None  # GOVERNANCE or COMPLIANCE; needs a bucket created with Object Lock
    object_lock_days: int = 0
    server_side_encryption: str | None = None  # AES256 or aws:kms
    kms_key_id: str | None = None


Params = ParamSpec("Params")
Result = TypeVar("Result")


def _bounded(
    method: Callable[Concatenate[S3Store, str, Params], Result],
) -> Callable[Concatenate[S3Store, str, Params], Result]:
    """The store call within the client's total deadline (s3_deadline.py)."""

    @functools.wraps(method)
    def bounded(self: S3Store, key: str, /, *args: Params.args, **kwargs: Params.kwargs) -> Result:
        # imported here: botocore's HTTP stack costs every process that loads the code location ~0.1 s of CPU,
        # and only S3 needs it (runtime.s3_client has already imported it for this client)
        from evidence_pipeline.store import s3_deadline

        with s3_deadline.call(self.client, key):
            return method(self, key, *args, **kwargs)

    return bounded


class S3Store(StreamingStore):
    def __init__(self, client: S3Client, bucket: str, prefix: str = "", options: S3Options = S3Options()):
        self.client = client
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.options = options

    def _key(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def put_file(self, key: str, file: BinaryIO) -> StoredObject:
        # One hashing pass first: the checksum header and the metadata digest must precede the streamed body.
        return self._put(key, file, *sha256_file(file))

    def spool(self, scratch_dir: Path) -> BinaryIO:
        return scratch_file(scratch_dir)

    def put_spooled(self, key: str, spool: BinaryIO, sha256: str, size: int) -> StoredObject:
        spool.seek(0)
        return self._put(key, spool, sha256, size)

    @_bounded
    def _put(self, key: str, file: BinaryIO, sha256: str, size: int) -> StoredObject:
        extra: dict[str, Any] = {}  # put_object's optional arguments
        if self.options.object_lock_mode:
            extra["ObjectLockMode"] = self.options.object_lock_mode
            extra["ObjectLockRetainUntilDate"] = datetime.now(timezone.utc) + timedelta(
                days=self.options.object_lock_days
            )
        if self.options.server_side_encryption:
            extra["ServerSideEncryption"] = self.options.server_side_encryption
            if self.options.kms_key_id:
                extra["SSEKMSKeyId"] = self.options.kms_key_id
        try:
            response = self.client.put_object(
                Bucket=self.bucket,
                Key=self._key(key),
                Body=file,
                ContentLength=size,
                IfNoneMatch="*",
                ChecksumAlgorithm="SHA256",
                ChecksumSHA256=base64.b64encode(bytes.fromhex(sha256)).decode(),
                Metadata={"sha256": sha256},
                **extra,
            )
        except ClientError as error:
            if _code(error) not in ("PreconditionFailed", "412"):
                raise _classify(error, key) from None
            # The key exists: identical bytes converge, anything else conflicts. Its digest is re-hashed, not trusted.
            if self.get_file(key, DISCARD) != sha256:
                raise EvidenceError(
                    ReasonCode.STORE_CONFLICT, f"object {key} already exists with different bytes"
                ) from None
            return StoredObject(key, sha256, size, created=False, version_id=self.version_id(key))
        except BotoCoreError as error:
            raise _unavailable(error, key) from None
        return StoredObject(key, sha256, size, created=True, version_id=response.get("VersionId"))

    def get_file(self, key: str, out: Sink, expected_sha256: str | None = None, max_bytes: int | None = None) -> str:
        return self._read(key, out, expected_sha256, max_bytes)[0]

    def get_versioned(self, key: str, max_bytes: int | None = None) -> tuple[bytes, str | None]:
        out = io.BytesIO()
        _, version = self._read(key, out, None, max_bytes)
        return out.getvalue(), version

    @_bounded
    def _read(self, key: str, out: Sink, expected_sha256: str | None, max_bytes: int | None) -> tuple[str, str | None]:
        """(sha256, version id) of the object streamed into ``out``."""
        with _errors(key):
            response = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
            try:
                check_size(key, response.get("ContentLength"), max_bytes)  # before the body is read
            except EvidenceError:
                response["Body"].close()
                raise
            sha256, _ = copy_hashing(response["Body"].iter_chunks(CHUNK), out)
        recorded = response.get("Metadata", {}).get("sha256")
        if recorded is not None and sha256 != recorded:
            raise EvidenceError(
                ReasonCode.STORE_DIGEST_MISMATCH, f"object {key} does not match the sha256 recorded at upload"
            )
        return check_digest(key, sha256, expected_sha256), response.get("VersionId")

    @_bounded
    def open_read(self, key: str) -> Reader:
        """The object's body as a stream: the deadline covers the call until its answer's headers; its caller reads
        the body later, each read bounded by botocore's read timeout only (a download: the intake server bounds
        the answer to its client)."""
        with _errors(key):
            return self.client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"]

    def presigned_url(self, key: str, seconds: int, filename: str) -> str:
        """A URL that reads the object, without credentials, for ``seconds``; downloaded as ``filename``."""
        with _errors(key):
            return self.client.generate_presigned_url(
                "get_object",
                ExpiresIn=seconds,
                Params={
                    "Bucket": self.bucket,
                    "Key": self._key(key),
                    "ResponseContentDisposition": f'attachment; filename="{filename}"',
                },
            )

    @_bounded
    def exists(self, key: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=self._key(key))
        except ClientError as error:
            if _code(error) in ("404", "NoSuchKey", "NotFound"):
                return False
            raise _classify(error, key) from None
        except BotoCoreError as error:
            raise _unavailable(error, key) from None
        return True

    @_bounded
    def list(self, prefix: str) -> list[str]:
        full = self._key(prefix) + "/"
        strip = len(self.prefix) + 1 if self.prefix else 0
        keys = []
        with _errors(prefix):
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=full):
                keys += [item["Key"][strip:] for item in page.get("Contents", [])]
        return sorted(keys)

    def uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{self._key(key)}"

    @_bounded
    def version_id(self, key: str) -> str | None:
        with _errors(key):
            return self.client.head_object(Bucket=self.bucket, Key=self._key(key)).get("VersionId")

    @_bounded
    def erase(self, key: str) -> bool:
        full = self._key(check_key(key))
        with _errors(key):
            pages = self.client.get_paginator("list_object_versions").paginate(Bucket=self.bucket, Prefix=full)
            versions = [
                version["VersionId"]
                for page in pages
                for version in page.get("Versions", []) + page.get("DeleteMarkers", [])
                if version["Key"] == full
            ]
            for version in versions:  # every version and delete marker: nothing of the object stays behind
                self.client.delete_object(Bucket=self.bucket, Key=full, VersionId=version)
        return bool(versions)

    @_bounded
    def retained_until(self, key: str) -> datetime | None:
        with _errors(key):
            return self.client.head_object(Bucket=self.bucket, Key=self._key(key)).get("ObjectLockRetainUntilDate")


@contextlib.contextmanager
def _errors(key: str) -> Iterator[None]:
    """S3's errors as classified EvidenceErrors about ``key``."""
    try:
        yield
    except ClientError as error:
        raise _classify(error, key) from None
    except BotoCoreError as error:
        raise _unavailable(error, key) from None


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def _classify(error: ClientError, key: str) -> EvidenceError:
    code = _code(error)
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    if code in ("NoSuchKey", "404", "NotFound"):
        return EvidenceError(ReasonCode.STORE_NOT_FOUND, f"object {key} does not exist")
    if code in _TRANSIENT_CODES or status >= 500 or status == 429:
        return EvidenceError(ReasonCode.STORE_UNAVAILABLE, f"S3 is unavailable ({code or status}) for {key}")
    if code in ("AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
        return EvidenceError(ReasonCode.STORE_ACCESS_DENIED, f"S3 refused access ({code}) for {key}")
    return EvidenceError(ReasonCode.STORE_REJECTED, f"S3 rejected the request ({code or status}) for {key}")


def _unavailable(error: BotoCoreError, key: str) -> EvidenceError:
    return EvidenceError(ReasonCode.STORE_UNAVAILABLE, f"S3 is unreachable ({type(error).__name__}) for {key}")
