"""Parsers are linear by construction (issue 47): the shared JSON reader's depth gate is one forward scan, shown by
counting its steps on adversarial inputs at n and 2n bytes and up to the reader's limit (no clock), and a signed
body's content is parsed only after its signature verified. The same for what reads an uploaded document's text: a
font's ToUnicode CMap (its blocks found in one forward pass, counted), a contract's signer line (split, not
backtracked) and the content-stream lexer of the budget gate, at the size of its own limit."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from evidence_pipeline import jsonread
from evidence_pipeline.actors.roles import Action
from evidence_pipeline.documents import budgets, gate, pdftext, review, templates
from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.ledger import Ledger
from evidence_pipeline.synthetic.rental_applications import organization_template, program_template
from evidence_pipeline_tests.support.signers import Signers, signature_of, with_signature

LIMIT = jsonread.MAX_DEPTH
OPEN = "[" * (LIMIT + 1)  # more opening brackets than the depth limit: the reader has to scan


def _escapes(n: int) -> str:
    """An unterminated string of escaped quotes (what made the old string-stripping regex quadratic)."""
    return '["' + OPEN + '\\"' * ((n - len(OPEN) - 2) // 2)


def _brackets_in_a_string(n: int) -> str:
    return '["' + "[" * (n - 4) + '"]'


def _flat(n: int) -> str:
    """Shallow but nothing but brackets: every character is a step."""
    return "[" + "[]," * ((n - 4) // 3) + "[]]"


def _quotes(n: int) -> str:
    """Empty strings, shallow (the brackets that make the reader scan are in the first one)."""
    return '["' + OPEN + '",' + '"",' * ((n - len(OPEN) - 6) // 3) + '""]'


def _deep_then_long(n: int) -> str:
    """Just past the limit, then a long tail the gate need not read."""
    return OPEN + "0" * (n - 2 * len(OPEN)) + "]" * len(OPEN)


ADVERSARIAL = [_escapes, _brackets_in_a_string, _flat, _quotes, _deep_then_long]


@pytest.mark.parametrize("make", ADVERSARIAL, ids=lambda make: make.__name__.strip("_"))
def test_the_depth_gate_reads_each_character_at_most_once_and_its_work_doubles_with_the_input(make):
    n = jsonread.MAX_BYTES // 2
    small, large = make(n), make(2 * n)
    assert len(large) <= jsonread.MAX_BYTES
    _, small_steps = jsonread._scan(small)
    _, large_steps = jsonread._scan(large)
    assert small_steps <= len(small) and large_steps <= len(large)  # one step moves past at least one character
    assert large_steps <= 2 * small_steps + 2 * len(OPEN)  # linear: twice the input, twice the work (and a prefix)


@pytest.mark.parametrize("make", ADVERSARIAL, ids=lambda make: make.__name__.strip("_"))
def test_adversarial_documents_at_the_size_limit_are_answered_with_the_callers_code(make):
    """The old reader took about an hour on 1 MiB of the first of these; now each is a value or the caller's
    code (never a RecursionError, never a stall)."""
    text = make(jsonread.MAX_BYTES)
    try:
        jsonread.loads(text, "MANIFEST_INVALID", "the manifest")
    except EvidenceError as error:
        assert error.code == "MANIFEST_INVALID"
    with pytest.raises(EvidenceError, match="larger than"):  # and one byte more is refused unread
        jsonread.loads(text + " " * (jsonread.MAX_BYTES + 1 - len(text)), "MANIFEST_INVALID", "the manifest")


def _depth(value) -> int:
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    return 0


_text = st.text(alphabet=st.sampled_from('[]{}"\\ab\n\u00e9'), max_size=8)
_values = st.recursive(
    st.none() | st.integers() | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=20,
)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(_values, st.booleans())
def test_the_scan_measures_the_depth_the_parser_sees_whatever_the_strings_hold(value, ascii_only):
    """Brackets, quotes and backslashes inside strings (escaped or, without ensure_ascii, raw) never count."""
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert jsonread._scan(text, limit=64)[0] == _depth(value)


def test_a_template_with_a_bad_signature_is_refused_for_it_before_its_text_is_parsed(tmp_path):
    """Template texts too deep and too large to read, under a request signed by a key its actor does not hold:
    the answer is the signature's, so the texts were never parsed; signed properly, the same texts are the
    template's problem."""
    signers = Signers(Ledger(f"sqlite:///{tmp_path}/ledger.db"))
    deep = b"[" * (templates.MAX_TEMPLATE_BYTES // 2) + b"]" * (templates.MAX_TEMPLATE_BYTES // 2)
    huge = b" " * (templates.MAX_TEMPLATE_BYTES + 1)
    args = {"version_id": "0" * 64, "effective_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    signed = signers.sign("olga", Action.TEMPLATE_SUBMIT, args, tenant="acme-books")
    forged = signers.sign("olga", Action.TEMPLATE_SUBMIT, args, tenant="acme-books")
    signers.keys["mallory"] = Ed25519PrivateKey.generate()
    forged = with_signature(forged, signature_of(signers.sign("mallory", Action.TEMPLATE_SUBMIT, args)))
    for organization, program in ((deep, program_template()), (organization_template(), huge)):
        with pytest.raises(EvidenceError) as refused:
            templates.submit(signers.gate, forged, organization, program)
        assert refused.value.code == "ACTION_SIGNATURE_INVALID"
    with pytest.raises(EvidenceError) as invalid:
        templates.submit(signers.gate, signed, deep, program_template())
    assert invalid.value.code == "TEMPLATE_INVALID"


class _Scanned(bytes):
    """Bytes that count how far each ``find`` reads (to what it found, or to the end)."""

    scanned = 0

    def find(self, sub, start=0, *args):
        found = super().find(sub, start, *args)
        type(self).scanned += (len(self) if found == -1 else found + len(sub)) - start
        return found


@pytest.mark.parametrize(
    "cmap",
    [
        b"beginbfchar" * 9_000,
        b"beginbfrange" + b"<0><0>[" * 9_000 + b"endbfrange",
        b"beginbfchar<41><0041>endbfchar" * 3_000 + b"beginbfchar" * 3_000,
    ],
    ids=["begins-without-end", "arrays-without-end", "blocks-then-begins"],
)
def test_a_cmaps_blocks_are_found_in_one_forward_pass(cmap):
    # The lazy regex it replaces (begin(.*?)end) read from every begin to the end: 88 KB took 7.5 s, quadratic.
    _Scanned.scanned = 0
    found = list(pdftext.blocks(_Scanned(cmap), b"beginbfchar", b"endbfchar"))
    assert found == re.findall(rb"beginbfchar(.*?)endbfchar", cmap, re.DOTALL)
    assert _Scanned.scanned <= 2 * len(cmap)  # each byte read at most twice (a begin's search, then its end's)
    pdftext._to_unicode(cmap)  # the whole map: arrays end at the next bracket, so no candidate reads past it


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40).map(lambda data: data.translate(bytes.maketrans(b"abcdef", b"BEBExx"))))
def test_blocks_finds_what_the_lazy_regex_found(data):
    assert list(pdftext.blocks(data, b"B", b"E")) == re.findall(rb"B(.*?)E", data, re.DOTALL)


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="ab ()\t", max_size=20))
def test_a_signer_value_splits_as_the_regex_it_replaces_matched(value):
    matched = re.fullmatch(r"^(?P<name>[^()]*?)\s*\((?P<party>[^()]+)\)$", value)
    assert review.signer(value) == ((matched["name"].strip(), matched["party"].strip()) if matched else None)


