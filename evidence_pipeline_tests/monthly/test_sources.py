import hashlib
import os

import pandas as pd
import pytest

from evidence_pipeline.config import Settings
from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.models import EventType, TenantMonth
from evidence_pipeline.monthly import publication, render, source_format, sources
from evidence_pipeline.runtime import Runtime
from evidence_pipeline.store.local import LocalStore
from evidence_pipeline.synthetic.demo_data import demo_transactions
from evidence_pipeline_tests.support.fixture_sources import publish_revision

TM = TenantMonth("acme-books", "2026-10")


@pytest.fixture
def store(tmp_path):
    return LocalStore(tmp_path / "sources", scheme="sources")


@pytest.fixture
def rt(tmp_path):
    """A runtime without the fixture months (TM is one of them)."""
    return Runtime.from_settings(Settings.from_env({"EVIDENCE_HOME": str(tmp_path / "home")}))


def test_revisions_are_content_addressed_and_sequenced_and_each_has_its_event(rt):
    frame, store = demo_transactions(TM), rt.sources
    first = publish_revision(rt, TM, frame)
    assert publish_revision(rt, TM, frame.sample(frac=1, random_state=1)) == first  # same canonical bytes
    corrected = frame.copy()
    corrected.loc[0, "amount_minor"] += 1
    second = publish_revision(rt, TM, corrected)
    assert (first.sequence, second.sequence) == (1, 2) and first.sha256 != second.sha256
    assert sources.pin_latest(store, TM) == second
    assert sources.read_revision(store, first)["amount_minor"].sum() == frame["amount_minor"].sum()
    # a fixture's revision is published as every other: one `source.published` event each, none for the repeat
    events = rt.ledger.events_of_type(EventType.SOURCE_PUBLISHED, TM.tenant)
    assert [(e["subject_sha256"], e["details"]["sequence"], e["actor"]) for e in events] == [
        (first.sha256, 1, "fixture"),
        (second.sha256, 2, "fixture"),
    ]


def test_reading_a_changed_revision_fails_with_digest_mismatch(rt):
    store = rt.sources
    revision = publish_revision(rt, TM, demo_transactions(TM))
    path = store.root / revision.key
    os.chmod(path, 0o644)
    path.write_bytes(path.read_bytes().replace(b"order", b"refund", 1))
    with pytest.raises(EvidenceError) as error:
        sources.read_revision(store, revision)
    assert error.value.code == "SOURCE_DIGEST_MISMATCH" and not error.value.retryable


@pytest.mark.parametrize(
    "mutate",
    [
        lambda f: f.drop(columns=["currency"]),
        lambda f: f.assign(kind="chargeback"),
        lambda f: f.assign(booked_on="2026-11-01"),
        lambda f: f.assign(amount_minor=-5),
        lambda f: f.assign(amount_minor=1.5),
        lambda f: f.assign(txn_id="same"),
        lambda f: f.assign(currency="XXX"),
        lambda f: f.iloc[0:0],
    ],
    ids=[
        "missing-column",
        "unknown-kind",
        "outside-period",
        "negative",
        "fractional",
        "duplicate-id",
        "currency",
        "empty",
    ],
)
def test_invalid_sources_are_rejected_and_nothing_is_published(store, mutate):
    with pytest.raises(EvidenceError) as error:
        publication.prepare_frame(TM, mutate(demo_transactions(TM)))
    assert error.value.code == "SOURCE_INVALID"
    assert store.list("acme-books") == []


def test_a_revision_whose_name_is_not_its_digest_is_a_digest_mismatch(store):
    store.put_once("acme-books/2026-10/000001-" + "0" * 64 + ".csv", b"x")
    with pytest.raises(EvidenceError) as error:
        sources.pin_latest(store, TM)
    assert error.value.code == "SOURCE_DIGEST_MISMATCH"


@pytest.mark.parametrize("data", [b"\x00\xff\xfe garbage", b"txn_id,booked_on\nT1,2026-10-01\n", b'"unterminated\n'])
def test_unparseable_or_incomplete_revision_bytes_are_source_invalid(store, data):
    digest = hashlib.sha256(data).hexdigest()
    store.put_once(f"acme-books/2026-10/000001-{digest}.csv", data)
    with pytest.raises(EvidenceError) as error:
        sources.read_revision(store, sources.pin_latest(store, TM))
    assert error.value.code == "SOURCE_INVALID"


def test_pin_without_revision_is_source_not_found(store):
    with pytest.raises(EvidenceError) as error:
        sources.pin_latest(store, TM)
    assert error.value.code == "SOURCE_NOT_FOUND"


