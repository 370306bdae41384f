"""The S3 ArtifactStore against a real S3 HTTP endpoint (moto server) with Object Lock and versioning."""

import base64
import hashlib
import json
import time

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from evidence_pipeline.audit.verify import verify_bundle
from evidence_pipeline.config import Settings
from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.monthly.bundle import MANIFEST, REPORT
from evidence_pipeline.monthly.pipeline import run_tenant_month
from evidence_pipeline.runtime import RunInfo, s3_client
from evidence_pipeline.store.s3 import S3Store, _classify
from evidence_pipeline_tests.support.fixture_sources import SMALL
from evidence_pipeline_tests.support.slow_peer import SlowPeer

aws_backend = pytest.mark.parametrize("backend", ["aws"], indirect=True)


@aws_backend
def test_put_once_sends_checksums_locks_encrypts_and_refuses_a_second_object(runtime):
    store = runtime.archive
    stored = store.put_once("probe/object", b"first")
    head = store.client.head_object(Bucket=store.bucket, Key=store._key("probe/object"), ChecksumMode="ENABLED")
    assert head["ChecksumSHA256"] == base64.b64encode(hashlib.sha256(b"first").digest()).decode()
    assert head["ObjectLockMode"] == "COMPLIANCE" and head["ServerSideEncryption"] == "AES256"
    assert stored.created and stored.version_id == head["VersionId"]
    again = store.put_once("probe/object", b"first")
    assert not again.created and again.version_id == stored.version_id
    with pytest.raises(EvidenceError) as error:
        store.put_once("probe/object", b"second")
    assert error.value.code == "STORE_CONFLICT" and store.get("probe/object") == b"first"


@aws_backend
def test_deleting_a_locked_bundle_version_is_refused(runtime):
    publication = run_tenant_month(runtime, SMALL, RunInfo("test"))
    store = runtime.archive
    key = store._key(f"{publication.bundle_key}/{REPORT}")
    manifest = json.loads(store.get(f"{publication.bundle_key}/{MANIFEST}"))
    version = manifest["artifacts"][REPORT]["version_id"]
    assert version == store.client.head_object(Bucket=store.bucket, Key=key)["VersionId"]
    with pytest.raises(ClientError) as error:
        store.client.delete_object(Bucket=store.bucket, Key=key, VersionId=version)
    assert error.value.response["Error"]["Code"] == "AccessDenied"
    assert verify_bundle(store, publication.bundle_key).ok


@aws_backend
def test_a_versioned_read_names_the_version_of_the_bytes_it_read(runtime):
    store = runtime.archive
    stored = store.put_once("probe/versioned", b"first")
    assert store.get_versioned("probe/versioned") == (b"first", stored.version_id)
    newer = store.client.put_object(Bucket=store.bucket, Key=store._key("probe/versioned"), Body=b"second")
    assert newer["VersionId"] != stored.version_id
    assert store.get_versioned("probe/versioned") == (b"second", newer["VersionId"])
    with pytest.raises(EvidenceError) as error:
        store.get_versioned("probe/versioned", max_bytes=5)
    assert error.value.code == "STORE_OBJECT_TOO_LARGE"


@aws_backend
def test_reads_are_verified_client_side(runtime):
    """Emulators accept wrong checksums, so the store re-hashes every read against the digest recorded at upload."""
    store = runtime.archive
    store.put_once("probe/rot", b"original")
    store.client.put_object(  # a new version carrying the old digest: what silent corruption would look like
        Bucket=store.bucket,
        Key=store._key("probe/rot"),
        Body=b"corrupted",
        Metadata={"sha256": hashlib.sha256(b"original").hexdigest()},
    )
    with pytest.raises(EvidenceError) as error:
        store.get("probe/rot")
    assert error.value.code == "STORE_DIGEST_MISMATCH"


def test_unreachable_s3_is_transient():
    client = boto3.client(
        "s3",
        endpoint_url="http://127.0.0.1:9",
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=Config(retries={"max_attempts": 1}, connect_timeout=1, read_timeout=1),
    )
    with pytest.raises(EvidenceError) as error:
        S3Store(client, "bucket").put_once("probe/x", b"x")
    assert error.value.code == "STORE_UNAVAILABLE" and error.value.retryable


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("SlowDown", 503, "STORE_UNAVAILABLE"),
        ("InternalError", 500, "STORE_UNAVAILABLE"),
        ("RequestTimeout", 400, "STORE_UNAVAILABLE"),
        ("AccessDenied", 403, "STORE_ACCESS_DENIED"),
        ("NoSuchBucket", 404, "STORE_REJECTED"),
        ("NoSuchKey", 404, "STORE_NOT_FOUND"),
    ],
)
def test_error_classification(code, status, expected):
    error = _classify(
        ClientError({"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "Put"), "k"
    )
    assert error.code == expected and error.retryable == (expected == "STORE_UNAVAILABLE")


@pytest.mark.parametrize("phase", ["headers", "body"])
def test_an_s3_call_ends_at_its_deadline_whatever_the_endpoint_trickles(tmp_path, monkeypatch, phase):
    """An endpoint on 127.0.0.1 that sends one byte every 0.1 s, of its headers (a HEAD: `exists`) or of an
    object's body (a GET: `get`): with EVIDENCE_S3_DEADLINE_SECONDS=1 the call fails STORE_UNAVAILABLE after about
    10 bytes, in one attempt (no retry past the deadline). Before: botocore's read timeout (60 s) bounded each read,
    not the call, so an attempt took all 300 bytes (30 s), and botocore retried it up to 5 times."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    peer = SlowPeer(phase)
    try:
        settings = Settings.from_env(
            {
                "EVIDENCE_HOME": str(tmp_path / "home"),
                "EVIDENCE_S3_REGION": "us-east-1",
                "EVIDENCE_S3_ENDPOINT_URL": peer.url.removesuffix("/hook"),
                "EVIDENCE_S3_DEADLINE_SECONDS": "1",
            }
        )
        store = S3Store(s3_client(settings), "bucket")
        with pytest.raises(EvidenceError) as error:
            store.get("probe/object") if phase == "body" else store.exists("probe/object")
        assert error.value.code == "STORE_UNAVAILABLE" and "within 1 s" in error.value.message
        for _ in range(600):  # the peer notices the hang-up at its next byte
            if peer.sent:
                break
            time.sleep(0.05)
        assert len(peer.sent) == 1 and peer.sent[0] < 100 < peer.limit and peer.open == 0
    finally:
        peer.close()
