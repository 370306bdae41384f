"""`source_landing_sensor` on a landing folder (local backend) and an S3 prefix (aws backend): each new
`<tenant>/<YYYY-MM>/*.csv` of a registered, active tenant is published once, after it stayed unchanged across two
ticks, and marked; a file that breaks the format is marked with its report; the tenant-month's evidence is asked for
once per new revision. The location is a trust boundary: a link (folder or file), a hard-linked file or a file of a
tenant the registry does not hold as active is marked refused with its code and never read."""

from __future__ import annotations

import json
import os

import pytest
from dagster import DagsterInstance, build_sensor_context, partition_loading_context

from evidence_pipeline.config import Settings
from evidence_pipeline.definitions import defs
from evidence_pipeline.defs.resources import EvidenceResource
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.models import EventType, TenantMonth
from evidence_pipeline.monthly import landing, publication, sources
from evidence_pipeline.runtime import runtime_for, s3_client
from evidence_pipeline.synthetic.demo_data import demo_transactions
from evidence_pipeline_tests.support.signers import signers_of

MONTH = TenantMonth("acme-books", "2026-07")
OTHER = TenantMonth("globex", "2026-07")


def _rows(cents: int = 0) -> bytes:
    """A month of acme-books' rows: any tenant's of 2026-07 as well."""
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


class Sensor:
    """The landing sensor's ticks on an instance where ``partitions`` are tenant partitions, each tick carrying
    the cursor of the one before."""

    def __init__(self, instance: DagsterInstance):
        self.instance = instance
        self.repository = defs.get_repository_def()
        self.sensor = self.repository.get_sensor_def("source_landing_sensor")
        self.cursor: str | None = None

    def tick(self):
        context = build_sensor_context(
            instance=self.instance,
            cursor=self.cursor,
            repository_def=self.repository,
            resources={"evidence": EvidenceResource()},
        )
        with partition_loading_context(dynamic_partitions_store=self.instance):  # as the daemon evaluates it
            result = self.sensor.evaluate_tick(context)
        self.cursor = result.cursor
        return result


@pytest.fixture
def ticks(landed):
    """A Sensor over an instance where acme-books is a partition, and the runtime, with acme-books and globex
    registered (globex not a partition yet)."""
    rt = runtime_for(Settings.from_env())
    signers_of(rt.ledger).register_tenants([MONTH.tenant, OTHER.tenant])
    with DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions("tenant", [MONTH.tenant])
        yield Sensor(instance), rt


def _published(rt, tenant: str) -> list:
    return rt.ledger.events_of_type(EventType.SOURCE_PUBLISHED, tenant)


def _refusal(read, name: str) -> str:
    return json.loads(read(name + landing.MARKER))["error"]["code"]


def test_each_new_file_is_published_once_marked_and_asks_for_its_months_evidence(landed, ticks):
    drop, read = landed
    sensor, rt = ticks
    drop("acme-books/2026-07/export.csv", _rows())
    drop("acme-books/2026-06/broken.csv", b"txn_id,booked_on\nT1,2026-06-01\n")
    drop("globex/2026-07/export.csv", _rows())  # registered, not a partition yet: published, no run
    drop("acme-books/notes.txt", b"not a source file")
    drop("acme-books/2026-07/.export-2.csv", _rows(7))  # being written under a hidden name: never taken
    drop("acme-books/2026-07/export-2.csv.part", _rows(7))

    first = sensor.tick()  # sees them, takes nothing: a file is taken once unchanged across two ticks
    assert not first.run_requests and _published(rt, MONTH.tenant) == []
    second = sensor.tick()
    revision = sources.pin_latest(rt.sources, MONTH)
    [request] = second.run_requests
    assert request.run_key == f"acme-books/2026-07:{revision.sha256}"
    assert request.partition_key == "2026-07-01|acme-books"
    assert json.loads(read("acme-books/2026-07/export.csv" + landing.MARKER))["sha256"] == revision.sha256
    refused = json.loads(read("acme-books/2026-06/broken.csv" + landing.MARKER))["error"]
    assert refused["code"] == "SOURCE_INVALID" and refused["problems"][0]["code"] == "SOURCE_COLUMN_MISSING"
    assert sources.pin_latest(rt.sources, OTHER).sequence == 1
    assert len(_published(rt, MONTH.tenant)) == 1  # the hidden and .part files were passed over

    quiet = sensor.tick()
    assert not quiet.run_requests and "no new file" in quiet.skip_message

    drop("acme-books/2026-07/export-again.csv", _rows())  # the same rows: taken, nothing asked again
    sensor.tick()
    asked = sensor.cursor
    again = sensor.tick()
    assert not again.run_requests and json.loads(again.cursor)["asked"] == json.loads(asked)["asked"]
    drop("acme-books/2026-07/corrected.csv", _rows(100))
    sensor.tick()
    [request] = sensor.tick().run_requests
    assert request.run_key == f"acme-books/2026-07:{sources.pin_latest(rt.sources, MONTH).sha256}"
    assert [(e["actor"], e["details"]["sequence"]) for e in _published(rt, MONTH.tenant)] == [
        ("landing", 1),
        ("landing", 2),
    ]