def test_demo_data_is_deterministic_and_one_tenant_is_much_larger():
    assert demo_transactions(TM).equals(demo_transactions(TM))
    large = demo_transactions(TenantMonth("evergreen-market", "2026-10"))
    assert len(large) > 10 * len(demo_transactions(TM))
    assert set(large["kind"]) == {"order", "refund", "fee", "payout"} and large["currency"].nunique() == 4
    assert isinstance(large, pd.DataFrame)


# Finding 2 of issue 16: checks ran before the cast to int64, so 1e300 became -9223372036854775808 in a signed
# report; 9e18 + 9e18 overflowed the sums; inf escaped as a raw pandas error; 2026-10-5 was accepted as a date.
BAD_CELLS = [
    ("amount_minor", "1e300"),
    ("amount_minor", 1e300),
    ("amount_minor", 2**64),
    ("amount_minor", 2**63),
    ("amount_minor", float("inf")),
    ("amount_minor", "inf"),
    ("amount_minor", "nan"),
    ("amount_minor", 9 * 10**18),
    ("amount_minor", source_format.MAX_AMOUNT_MINOR + 1),
    ("amount_minor", 0),
    ("amount_minor", "0012"),
    ("amount_minor", " 12"),
    ("amount_minor", "12.0"),
    ("amount_minor", True),
    ("booked_on", "2026-10-5"),
    ("booked_on", "2026-10-32"),
    ("booked_on", "2026-1-05"),
    ("booked_on", "2026-10-05T00:00:00"),
    ("booked_on", " 2026-10-05"),
    ("booked_on", "20261005"),
    ("booked_on", "2026-09-30"),
]


def _with_cell(column: str, value) -> pd.DataFrame:
    frame = demo_transactions(TM).astype({column: object})
    frame.loc[3, column] = value
    return frame


def _raw_revision(store, frame: pd.DataFrame) -> sources.SourceRevision:
    """Bytes that reached the sources store without passing publication (an older writer, a hand-made file)."""
    data = frame.to_csv(index=False, lineterminator="\n").encode("utf-8")
    digest = hashlib.sha256(data).hexdigest()
    store.put_once(f"acme-books/2026-10/000001-{digest}.csv", data)
    return sources.pin_latest(store, TM)


@pytest.mark.parametrize(("column", "value"), BAD_CELLS, ids=[f"{c}={v!r}" for c, v in BAD_CELLS])
def test_out_of_range_or_malformed_cells_are_rejected_by_publish_and_by_the_reader(store, column, value):
    frame = _with_cell(column, value)
    with pytest.raises(EvidenceError) as published:
        publication.prepare_frame(TM, frame)
    assert store.list("acme-books") == []
    revision = _raw_revision(store, frame)
    with pytest.raises(EvidenceError) as read:
        sources.read_revision(store, revision)
    for error in (published.value, read.value):
        assert error.code == "SOURCE_INVALID"
        assert "row 4" in error.message and column in error.message  # the 1-based data row, as in the CSV
        assert len(str(value).strip()) < 4 or str(value).strip() not in error.message  # no tenant data values


def test_two_amounts_that_overflow_int64_together_are_source_invalid_not_a_report_failure(store):
    frame = demo_transactions(TM)
    frame.loc[[1, 2], "amount_minor"] = 9 * 10**18
    with pytest.raises(EvidenceError) as error:
        publication.prepare_frame(TM, frame)
    assert error.value.code == "SOURCE_INVALID" and "row 2" in error.value.message


def test_the_largest_source_sums_exactly_in_every_total_the_report_prints():
    rows = source_format.MAX_ROWS
    assert rows * source_format.MAX_AMOUNT_MINOR < 2**53  # the bound every printed sum relies on
    frame = pd.DataFrame(
        {
            "txn_id": [f"T{i:07d}" for i in range(rows)],
            "booked_on": "2026-10-31",
            "kind": ["order"] * (rows - 2) + ["refund", "fee"],
            "currency": "EUR",
            "amount_minor": source_format.MAX_AMOUNT_MINOR,
            "channel": "web",
        }
    )
    frame = sources.validate_frame(frame, TM)
    order = (rows - 2) * source_format.MAX_AMOUNT_MINOR
    net = order - 2 * source_format.MAX_AMOUNT_MINOR
    assert render.report_totals(frame) == (render.money(order, "EUR"), render.money(net, "EUR"))
    assert render.money(order, "EUR") == f"{order // 100:,}.{order % 100:02d} EUR"
    assert render.money(-net, "EUR") == f"-{net // 100:,}.{net % 100:02d} EUR"


def test_money_is_exact_beyond_float_precision():
    assert render.money(2**53 + 1, "EUR") == "90,071,992,547,409.93 EUR"
    assert render.money(-5, "SEK") == "-0.05 SEK"
    assert render.money(0, "USD") == "0.00 USD"
