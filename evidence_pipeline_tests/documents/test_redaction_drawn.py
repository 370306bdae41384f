"""The first pass reaches every content stream a page draws, whatever draws it (its content's `Do`s, a graphics
state's soft-mask group, a tiling pattern's cell, a Type3 font's glyph procedures), and renames a resource whose
name spells a value in its resources and in every content stream that names it, alike (issue 46)."""

from __future__ import annotations

import io

import pikepdf
import pytest

from evidence_pipeline.documents.matching import name_str
from evidence_pipeline.documents.redaction_check import verify_derivative
from evidence_pipeline.synthetic.rental_applications import organization_template
from evidence_pipeline_tests.support import redaction_corpus as corpus
from evidence_pipeline_tests.support.redaction import pdftotext, redact_pure

VALUE = "Holloway"
SHOWN = b"BT /H1 28 Tf 20 20 Td (Applicant Holloway) Tj ET"
# operator -> the resource category its name operand names
NAMING = {
    "gs": "/ExtGState",
    "Tf": "/Font",
    "Do": "/XObject",
    "scn": "/Pattern",
    "sh": "/Shading",
    "BDC": "/Properties",
}


def _helvetica(pdf) -> pikepdf.Dictionary:
    return pdf.make_indirect(
        pikepdf.Dictionary(Type=pikepdf.Name.Font, Subtype=pikepdf.Name.Type1, BaseFont=pikepdf.Name.Helvetica)
    )


def _form(pdf, content: bytes, **entries) -> pikepdf.Stream:
    return pdf.make_stream(
        content,
        Type=pikepdf.Name.XObject,
        Subtype=pikepdf.Name.Form,
        BBox=[0, 0, 400, 60],
        Resources=pikepdf.Dictionary(Font=pikepdf.Dictionary(H1=_helvetica(pdf))),
        **entries,
    )


def _soft_mask(pdf, page):
    """White Helvetica text in a luminosity soft mask's group: the black square painted through it shows it."""
    group = _form(
        pdf, b"1 g " + SHOWN, Group=pikepdf.Dictionary(S=pikepdf.Name.Transparency, CS=pikepdf.Name.DeviceGray)
    )
    mask = pikepdf.Dictionary(Type=pikepdf.Name.Mask, S=pikepdf.Name.Luminosity, G=group)
    page.obj.Resources.ExtGState = pikepdf.Dictionary(M0=pikepdf.Dictionary(Type=pikepdf.Name.ExtGState, SMask=mask))
    page.obj.Contents = pdf.make_stream(corpus.HEADING + b"q 1 0 0 1 72 600 cm /M0 gs 0 g 0 0 400 60 re f Q\n")


def _tiling(pdf, content: bytes, width: int, height: int, **entries) -> pikepdf.Stream:
    """A coloured tiling pattern of one cell ``width`` by ``height``."""
    return pdf.make_stream(
        content,
        Type=pikepdf.Name.Pattern,
        PatternType=1,
        PaintType=1,
        TilingType=1,
        BBox=[0, 0, width, height],
        XStep=width,
        YStep=height,
        Resources=pikepdf.Dictionary(),
        **entries,
    )


def _pattern_cell(pdf, page):
    """A coloured tiling pattern whose cell shows Helvetica text."""
    cell = _tiling(pdf, SHOWN, 400, 60, Matrix=[1, 0, 0, 1, 72, 600])
    cell.Resources = pikepdf.Dictionary(Font=pikepdf.Dictionary(H1=_helvetica(pdf)))
    page.obj.Resources.Pattern = pikepdf.Dictionary(P0=cell)
    page.obj.Contents = pdf.make_stream(corpus.HEADING + b"/Pattern cs /P0 scn 72 600 400 60 re f\n")


def _glyph_procedure(pdf, page):
    """A Type3 font whose one glyph's procedure shows Helvetica text (a glyph space of 1/100 point)."""
    glyph = pdf.make_stream(b"4000 0 d0 " + SHOWN)
    font = pikepdf.Dictionary(
        Type=pikepdf.Name.Font,
        Subtype=pikepdf.Name.Type3,
        FontBBox=[0, 0, 4000, 600],
        FontMatrix=[0.01, 0, 0, 0.01, 0, 0],
        CharProcs=pikepdf.Dictionary(g=glyph),
        Encoding=pikepdf.Dictionary(Type=pikepdf.Name.Encoding, Differences=[65, pikepdf.Name.g]),
        FirstChar=65,
        LastChar=65,
        Widths=[4000],
        Resources=pikepdf.Dictionary(Font=pikepdf.Dictionary(H1=_helvetica(pdf))),
    )
    page.obj.Resources.Font.T3 = pdf.make_indirect(font)
    page.obj.Contents = pdf.make_stream(corpus.HEADING + b"BT /T3 100 Tf 72 600 Td (A) Tj ET\n")


