"""The first pass removes what the second pass looks for, judged alike: a content stream by what it shows or carries
(its strings, the names it uses, its comments), never by its numbers; and what the file carries where no viewer
draws it (a form XObject only a custom key reaches) is removed, not left for the second pass to refuse."""

from __future__ import annotations

import io

import pikepdf
import pytest

from evidence_pipeline.documents import pdftext
from evidence_pipeline.documents.redaction_check import verify_derivative
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.synthetic.rental_applications import FONTS, organization_template
from evidence_pipeline_tests.support import redaction_corpus as corpus
from evidence_pipeline_tests.support.redaction import leaks, pdftotext, redact_pure

SSN = corpus.SSN


def redacted(data: bytes, **rules: str) -> tuple[bytes, dict]:
    """The derivative of ``data`` under the organization template with ``rules``, and the second pass's record."""
    result = redact_pure(data, organization=organization_template(**rules))
    derivative = result.artifacts[result.secret["derivative"]]
    return derivative, verify_derivative({result.secret["derivative"]: io.BytesIO(derivative)}, result)


def _form_only_a_custom_key_reaches(pdf, page):
    """The page shows the SSN; a form XObject that shows it too is reached only by a key the catalog coins (as
    pyHanko's "sneaky" test files keep an appearance stream): no viewer draws it, any parser reads its string."""
    page.obj.Contents = pdf.make_stream(
        page.obj.Contents.read_bytes() + f"BT /F1 12 Tf 72 700 Td (SSN {SSN}) Tj ET\n".encode()
    )
    pdf.Root.FooBar = pdf.make_stream(
        f"BT /F1 10 Tf 0 10 Td (Signed, SSN {SSN}) Tj ET".encode(),
        Type=pikepdf.Name.XObject,
        Subtype=pikepdf.Name.Form,
        BBox=[0, 0, 200, 40],
        Resources=pikepdf.Dictionary(Font=pikepdf.Dictionary(F1=page.obj.Resources.Font.F1)),
    )


def test_a_form_nothing_draws_that_carries_a_value_is_emptied_and_the_job_passes():
    derivative, record = redacted(corpus.build(_form_only_a_custom_key_reaches))
    assert record["passed"]
    with pikepdf.open(io.BytesIO(derivative)) as pdf:
        assert SSN.encode() not in pdf.Root.FooBar.read_bytes()
    assert SSN not in pdftotext(derivative) and "Harbor Housing" in pdftotext(derivative)


GLYPH = b"1000 0 d0 100 0 2022 700 re f"  # a square glyph whose width is the year the page shows


def _glyph_whose_coordinates_spell_the_year(pdf, page):
    page.obj.Resources.Font.T3 = pdf.make_indirect(
        pikepdf.Dictionary(
            Type=pikepdf.Name.Font,
            Subtype=pikepdf.Name.Type3,
            FontBBox=[0, 0, 2200, 700],
            FontMatrix=[0.001, 0, 0, 0.001, 0, 0],
            CharProcs=pikepdf.Dictionary(square=pdf.make_stream(GLYPH)),
            Encoding=pikepdf.Dictionary(Differences=[65, pikepdf.Name.square]),
            FirstChar=65,
            LastChar=65,
            Widths=[2200],
            Resources=pikepdf.Dictionary(),
        )
    )
    page.obj.Contents = pdf.make_stream(
        page.obj.Contents.read_bytes()
        + b"BT /F1 12 Tf 72 700 Td (Lease signed 2022) Tj /T3 12 Tf 72 650 Td (A) Tj ET\n"
    )


def test_a_glyph_procedure_whose_coordinates_spell_a_target_number_keeps_its_shape():
    """Both passes judge a glyph procedure by its strings, names and comments: its coordinates are no value, so the
    first pass no longer empties the procedure (the glyph vanished from the page) while the second ignores it."""
    derivative, record = redacted(corpus.build(_glyph_whose_coordinates_spell_the_year), year=r"\b2022\b")
    assert record["passed"]
    with pikepdf.open(io.BytesIO(derivative)) as pdf:
        font = next(f for f in pdf.pages[0].Resources.Font.values() if f.get("/Subtype") == "/Type3")
        assert [proc.read_bytes().split() for proc in font.CharProcs.values()] == [GLYPH.split()]
    assert "2022" not in pdftotext(derivative) and "Lease signed" in pdftotext(derivative)


def _vera_embedded(pdf, page):
    """The page says who made its font; Vera, embedded, says it in its name table too (its maker's notice)."""
    corpus.embedded_font((FONTS / "Vera.ttf").read_bytes())(pdf, page)
    page.obj.Contents = pdf.make_stream(
        page.obj.Contents.read_bytes() + b"BT /F1 12 Tf 72 700 Td (Typeset by Bitstream) Tj ET\n"
    )


def test_a_value_in_a_font_programs_name_table_is_blanked_in_place_and_the_job_passes():
    """A font's maker's notice is text the file carries (any font tool reads it): the second pass looks there for
    the removed values, so the first pass blanks the strings that hold one, and nothing else of the program."""
    program = (FONTS / "Vera.ttf").read_bytes()
    derivative, record = redacted(corpus.build(_vera_embedded), maker=r"\bBitstream\b")
    assert record["passed"]
    with pikepdf.open(io.BytesIO(derivative)) as pdf:
        kept = pdf.pages[0].Resources.Font.F2.FontDescriptor.FontFile2.read_bytes()
    assert len(kept) == len(program) and kept[:12] == program[:12]
    assert "Bitstream".encode("utf-16-be") not in kept and b"Bitstream" not in kept
    assert "Bitstream".encode("utf-16-be") in program
    assert "Bitstream" not in pdftotext(derivative) and "Typeset by" in pdftotext(derivative)


