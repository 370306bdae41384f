"""The second pass judges each object by what it can show or carry, not by its syntax: a number inside a
coordinate or an MCID, a name the PDF specification defines, a font program's glyph data and a CMap's codes are no
finding; a string a content stream holds, an XMP packet, a name the file coins (a custom key, a tag, a resource
name) and a font's name table still are."""

from __future__ import annotations

import io
import re
import struct

import pikepdf
import pytest
from pypdf.generic import StreamObject

from evidence_pipeline.documents.redaction_check import verify_derivative
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.synthetic.rental_applications import FONTS, organization_template
from evidence_pipeline_tests.support import redaction_corpus as corpus
from evidence_pipeline_tests.support.redaction import pdftotext, redact_pure

SSN = corpus.SSN


def second_pass(data: bytes, values: tuple[str, ...] = (), **rules: str) -> dict:
    """The second pass over ``data`` with the organization template and ``rules``, as if the first pass had
    removed ``values``."""
    result = redact_pure(
        corpus.build(lambda pdf, page: None), organization=organization_template(**rules), remove=False
    )
    result.secret["values"] = [*result.secret["values"], *values]
    return verify_derivative({result.secret["derivative"]: io.BytesIO(data)}, result)


def findings(data: bytes, values: tuple[str, ...] = (), **rules: str) -> str:
    with pytest.raises(EvidenceError) as caught:
        second_pass(data, values, **rules)
    assert caught.value.code == ReasonCode.REDACTION_VERIFICATION_FAILED
    return caught.value.message


def drawing(content: bytes):
    """The page's content, then ``content``."""
    return lambda pdf, page: page.obj.__setattr__("Contents", pdf.make_stream(page.obj.Contents.read_bytes() + content))


def vera(replace: tuple[bytes, bytes] | None = None, in_table: bytes = b"name") -> bytes:
    """Vera Sans with ``replace`` applied inside one of its tables (its checksums are not a reader's concern)."""
    data = bytearray((FONTS / "Vera.ttf").read_bytes())
    (count,) = struct.unpack_from(">H", data, 4)
    for i in range(count):
        tag, _, offset, length = struct.unpack_from(">4sIII", data, 12 + 16 * i)
        if tag == in_table and replace:
            old, new = replace
            table = bytes(data[offset : offset + length])
            at = table.index(old) if old in table else 0
            data[offset + at : offset + at + len(new)] = new
    return bytes(data)


def to_unicode(cmap: bytes):
    return lambda pdf, page: page.obj.Resources.Font.F1.__setattr__("ToUnicode", pdf.make_stream(cmap))


CMAP = (
    b"/CIDInit /ProcSet findresource begin 12 dict begin begincmap /CIDSystemInfo << /Registry (Adobe) /Ordering (UCS)"
    b" /Supplement 0 >> def /CMapName /Adobe-Identity-UCS def /CMapType 2 def 1 begincodespacerange <00> <FF>"
    b" endcodespacerange 1 beginbfchar <40> <0140> endbfchar endcmap CMapName currentdict /CMap defineresource pop"
    b" end end"
)
GLYPH_DATA = b"Z140X"  # bytes an outline may hold, planted in the glyph table


# What no reader sees: each of these failed the job before the second pass judged objects by what they carry.
SYNTAX = {
    "a_number_inside_coordinates_and_an_mcid": (
        drawing(b"/P <</MCID 140>> BDC 72 6140.03 m 300 140 l S EMC\n"),
        (),
        {"number": r"140"},
    ),
    "a_key_the_specification_defines": (lambda pdf, page: None, (), {"word": r"Contents"}),
    "a_name_value_the_specification_defines": (
        lambda pdf, page: pdf.Root.__setattr__("PageLayout", pikepdf.Name.TwoColumnLeft),
        (),
        {"word": r"Column"},
    ),
    "a_value_inside_a_font_programs_glyph_data": (
        corpus.embedded_font(vera((b"\x00", GLYPH_DATA), in_table=b"glyf")),
        (GLYPH_DATA.decode(),),
        {},
    ),
    "a_code_inside_a_cmap": (to_unicode(CMAP), (), {"number": r"140"}),
}


