"""The worker-side document gate on hostile documents built here: each gets its own code, no crash."""

import io
import zipfile
import zlib

import pikepdf
import pytest

from evidence_pipeline.documents.budgets import (
    MAX_ANNOTATIONS,
    MAX_ARRAY_ENTRIES,
    MAX_OPERATORS,
    MAX_STREAM_BYTES,
    SPLIT,
)
from evidence_pipeline.documents.gate import RESAVE, SENDER_ACTIONS, _parser_limit, gate
from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.synthetic.lease_contracts import lease_contract
from evidence_pipeline.synthetic.rental_applications import application
from evidence_pipeline_tests.support.hostile_pdfs import (
    HOSTILE,
    POLYGLOTS,
    content_page,
    encrypted,
    image,
    jpeg_stating,
    many_annotations,
    pages,
    simple,
    written,
)


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_each_hostile_document_gets_its_code(name):
    data, code = HOSTILE[name]
    with pytest.raises(EvidenceError) as refused:
        gate(io.BytesIO(data))
    assert refused.value.code == code, refused.value.message
    assert any(action in refused.value.message for action in SENDER_ACTIONS), refused.value.message  # what to do


def test_a_repeated_key_is_named_as_the_defect_with_what_to_do():
    with pytest.raises(EvidenceError) as refused:
        gate(io.BytesIO(HOSTILE["catalog_key_twice"][0]))
    assert (
        refused.value.message == f"a dictionary repeats a key (readers disagree on which value holds) "
        f"(pyHanko: PdfStrictReadError); {RESAVE}"
    )


def test_at_least_30_hostile_documents():
    assert len(HOSTILE) >= 30


@pytest.mark.parametrize("algorithm", ["RC4-128", "AES-256"])
def test_permission_only_encryption_is_read_and_marked(algorithm):
    """An empty user password only restricts permissions: the gate reads the document (every object, decrypted)
    and marks it, for the operations that write to refuse; a real password is still refused."""
    gated = gate(io.BytesIO(written(encrypted("", algorithm))))
    assert (gated.pages, gated.permissions_only) == (1, True)
    assert not gate(io.BytesIO(pages(1))).permissions_only


def test_a_plain_document_passes_and_is_described():
    gated = gate(io.BytesIO(pages(3)))
    assert (gated.pages, gated.active_content, gated.signatures_present) == (3, (), False)
    assert gated.pdf_version == "1.3" and gated.fonts == ()


def test_active_content_is_flagged_instead_when_the_policy_says_so():
    data, _ = HOSTILE["javascript_open_action"]
    assert gate(io.BytesIO(data), active_content="flag").active_content == ("DOCUMENT_JAVASCRIPT",)
    assert gate(io.BytesIO(HOSTILE["embedded_file"][0]), "flag").active_content == ("DOCUMENT_EMBEDDED_FILES",)


def test_fonts_and_signature_fields_are_found():
    font = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"
    signature = b"<< /FT /Sig /T (sig) >>"
    gated = gate(io.BytesIO(simple(font, signature)))
    assert gated.fonts == ("Helvetica",) and gated.signatures_present


def test_written_documents_pass():
    assert gate(io.BytesIO(written(lambda w: w.add_metadata({"/Producer": "tests"})))).producer == "tests"


@pytest.mark.parametrize("name", sorted(POLYGLOTS))
def test_a_polyglot_or_trailing_data_is_refused(name):
    data = POLYGLOTS[name]
    with pytest.raises(EvidenceError) as refused:
        gate(io.BytesIO(data))
    assert refused.value.code == "DOCUMENT_POLYGLOT", refused.value.message