def test_a_file_still_being_written_is_taken_once_complete_and_only_its_complete_content(landed, ticks):
    drop, read = landed
    sensor, rt = ticks
    whole = _rows()
    drop("acme-books/2026-07/export.csv", whole[: len(whole) // 2])  # the first half, as a slow upload leaves it
    sensor.tick()
    drop("acme-books/2026-07/export.csv", whole)  # the writer finishes between two ticks
    assert not sensor.tick().run_requests and _published(rt, MONTH.tenant) == []  # changed: not settled yet
    [request] = sensor.tick().run_requests
    [event] = _published(rt, MONTH.tenant)
    expected = publication.prepare(MONTH, whole).sha256
    assert event["subject_sha256"] == expected == json.loads(read("acme-books/2026-07/export.csv.published"))["sha256"]
    assert request.run_key == f"acme-books/2026-07:{expected}"
    sensor.tick()
    assert len(_published(rt, MONTH.tenant)) == 1  # once


def test_a_file_of_a_tenant_nobody_registered_is_refused_unread_and_marked(landed, ticks):
    drop, read = landed
    sensor, rt = ticks
    drop("initech/2026-07/export.csv", _rows())
    first = sensor.tick()  # refused at once: no need to wait for a file that will never be read
    assert _refusal(read, "initech/2026-07/export.csv") == "TENANT_UNKNOWN" and not first.run_requests
    assert _published(rt, "initech") == [] and rt.sources.list("initech") == []
    assert "no new file" in sensor.tick().skip_message


def test_a_month_folder_named_in_other_digits_than_ascii_is_passed_over(landed, ticks):
    # Arabic-Indic digits: a regex's \d matches them and int() reads them as 2026, so the folder passed for July
    # and its file was taken, tick after tick, for a period no partition, key or comparison of months expects.
    drop, read = landed
    sensor, rt = ticks
    period = "\u0662\u0660\u0662\u0666-07"
    drop(f"acme-books/{period}/export.csv", _rows().decode().replace("2026-07", period).encode())
    location = landing.open_landing(
        os.environ["EVIDENCE_LANDING_URI"], s3_client(rt.settings) if "EVIDENCE_ARCHIVE_URI" in os.environ else None
    )
    assert list(location.walk()) == []
    sensor.tick()
    sensor.tick()
    assert _published(rt, MONTH.tenant) == [] and rt.sources.list(MONTH.tenant) == []


def test_an_offboarded_tenants_file_is_marked_once_and_not_retried(landed, ticks):
    drop, read = landed
    sensor, rt = ticks
    rt.ledger._transact(lambda conn: rt.tokens.record_offboarding(conn, OTHER.tenant, "test", {}))
    drop("globex/2026-07/export.csv", _rows())
    sensor.tick()
    assert _refusal(read, "globex/2026-07/export.csv") == "TENANT_OFFBOARDED"
    assert "no new file" in sensor.tick().skip_message  # marked: not taken again, tick after tick
    assert _published(rt, OTHER.tenant) == []


@pytest.fixture
def folder(backend, ticks):
    """The local landing folder (links and hard links exist only there)."""
    if "EVIDENCE_ARCHIVE_URI" in backend:
        pytest.skip("S3 has no links")
    return landing.open_landing(os.environ["EVIDENCE_LANDING_URI"]).root


def test_a_month_folder_linked_to_another_tenants_folder_is_refused_and_never_read(landed, ticks, folder):
    drop, read = landed
    sensor, rt = ticks
    drop("globex/2026-07/export.csv", _rows())
    (folder / "acme-books").mkdir()
    (folder / "acme-books" / "2026-07").symlink_to(folder / "globex" / "2026-07", target_is_directory=True)
    (folder / "acme-books" / "2026-08").symlink_to("../globex/2026-07", target_is_directory=True)
    sensor.tick()
    sensor.tick()
    assert _published(rt, MONTH.tenant) == [] and rt.sources.list(MONTH.tenant) == []
    assert _refusal(read, "acme-books/2026-07") == _refusal(read, "acme-books/2026-08") == "LANDING_SYMLINK"
    assert len(_published(rt, OTHER.tenant)) == 1  # globex's own file, under its own name
    assert sorted(os.listdir(folder / "globex" / "2026-07")) == ["export.csv", "export.csv.published"]
    (folder / "globex-link").symlink_to(folder / "globex", target_is_directory=True)  # not a slug: passed over
    (folder / "acme-co").symlink_to(folder / "globex", target_is_directory=True)  # a tenant folder that is a link
    sensor.tick()
    assert _refusal(read, "acme-co") == "LANDING_SYMLINK" and "no new file" in sensor.tick().skip_message


def test_a_file_linked_to_one_outside_the_landing_location_is_refused_and_never_read(landed, ticks, folder, tmp_path):
    drop, read = landed
    sensor, rt = ticks
    outside = tmp_path / "outside.csv"
    outside.write_bytes(_rows())
    (folder / "acme-books" / "2026-07").mkdir(parents=True)
    (folder / "acme-books" / "2026-07" / "export.csv").symlink_to(outside)
    os.mkfifo(folder / "acme-books" / "2026-07" / "pipe.csv")  # opened, it would wait for a writer
    sensor.tick()
    sensor.tick()
    assert _refusal(read, "acme-books/2026-07/export.csv") == "LANDING_SYMLINK"
    assert _refusal(read, "acme-books/2026-07/pipe.csv") == "LANDING_NOT_REGULAR"
    assert _published(rt, MONTH.tenant) == [] and rt.sources.list(MONTH.tenant) == []


def test_a_hard_linked_file_is_refused_and_never_read(landed, ticks, folder, tmp_path):
    drop, read = landed
    sensor, rt = ticks
    drop("acme-books/2026-07/export.csv", _rows())
    os.link(folder / "acme-books" / "2026-07" / "export.csv", tmp_path / "elsewhere.csv")
    sensor.tick()
    sensor.tick()
    assert _refusal(read, "acme-books/2026-07/export.csv") == "LANDING_HARD_LINK"
    assert _published(rt, MONTH.tenant) == []


def test_a_file_swapped_for_a_link_after_it_settled_is_not_read(landed, ticks, folder, tmp_path):
    # The walk saw a regular file twice; then it is replaced by a link to another file before it is read.
    drop, read = landed
    sensor, rt = ticks
    drop("acme-books/2026-07/export.csv", _rows())
    [settled] = landing.pending(rt, landing.open_landing(str(folder)), {})[1].items()
    ready, _ = landing.pending(rt, landing.open_landing(str(folder)), dict([settled]))
    outside = tmp_path / "outside.csv"
    outside.write_bytes(_rows(5))
    path = folder / "acme-books" / "2026-07" / "export.csv"
    path.unlink()
    path.symlink_to(outside)
    with pytest.raises(EvidenceError) as changed:
        landing.DirectoryLanding(folder).read(ready[0])
    assert changed.value.code == ReasonCode.LANDING_FILE_CHANGED


def test_a_file_marked_by_a_concurrent_tick_keeps_its_first_marker(landed, ticks):
    drop, read = landed
    sensor, rt = ticks
    drop("initech/2026-07/export.csv", _rows())  # refused at once: TENANT_UNKNOWN
    location = landing.open_landing(
        os.environ["EVIDENCE_LANDING_URI"], s3_client(rt.settings) if "EVIDENCE_ARCHIVE_URI" in os.environ else None
    )
    [found], _ = landing.pending(rt, location, {})
    location.mark(found.name, b'{"first": true}')  # another tick marked it since this walk
    assert landing.take(rt, location, found)["error"]["code"] == "TENANT_UNKNOWN"
    assert json.loads(read("initech/2026-07/export.csv" + landing.MARKER)) == {"first": True}