@pytest.mark.parametrize("case", sorted(SYNTAX))
def test_syntax_a_reader_never_sees_does_not_fail_the_job(case):
    change, values, rules = SYNTAX[case]
    assert second_pass(corpus.build(change), values, **rules)["passed"]


def test_the_vocabulary_is_the_specifications():
    from evidence_pipeline.documents.pdfsyntax import SPEC_NAMES

    assert {"Contents", "Columns", "FontFile2", "ExtGState", "MCID", "Span", "Identity-H"} <= SPEC_NAMES
    assert not {"BackgroundGS", "F1", "GS0", "Vera"} & SPEC_NAMES  # names files coin


# What the file carries for anyone who reads it: each must still fail the job, counted by its place.
CARRIED = {
    "a_marked_content_property_string": (drawing(f"/Span <</Alt ({SSN})>> BDC EMC\n".encode()), "streams"),
    "a_comment_in_a_content_stream": (drawing(f"% SSN {SSN}\n".encode()), "streams"),
    "a_tag_the_file_coins": (drawing(f"/SSN-{SSN} BMC EMC\n".encode()), "streams"),
    "a_resource_name_the_file_coins": (
        lambda pdf, page: (
            page.obj.Resources.__setattr__("ExtGState", pikepdf.Dictionary({f"/GS-{SSN}": pikepdf.Dictionary()})),
            drawing(f"/GS-{SSN} gs\n".encode())(pdf, page),
        ),
        "names",
    ),
    "a_custom_key": (corpus.catalog(**{f"Key-{SSN}": True}), "names"),
    "an_xmp_packet": (corpus.xmp(SSN), "streams"),
    # a font's own text is searched for the values the first pass removed (a rule on a font maker's notice finds
    # the maker's words)
    "a_fonts_name_table": (
        corpus.embedded_font(vera(("Bitstream".encode("utf-16-be"), SSN.encode("utf-16-be")))),
        "streams",
    ),
}


@pytest.mark.parametrize("case", sorted(CARRIED))
def test_a_value_the_file_carries_still_fails_the_job(case):
    change, place = CARRIED[case]
    message = findings(corpus.build(change), (SSN,) if case == "a_fonts_name_table" else ())
    assert re.search(rf"\b{place} \d", message) and SSN not in message


def test_an_image_pypdf_cannot_decode_is_read_as_pdfium_decodes_it_where_the_page_draws_it(monkeypatch):
    """pypdf failing on an image (a filter it lacks) no longer fails the job by itself: pdfium's decoding of it,
    where the page draws it, is read by OCR, and a value it shows is still found there."""
    monkeypatch.setattr(StreamObject, "decode_as_image", lambda self: 1 / 0, raising=False)
    clean = corpus.drawn_picture(corpus.scan_image(lines=("Monthly rent budget 900",)), corpus.FULL_PAGE)
    assert second_pass(corpus.build(clean))["images_read"] == 1
    shown = corpus.drawn_picture(corpus.scan_image(lines=(f"SSN {SSN}",)), corpus.FULL_PAGE)
    assert "image_text 1" in findings(corpus.build(shown))


def test_a_target_equal_to_a_key_the_specification_defines_removes_the_word_not_the_pages_contents():
    """Both passes read names through matching.name_text: a page showing "Table of Contents" with a rule for
    "Contents" loses that word, not its /Contents entry (which would blank the page), and the job succeeds."""
    data = corpus.build(drawing(b"BT /F1 12 Tf 72 700 Td (Table of Contents) Tj ET\n"))
    result = redact_pure(data, organization=organization_template(word=r"\bContents\b"))
    derivative = result.artifacts[result.secret["derivative"]]
    assert verify_derivative({result.secret["derivative"]: io.BytesIO(derivative)}, result)["passed"]
    assert result.summary["removed"].get("name", 0) == 0
    shown = pdftotext(derivative)
    assert "Harbor Housing" in shown and "Table of" in shown and "Contents" not in shown