def test_a_signer_value_of_spaces_is_one_pass():
    # the regex backtracked over every split of the spaces: 40,000 took 4 s; a megabyte is read once
    assert review.signer(" " * 1_000_000 + "x") is None and review.signer(" " * 1_000_000 + "(p)") == ("", "p")


@pytest.mark.parametrize("tail", [b"", b"(", b"\\\n"], ids=["unterminated", "nested-open", "continued-line"])
def test_the_content_budget_gate_lexes_escaped_parentheses_in_one_pass(tail):
    # A string that could fail to close was scanned again from every escaped "(" inside it: 40 KB took 64 s, and
    # this, just under the text budget, would have taken days. Now it is text, counted once.
    stream = b"(" + b"\\(" * ((budgets.MAX_TEXT_BYTES - 8) // 2) + tail
    gate._check_content(stream)
    with pytest.raises(EvidenceError) as over:
        gate._check_content(stream + b"\\(" * 8)
    assert over.value.code == "DOCUMENT_LIMIT_EXCEEDED"


def test_the_content_budget_gate_still_counts_what_strings_and_comments_hide():
    stripped = gate._NOT_OPERATORS.sub(b" ", b"BT (a(b)c) Tj (x\\)y) Tj <41> Tj % q Q\n(\\\n) ET")
    assert [token.group() for token in gate._OPERATOR.finditer(stripped)] == [b"BT", b"c", b"Tj", b"Tj", b"Tj", b"ET"]
