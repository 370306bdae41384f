import hashlib
import os

import pandas as pd
import pytest

from evidence_pipeline import sources
from evidence_pipeline.demo_data import demo_transactions
from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.models import TenantMonth
from evidence_pipeline.store.local import LocalStore

TM = TenantMonth("acme-books", "2026-10")


@pytest.fixture
def store(tmp_path):
    return LocalStore(tmp_path / "sources", scheme="sources")


def test_revisions_are_content_addressed_and_sequenced(store):
    frame = demo_transactions(TM)
    first = sources.publish_revision(store, TM, frame)
    assert sources.publish_revision(store, TM, frame.sample(frac=1, random_state=1)) == first  # same canonical bytes
    corrected = frame.copy()
    corrected.loc[0, "amount_minor"] += 1
    second = sources.publish_revision(store, TM, corrected)
    assert (first.sequence, second.sequence) == (1, 2) and first.sha256 != second.sha256
    assert sources.pin_latest(store, TM) == second
    assert sources.read_revision(store, first)["amount_minor"].sum() == frame["amount_minor"].sum()


def test_reading_a_changed_revision_fails_with_digest_mismatch(store):
    revision = sources.publish_revision(store, TM, demo_transactions(TM))
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
    ids=["missing-column", "unknown-kind", "outside-period", "negative", "fractional", "duplicate-id", "currency", "empty"],
)
def test_invalid_sources_are_rejected_and_nothing_is_published(store, mutate):
    with pytest.raises(EvidenceError) as error:
        sources.publish_revision(store, TM, mutate(demo_transactions(TM)))
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