@pytest.mark.parametrize("change", [_soft_mask, _pattern_cell, _glyph_procedure], ids=lambda c: c.__name__)
def test_text_drawn_outside_the_pages_content_is_removed_from_the_stream_that_draws_it(change):
    """Each stream is walked as a form is (in its own space, with its own resources or those it inherits), its
    glyphs that spell the value dropped, the rest of the page left as it was (no region burned in): the second pass
    passes and no stream of the derivative holds the value. Before, none of them was walked: the soft mask's text
    stayed (the second pass refused), the pattern's and the glyph's were burned in with what they covered."""
    data = _redacted(corpus.build(change))
    with pikepdf.open(io.BytesIO(data)) as pdf:
        streams = [obj.read_bytes() for obj in pdf.objects if isinstance(obj, pikepdf.Stream)]
    assert not any(VALUE.encode() in stream for stream in streams)


def _named_after_the_value(pdf, page):
    """Resources named after the value, of every category content names: a graphics state, a font, a form, a
    pattern, a shading and an optional-content group, each named in the content."""
    shading = pikepdf.Dictionary(ShadingType=2, ColorSpace=pikepdf.Name.DeviceGray, Coords=[0, 0, 100, 0])
    shading.Function = pikepdf.Dictionary(FunctionType=2, Domain=[0, 1], C0=[0], C1=[1], N=1)
    cell = _tiling(pdf, b"0 0 5 5 re f", 10, 10)
    group = pdf.make_indirect(pikepdf.Dictionary(Type=pikepdf.Name.OCG, Name=pikepdf.String("layer")))
    pdf.Root.OCProperties = pikepdf.Dictionary(OCGs=[group], D=pikepdf.Dictionary(ON=[group]))
    resources = page.obj.Resources
    resources.ExtGState = pikepdf.Dictionary({"/HollowayGS": pikepdf.Dictionary(ca=0.9)})
    resources.Font["/HollowayFont"] = _helvetica(pdf)
    resources.XObject = pikepdf.Dictionary({"/HollowayForm": _form(pdf, b"0 0 10 10 re f")})
    resources.Pattern = pikepdf.Dictionary({"/HollowayPattern": cell})
    resources.Shading = pikepdf.Dictionary({"/HollowayShading": shading})
    resources.Properties = pikepdf.Dictionary({"/HollowayLayer": group})
    page.obj.Contents = pdf.make_stream(
        corpus.HEADING
        + b"q /HollowayGS gs BT /HollowayFont 12 Tf 72 700 Td (Applicant Holloway) Tj ET Q\n"
        + b"q 1 0 0 1 72 500 cm /HollowayForm Do Q\n"
        + b"/OC /HollowayLayer BDC /Pattern cs /HollowayPattern scn 72 400 50 50 re f EMC\n"
        + b"q 72 300 100 20 re W n /HollowayShading sh Q\n"
    )


def test_a_resource_named_after_a_value_is_renamed_in_its_resources_and_in_the_content_that_names_it():
    """Before, the first pass removed the resource's entry (a key that spells a value) and left the content naming
    it: the content's bytes still spelled the value (the second pass refused, pyHanko's /BackgroundGS) and the
    drawing named what was gone."""
    data = _redacted(corpus.build(_named_after_the_value))
    assert VALUE.lower().encode() not in _qpdf_dump(data).lower()
    with pikepdf.open(io.BytesIO(data)) as pdf:
        page = pdf.pages[0]
        named = [
            (NAMING[str(operator)], name_str([o for o in operands if isinstance(o, pikepdf.Name)][-1]))
            for operands, operator in pikepdf.parse_content_stream(page)
            if str(operator) in NAMING
        ]
        assert {category for category, _ in named} == set(NAMING.values())
        assert all(name in page.obj.Resources[category] for category, name in named)


def _redacted(data: bytes) -> bytes:
    """The derivative of ``data`` under a template with a rule matching VALUE, which the second pass passed and
    pdftotext does not read VALUE in."""
    result = redact_pure(data, organization=organization_template(holder=rf"\b{VALUE}\b"))
    assert result.summary["outcome"] == "redacted" and result.summary["burned_regions"] == {}  # removed, not burned
    derivative = result.artifacts[result.secret["derivative"]]
    assert verify_derivative({result.secret["derivative"]: io.BytesIO(derivative)}, result)["passed"]
    assert VALUE not in pdftotext(derivative)
    return derivative


def _qpdf_dump(data: bytes) -> bytes:
    with pikepdf.open(io.BytesIO(data)) as pdf:
        return b"".join(obj.read_bytes() if isinstance(obj, pikepdf.Stream) else b"" for obj in pdf.objects) + b"".join(
            str(key).encode() for obj in pdf.objects if isinstance(obj, pikepdf.Dictionary) for key in obj.keys()
        )