def _type3_named(names: list[str], widths: list[int], shown: bytes, glyph: bytes = b"50 0 500 700 re f"):
    """A page that shows ``shown`` in a Type3 font without a ToUnicode map whose glyphs, at codes 1, 2 ..., are
    squares (or ``glyph``) named ``names`` and ``widths`` wide (a .notdef has no procedure: it draws nothing), as
    test_3362.pdf's are: no glyph list knows the names, and pdftotext reads them."""

    def change(pdf, page):
        square = pdf.make_stream(b"600 0 d0 " + glyph)
        page.obj.Resources.Font.T3 = pdf.make_indirect(
            pikepdf.Dictionary(
                Type=pikepdf.Name.Font,
                Subtype=pikepdf.Name.Type3,
                FontBBox=[0, 0, 600, 700],
                FontMatrix=[0.001, 0, 0, 0.001, 0, 0],
                CharProcs=pikepdf.Dictionary({name: square for name in names if name != "/.notdef"}),
                Encoding=pikepdf.Dictionary(Differences=[1, *map(pikepdf.Name, names)]),
                FirstChar=1,
                LastChar=len(names),
                Widths=widths,
                Resources=pikepdf.Dictionary(),
            )
        )
        page.obj.Contents = pdf.make_stream(
            page.obj.Contents.read_bytes()
            + b"BT /F1 12 Tf 72 650 Td (Room ) Tj /T3 12 Tf <"
            + shown.hex().encode()
            + b"> Tj ET\n"
        )

    return change


def test_glyph_names_are_read_as_pdftotext_reads_them_and_the_glyphs_removed():
    data = corpus.build(_type3_named(["/3", "/9"], [600, 600], b"\x01\x02\x01"))
    assert "393" in pdftotext(data)
    derivative, record = redacted(data, room=r"\b393\b")
    assert record["passed"]
    assert "393" not in pdftotext(derivative)


def test_a_notdef_glyph_among_a_words_glyphs_reads_as_nothing_as_pdftotext_reads_it():
    """test_3362.pdf draws narrow .notdef glyphs among a word's letters: pdftotext reads them as nothing, so the
    first pass reads the word whole too (it read them as a white square, and left the word)."""
    data = corpus.build(_type3_named(["/3", "/9", "/.notdef"], [600, 600, 40], b"\x01\x03\x02\x03\x01"))
    assert "393" in pdftotext(data)
    derivative, record = redacted(data, room=r"\b393\b")
    assert record["passed"]
    assert "393" not in pdftotext(derivative) and "Room" in pdftotext(derivative)


@pytest.mark.parametrize("between", [b"", b"\x0e"], ids=["named", "notdef_between"])
def test_the_second_pass_reads_glyph_names_as_pdftotext_reads_them(between):
    """A derivative (the first pass's, nothing removed) whose national id is spelled only by a Type3 font's glyph
    names (one-character names, no ToUnicode map; a narrow .notdef between each two, which pdfium reads as its
    code; its glyphs draw nothing, so only the text layer holds it): pypdf and pdfium do not read it, pdftotext
    does, and so does the second pass, which refuses the derivative."""
    codes = {char: index + 1 for index, char in enumerate(dict.fromkeys(SSN))}
    names = [f"/{char}" for char in codes] + ["/.notdef"] * (14 - len(codes))  # code 14: a .notdef
    shown = between.join(bytes([codes[char]]) for char in SSN)
    data = corpus.build(_type3_named(names, [600] * len(codes) + [40] * (14 - len(codes)), shown, glyph=b""))
    assert leaks(data, SSN) == ["pdftotext"]  # not pypdf, pdfium, qpdf's strings or an image
    result = redact_pure(corpus.build(lambda pdf, page: None), remove=False)
    with pytest.raises(EvidenceError) as caught:
        verify_derivative({result.secret["derivative"]: io.BytesIO(data)}, result)
    assert caught.value.code == ReasonCode.REDACTION_VERIFICATION_FAILED
    assert "glyph_names_text 1" in caught.value.message and SSN not in caught.value.message


def test_each_glyph_name_is_read_as_pdftotext_reads_it():
    """One-character names, a variant's suffix dropped (/two.superior is 2, not the superscript pypdf's glyph list
    has), a ligature's parts, uniXXXX, uXXXX: the first pass's reading, which the second pass shares, is
    pdftotext's."""
    names = ["/3", "/two.superior", "/three_nine", "/uni0041", "/u0042", "/seven.alt", "/4"]
    data = corpus.build(_type3_named(names, [600] * len(names), bytes(range(1, len(names) + 1))))
    with pikepdf.open(io.BytesIO(data)) as pdf:
        named = pdftext.differences(pdf.pages[0].Resources.Font.T3)
    read = "".join(named[code] for code in range(1, len(names) + 1))
    assert read == "3239AB74" and f"Room {read}\n" in pdftotext(data)
