"""`source_landing_sensor` on a landing folder (local backend) and an S3 prefix (aws backend): each new
`<tenant>/<YYYY-MM>/*.csv` is published once and marked, a file that breaks the format is marked with its report,
and the tenant-month's evidence is asked for once per new revision."""

from __future__ import annotations

import json

import pytest
from dagster import DagsterInstance, build_sensor_context, partition_loading_context

from evidence_pipeline.config import Settings
from evidence_pipeline.definitions import defs
from evidence_pipeline.defs.resources import EvidenceResource
from evidence_pipeline.models import EventType, TenantMonth
from evidence_pipeline.monthly import landing, sources
from evidence_pipeline.runtime import runtime_for, s3_client
from evidence_pipeline.synthetic.demo_data import demo_transactions

MONTH = TenantMonth("acme-books", "2026-07")


def _rows(cents: int = 0) -> bytes:
    frame = demo_transactions(MONTH)
    frame.loc[0, "amount_minor"] += cents
    return frame.to_csv(index=False).encode()


@pytest.fixture
def landed(backend, monkeypatch, tmp_path):
    """(drop(name, bytes), read(name)) on the backend's landing location, with the environment set for it."""
    if "EVIDENCE_ARCHIVE_URI" in backend:
        uri = backend["EVIDENCE_ARCHIVE_URI"].removesuffix("/archive") + "/landing"
        client = s3_client(Settings.from_env(backend))
        bucket, prefix = uri.removeprefix("s3://").split("/", 1)

        def drop(name: str, data: bytes) -> None:
            client.put_object(Bucket=bucket, Key=f"{prefix}/{name}", Body=data)

        def read(name: str) -> bytes:
            return client.get_object(Bucket=bucket, Key=f"{prefix}/{name}")["Body"].read()
    else:
        root = tmp_path / "landing"
        uri = str(root)

        def drop(name: str, data: bytes) -> None:
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(data)

        def read(name: str) -> bytes:
            return (root / name).read_bytes()
    for name, value in {**backend, "EVIDENCE_LANDING_URI": uri}.items():
        monkeypatch.setenv(name, value)
    return drop, read


def test_each_new_file_is_published_once_marked_and_asks_for_its_months_evidence(landed):
    drop, read = landed
    rt = runtime_for(Settings.from_env())
    repository = defs.get_repository_def()
    sensor = repository.get_sensor_def("source_landing_sensor")
    drop("acme-books/2026-07/export.csv", _rows())
    drop("acme-books/2026-06/broken.csv", b"txn_id,booked_on\nT1,2026-06-01\n")
    drop("zeta-co/2026-07/export.csv", _rows())  # a tenant that is not a partition: published, no run
    drop("acme-books/notes.txt", b"not a source file")
    with DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions("tenant", ["acme-books"])

        def tick(cursor: str | None):
            context = build_sensor_context(instance=instance, cursor=cursor, repository_def=repository,
                                           resources={"evidence": EvidenceResource()})
            with partition_loading_context(dynamic_partitions_store=instance):  # as the daemon evaluates it
                return sensor.evaluate_tick(context)

        first = tick(None)
        revision = sources.pin_latest(rt.sources, MONTH)
        [request] = first.run_requests
        assert request.run_key == f"acme-books/2026-07:{revision.sha256}"
        assert request.partition_key == "2026-07-01|acme-books"
        assert json.loads(read("acme-books/2026-07/export.csv" + landing.MARKER))["sha256"] == revision.sha256
        refused = json.loads(read("acme-books/2026-06/broken.csv" + landing.MARKER))["error"]
        assert refused["code"] == "SOURCE_INVALID" and refused["problems"][0]["code"] == "SOURCE_COLUMN_MISSING"
        assert sources.pin_latest(rt.sources, TenantMonth("zeta-co", "2026-07")).sha256 == revision.sha256

        quiet = tick(first.cursor)
        assert not quiet.run_requests and "no new file" in quiet.skip_message

        drop("acme-books/2026-07/export-again.csv", _rows())  # the same rows: taken, nothing asked again
        again = tick(first.cursor)
        assert not again.run_requests and again.cursor == first.cursor
        drop("acme-books/2026-07/corrected.csv", _rows(100))
        corrected = tick(again.cursor)
        [request] = corrected.run_requests
        assert request.run_key == f"acme-books/2026-07:{sources.pin_latest(rt.sources, MONTH).sha256}"
    events = [e for e in rt.ledger.events_of_type(EventType.SOURCE_PUBLISHED, "acme-books")]
    assert [(e["actor"], e["details"]["sequence"]) for e in events] == [("landing", 1), ("landing", 2)]