def test_the_zip_polyglots_really_open_as_zip_archives():
    """The samples are what the attack was: a PDF reader (qpdf) and Python's zipfile both open them."""
    for name in ("zip_appended", "zip_appended_whose_comment_ends_in_eof", "zip_in_an_unreferenced_stream"):
        with zipfile.ZipFile(io.BytesIO(POLYGLOTS[name])) as archive:
            assert archive.namelist() == ["lease.exe"], name
        assert len(pikepdf.open(io.BytesIO(POLYGLOTS[name])).pages) == 1


def test_nothing_the_gate_passes_opens_as_a_zip_archive():
    samples = [data for data, _ in HOSTILE.values()] + list(POLYGLOTS.values())
    for data in samples:
        try:
            gate(io.BytesIO(data), active_content="flag")
        except EvidenceError:
            continue
        assert not zipfile.is_zipfile(io.BytesIO(data))


def test_a_name_tree_loop_is_refused_when_attachments_are_only_flagged():
    data, _ = HOSTILE["embedded_files_name_tree_loop"]
    with pytest.raises(EvidenceError) as refused:
        gate(io.BytesIO(data), active_content="flag")
    assert refused.value.code == "DOCUMENT_LIMIT_EXCEEDED" and "refers back to itself" in refused.value.message


def test_a_limit_refusal_names_the_limit_never_a_value_from_the_file():
    for name, value in (
        ("cid_widths_100_million_glyphs", "100000000"),
        ("page_tree_count_999999999", "999999999"),
        ("image_declared_200000_square", "200000"),
        ("page_14400000_points_square", "14400000"),
    ):
        with pytest.raises(EvidenceError) as refused:
            gate(io.BytesIO(HOSTILE[name][0]))
        assert "limit" in refused.value.message and value not in refused.value.message.replace(",", "")


def test_a_font_declaring_every_two_byte_code_passes_and_a_longer_array_is_refused_by_its_named_limit():
    """A composite font's /W giving each of 65,536 codes its own range (c c w: 196,608 numbers), as a full CJK
    font embedded whole has; one array longer than MAX_ARRAY_ENTRIES is refused naming that limit."""

    def with_array(entries: bytes) -> bytes:
        font = (
            b"<< /Type /Font /Subtype /Type0 /BaseFont /F /Encoding /Identity-H /DescendantFonts [<< /Type /Font "
            b"/Subtype /CIDFontType2 /BaseFont /F /CIDSystemInfo << /Registry (Adobe) /Ordering (Identity) "
            b"/Supplement 0 >> /W [" + entries + b"] >>] >>"
        )
        page = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] /Resources << /Font << /F1 4 0 R >> >> >>"
        return simple(font, page=page)

    every_code = b" ".join(b"%d %d 500" % (code, code) for code in range(65_536))
    assert gate(io.BytesIO(with_array(every_code))).pages == 1
    with pytest.raises(EvidenceError) as refused:
        gate(io.BytesIO(with_array(b"0 [" + b"500 " * (MAX_ARRAY_ENTRIES + 1) + b"]")))
    assert refused.value.message.endswith(f"an array of more than {MAX_ARRAY_ENTRIES:,} entries; {SPLIT}")


def test_a_free_list_head_of_generation_65536_is_read_and_a_startxref_loop_is_not():
    """MuPDF's and some Word versions' cross-reference table (its free-list head of generation 65536, which only
    pyHanko's strict rules refuse) is accepted; a file no reader can follow stays DOCUMENT_MALFORMED."""
    page = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] /Contents 4 0 R >>"
    data = simple(b"<< /Length 0 >>\nstream\n\nendstream", page=page, free_generation=65536)
    assert b"0000000000 65536 f" in data and gate(io.BytesIO(data)).pages == 1
    looping = data.replace(b"trailer\n<< /Size 5", b"trailer\n<< /Prev %d /Size 5" % data.rindex(b"xref\n0 5"))
    with pytest.raises(EvidenceError) as refused:
        gate(io.BytesIO(looping))
    assert refused.value.code == "DOCUMENT_MALFORMED"


