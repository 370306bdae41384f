"""Open a store from its URI: a filesystem path (local) or s3://bucket/prefix."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.store import ArtifactStore
from evidence_pipeline.store.local import LocalStore
from evidence_pipeline.store.s3 import S3Options, S3Store

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


def open_store(
    uri: str,
    s3_client: S3Client | None = None,
    options: S3Options = S3Options(),
    scheme: str = "archive",
    private: bool = False,
) -> ArtifactStore:
    """``private`` stores (tenant sources, staged reports) keep local files owner-readable only."""
    if uri.startswith("s3://"):
        bucket, _, prefix = uri.removeprefix("s3://").partition("/")
        if not bucket or s3_client is None:
            raise EvidenceError(ReasonCode.CONFIG_INVALID, "an s3:// store needs a bucket name and S3 settings")
        return S3Store(s3_client, bucket, prefix, options)
    return LocalStore(Path(uri), scheme=scheme, file_mode=0o400 if private else 0o444)
