"""The processors' own text walk (pdftext) keeps the gate's budgets: a document the gate let through by mistake, or
a processor run without the gate, is still refused DOCUMENT_LIMIT_EXCEEDED before the work is done."""

import io

import pikepdf
import pytest

from evidence_pipeline.documents import budgets, pdftext
from evidence_pipeline.errors import EvidenceError
from evidence_pipeline_tests.support.hostile_pdfs import type0_font

OVER = budgets.MAX_GLYPH_CODES  # a range first..OVER holds one code more than the budget


def _refused(call) -> str:
    with pytest.raises(EvidenceError) as refused:
        call()
    assert refused.value.code == "DOCUMENT_LIMIT_EXCEEDED"
    return refused.value.message


@pytest.mark.parametrize("w", [[0, OVER, 500], [0, -10_000_000, 1, 0, OVER, 5], [0, OVER - 1, 5, 0, [1, 2]]])
def test_font_widths_over_the_glyph_budget_are_refused_before_they_are_filled_in(w):
    assert "widths" in _refused(lambda: pdftext._cid_widths(pikepdf.Array(w)))


def test_font_widths_within_the_glyph_budget_are_read():
    assert len(pdftext._cid_widths(pikepdf.Array([0, OVER - 1, 500]))) == budgets.MAX_GLYPH_CODES


def test_a_to_unicode_map_over_the_glyph_budget_is_refused():
    full = b"<0000> <FFFF> <0041>\n"
    assert "ToUnicode" in _refused(
        lambda: pdftext._to_unicode(b"beginbfrange\n" + full + b"<0000> <0000> <0041>\nendbfrange")
    )
    assert len(pdftext._to_unicode(b"beginbfrange\n" + full + b"endbfrange")) == budgets.MAX_GLYPH_CODES


def test_a_to_unicode_map_with_chars_and_ranges_is_read():
    cmap = b"1 beginbfchar\n<0001> <0041>\nendbfchar\n1 beginbfrange\n<0002> <0003> <0042>\nendbfrange"
    assert pdftext._to_unicode(cmap) == {1: "A", 2: "B", 3: "C"}


def _walk(content: bytes) -> pdftext.Page:
    """The walk of one page drawing ``content`` in a two-byte font (the Pdf stays open while it is walked)."""
    with pikepdf.open(io.BytesIO(type0_font(b"[1 [500]]", b"beginbfchar\n<0001> <0041>\nendbfchar"))) as pdf:
        pdf.pages[0].obj.Contents = pdf.make_stream(content)
        return pdftext.walk_page(pdf.pages[0])


def test_the_walk_refuses_a_content_stream_over_the_operator_budget(monkeypatch):
    monkeypatch.setattr(budgets, "MAX_OPERATORS", 4)  # the real budget needs a million operators to show
    assert len(_walk(b"BT /F1 12 Tf <0001> Tj ET").glyphs) == 1
    assert "operators" in _refused(lambda: _walk(b"q BT /F1 12 Tf <0001> Tj ET Q"))


def test_the_walk_refuses_a_content_stream_over_the_text_budget(monkeypatch):
    monkeypatch.setattr(budgets, "MAX_TEXT_BYTES", 4)  # the real budget needs a megabyte of text to show
    assert len(_walk(b"BT /F1 12 Tf <00010001> Tj ET").glyphs) == 2
    assert "text" in _refused(lambda: _walk(b"BT /F1 12 Tf <0001000100> Tj ET"))  # one long string
    assert "text" in _refused(lambda: _walk(b"BT /F1 12 Tf [<0001> 5 <0001>] TJ <0001> Tj ET"))  # or many