def test_a_lossless_colour_scan_at_300_dpi_is_a_document_not_a_limit_breach():
    """An A4 page scanned at 300 dpi in colour and stored with Flate (26 MB decoded) passes; a parser's refusal
    names its limit."""
    width, height = 2480, 3508
    rows = bytes(range(256)) * (width * 3 // 256) + bytes(width * 3 % 256)
    page = image(width, height, zlib.compress(rows * height), b"/FlateDecode")
    page = page.replace(b"/DeviceGray", b"/DeviceRGB ")  # the same length: the offsets hold
    assert gate(io.BytesIO(page)).pages == 1
    with pytest.raises(EvidenceError) as refused:
        gate(io.BytesIO(HOSTILE["flate_bomb"][0]))
    assert refused.value.message.endswith(f"a stream decoding to more than {MAX_STREAM_BYTES:,} bytes; {SPLIT}")


def test_documents_this_project_writes_pass():
    """reportlab, pikepdf (object streams) and pyHanko (an incremental update) write nothing the gate refuses."""
    pdf = pikepdf.open(io.BytesIO(pages(2)))
    out = io.BytesIO()
    pdf.save(out, object_stream_mode=pikepdf.ObjectStreamMode.generate)
    assert gate(io.BytesIO(out.getvalue())).pages == 2
    assert gate(io.BytesIO(many_annotations(MAX_ANNOTATIONS))).pages == 1  # at the limit is within it
    assert gate(io.BytesIO(content_page(b"n\n" * MAX_OPERATORS))).pages == 1
    assert gate(io.BytesIO(image(8, 8, jpeg_stating(8, 8), b"/DCTDecode"))).pages == 1
    assert gate(io.BytesIO(application()), active_content="flag").pages == 3  # pikepdf, with an earlier revision
    assert gate(io.BytesIO(lease_contract(1, pages=3).pdf)).pages == 3  # reportlab
    # pyHanko's signed incremental updates pass the gate in test_split_merge.py (the signature check gates them)


@pytest.mark.parametrize(
    "said",
    [  # pypdf 6's LimitReachedError messages, values as the file would give them
        "Limit reached while decompressing. 10 bytes remaining.",
        "Recovery limit reached while decompressing. 10 bytes remaining.",
        "Maximum filter count 4 exceeded: 5",
        "Stream decoding exceeded the maximum accumulated decoding work of 300000000 bytes.",
        "XFA decoding exceeded the maximum accumulated decoding work of 300000000 bytes.",
        "Maximum page tree depth reached: 33 > 32.",
        "Maximum page tree entry limit reached: 100001 > 100000.",
        "Maximum page tree page entry limit exceeded!",
        "Maximum outline depth reached: 17 > 16.",
        "Maximum outline entry limit reached: 100001 > 100000.",
        "Reached maximum allowed form field depth.",
        "Exceeded maximum number of fields allowed.",
        "Maximum named destination depth exceeded: 101 > 100.",
        "Maximum named destination entry limit exceeded: 100001 > 100000.",
        "XMP metadata exceeds limit of 100000 elements.",
        "XMP stream size 6000000 exceeds limit of 5000000.",
        "Total XRef entries 70000 exceed maximum allowed value 60000.",
        "Maximum Root object recovery limit reached.",
        "Detected cycle in /Pages hierarchy when retrieving page.",
        "Detected cycle in /Parent hierarchy when retrieving qualified field name.",
        "Declared size 70000000 exceeds allowed limit of 64000000!",
        "Number of columns 300000 exceeds defined limit of 250000.",
    ],
)
def test_every_parser_limit_is_named(said):
    """A refusal by pypdf's limits names which limit, and its value where the gate sets one (issue 46)."""
    limit, action = _parser_limit(said)
    assert limit != _parser_limit("a message no entry knows")[0] and action in SENDER_ACTIONS
    assert not any(number in limit for number in ("10 bytes", "33", "100001", "70000 ", "6000000"))
