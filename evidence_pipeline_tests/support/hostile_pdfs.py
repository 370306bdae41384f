"""Hostile and well-formed PDFs built in the tests, byte by byte where a library would refuse to write them."""

from __future__ import annotations

import io
import zipfile
import zlib

import pikepdf
from PIL import Image
from pypdf import PdfWriter
from pypdf.generic import ArrayObject, DictionaryObject, NameObject, TextStringObject

CATALOG = b"<< /Type /Catalog /Pages 2 0 R >>"
PAGES = b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>"
PAGE = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] >>"


def raw_pdf(
    *objects: bytes, trailer: bytes = b"/Root 1 0 R", header: bytes = b"%PDF-1.7", free_generation: int = 65535
) -> bytes:
    """Objects 1..n with a correct cross-reference table (so only the defect a test plants is there); the head of
    its free list has ``free_generation`` (MuPDF and some Word versions write 65536)."""
    out = bytearray(header + b"\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 %05d f \n" % (len(objects) + 1, free_generation)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d " % (len(objects) + 1) + trailer + b" >>\nstartxref\n%d\n" % xref + b"%%EOF\n"
    return bytes(out)


def stream(data: bytes, extra: bytes = b"", length: int | None = None) -> bytes:
    return (
        b"<< /Length %d " % (len(data) if length is None else length) + extra + b" >>\nstream\n" + data + b"\nendstream"
    )


def simple(*extra_objects: bytes, catalog: bytes = CATALOG, page: bytes = PAGE, free_generation: int = 65535) -> bytes:
    return raw_pdf(catalog, PAGES, page, *extra_objects, free_generation=free_generation)


def written(build) -> bytes:
    """A PDF from pypdf's writer after ``build(writer)``, one blank page."""
    writer = PdfWriter()
    writer.add_blank_page(200, 200)
    build(writer)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def pages(count: int) -> bytes:
    writer = PdfWriter()
    for _ in range(count):
        writer.add_blank_page(200, 200)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def encrypted(user: str, algorithm: str):
    return lambda writer: writer.encrypt(user_password=user, owner_password="owner", algorithm=algorithm)


def _xfa(writer: PdfWriter) -> None:
    writer._root_object[NameObject("/AcroForm")] = DictionaryObject(
        {NameObject("/Fields"): ArrayObject(), NameObject("/XFA"): TextStringObject("<xdp:xdp/>")}
    )


def flate(data: bytes, extra: bytes = b"") -> bytes:
    return stream(zlib.compress(data, 9), b"/Filter /FlateDecode " + extra)


def content_page(content: bytes, *more: bytes, resources: bytes = b"") -> bytes:
    """One page drawing ``content`` (object 4), with ``more`` objects from 5 on."""
    page = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] /Contents 4 0 R " + resources + b">>"
    return simple(flate(content), *more, page=page)


def type0_font(widths: bytes, cmap: bytes) -> bytes:
    """A page showing text in a composite font (5) whose descendant (6) has ``widths`` and ToUnicode map (7)."""
    return content_page(
        b"BT /F1 12 Tf <0001> Tj ET",
        b"<< /Type /Font /Subtype /Type0 /BaseFont /Hostile /Encoding /Identity-H /DescendantFonts [6 0 R]"
        b" /ToUnicode 7 0 R >>",
        b"<< /Type /Font /Subtype /CIDFontType2 /BaseFont /Hostile /CIDSystemInfo << /Registry (Adobe)"
        b" /Ordering (Identity) /Supplement 0 >> /W " + widths + b" >>",
        flate(cmap),
        resources=b"/Resources << /Font << /F1 5 0 R >> >> ",
    )


ONE_CODE_CMAP = b"begincmap\n1 beginbfchar\n<0001> <0041>\nendbfchar\nendcmap"


def image(width: int, height: int, data: bytes, filters: bytes) -> bytes:
    """A page with one image XObject of the declared size and its (already encoded) data."""
    return simple(
        stream(
            data,
            b"/Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace /DeviceGray"
            b" /BitsPerComponent 8 /Filter " % (width, height) + filters,
        ),
        page=b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] /Resources << /XObject << /Im1 4 0 R >> >> >>",
    )


def jpeg_stating(width: int, height: int) -> bytes:
    """A real 8 x 8 JPEG whose frame header states another size (what Pillow would decode to)."""
    out = io.BytesIO()
    Image.new("L", (8, 8)).save(out, "JPEG")
    data = out.getvalue()
    at = data.index(b"\xff\xc0") + 5  # SOF0: marker, length, precision, then height and width
    return data[:at] + height.to_bytes(2, "big") + width.to_bytes(2, "big") + data[at + 4 :]


def many_annotations(count: int) -> bytes:
    """One page whose /Annots lists one link ``count`` times, compressed into an object stream by pikepdf."""
    pdf = pikepdf.new()
    pdf.add_blank_page(page_size=(200, 200))
    link = pdf.make_indirect(pikepdf.Dictionary(Type=pikepdf.Name.Annot, Subtype=pikepdf.Name.Link, Rect=[0, 0, 9, 9]))
    pdf.pages[0].obj.Annots = pdf.make_indirect(pikepdf.Array([link] * count))
    out = io.BytesIO()
    pdf.save(out, object_stream_mode=pikepdf.ObjectStreamMode.generate, deterministic_id=True)
    return out.getvalue()


def chain(catalog_entry: bytes, link: bytes, length: int, close: bytes = b"") -> bytes:
    """A catalog whose ``catalog_entry`` is a chain of ``length`` nodes (4 on), each ``link`` % the next one."""
    nodes = [link % (5 + n) if n < length - 1 else b"<< >>" for n in range(length)]
    return simple(*nodes, catalog=b"<< /Type /Catalog /Pages 2 0 R " + catalog_entry + b" 4 0 R " + close + b">>")


def zip_archive(comment: bytes = b"") -> bytes:
    """A ZIP holding an executable, the same bytes every time."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr(zipfile.ZipInfo("lease.exe", date_time=(2026, 1, 1, 0, 0, 0)), b"MZ\x90\0" + b"\0" * 60)
        archive.comment = comment
    return out.getvalue()


FLATE_BOMB = zlib.compress(b"\0" * (100 * 1000 * 1000), 9)  # 100 MB of zeros in ~100 KB: over one stream's limit
# The same bomb deflated twice (a filter chain of two): a few hundred bytes at upload, under any intake ceiling.
FLATE_BOMB_TWICE = zlib.compress(FLATE_BOMB, 9)
BOMBLET = zlib.compress(b"\0" * (60 * 1000 * 1000), 9)  # each under the per-stream limit, 9 over the total

# name -> (bytes, the reason code the worker-side gate answers)
HOSTILE: dict[str, tuple[bytes, str]] = {
    "truncated": (pages(2)[:400], "DOCUMENT_MALFORMED"),
    "no_eof_marker": (pages(1).replace(b"%%EOF", b"%%EOX"), "DOCUMENT_MALFORMED"),
    "garbage_body": (b"%PDF-1.7\n" + b"\x00garbage" * 200 + b"\n%%EOF\n", "DOCUMENT_MALFORMED"),
    "xref_offsets_shifted": (simple().replace(b"0000000015 00000 n", b"0000000025 00000 n"), "DOCUMENT_MALFORMED"),
    "startxref_wrong": (simple().replace(b"startxref\n", b"startxref\n9"), "DOCUMENT_MALFORMED"),
    "no_root": (raw_pdf(CATALOG, PAGES, PAGE, trailer=b"/Info 1 0 R"), "DOCUMENT_MALFORMED"),
    "no_kids": (raw_pdf(CATALOG, b"<< /Type /Pages /Count 0 >>"), "DOCUMENT_MALFORMED"),
    "no_pages": (raw_pdf(CATALOG, b"<< /Type /Pages /Kids [] /Count 0 >>"), "DOCUMENT_MALFORMED"),
    # PyMuPDF's test-3143.pdf: viewers keep one of the two values, each its own; a strict reader refuses
    "catalog_key_twice": (
        simple(catalog=CATALOG.replace(b" >>", b" /PageMode /UseNone /PageMode /UseOutlines >>")),
        "DOCUMENT_MALFORMED",
    ),
    "stream_length_lies": (simple(stream(b"q Q", length=9999)), "DOCUMENT_MALFORMED"),
    "header_not_at_start": (b"junk\n" + simple(), "DOCUMENT_NOT_PDF"),
    "encrypted_with_password": (written(encrypted("secret", "AES-128")), "DOCUMENT_ENCRYPTED"),
    # for recipients' certificates (the public-key handler, which pypdf does not implement)
    "encrypted_for_certificates": (
        simple(b"<< /Filter /Adobe.PubSec /SubFilter /adbe.pkcs7.s5 /V 4 /Recipients [<3000>] >>").replace(
            b"/Root 1 0 R", b"/Root 1 0 R /Encrypt 4 0 R /ID [<00> <00>]"
        ),
        "DOCUMENT_ENCRYPTED",
    ),
    # a reference to an object the file does not define: pypdf's writer (split, merge) fails on it
    "dangling_reference": (simple(page=PAGE.replace(b" >>", b" /Thumb 9 0 R >>")), "DOCUMENT_MALFORMED"),
    "page_tree_loop_parent": (
        raw_pdf(
            CATALOG,
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Pages /Parent 2 0 R /Kids [2 0 R] /Count 1 >>",
        ),
        "DOCUMENT_PAGE_TREE_LOOP",
    ),
    "page_tree_loop_self": (
        raw_pdf(CATALOG, b"<< /Type /Pages /Kids [2 0 R 3 0 R] /Count 2 >>", PAGE),
        "DOCUMENT_PAGE_TREE_LOOP",
    ),
    "page_listed_twice": (
        raw_pdf(CATALOG, b"<< /Type /Pages /Kids [3 0 R 3 0 R] /Count 2 >>", PAGE),
        "DOCUMENT_PAGE_TREE_LOOP",
    ),
    "flate_bomb": (simple(stream(FLATE_BOMB_TWICE, b"/Filter [/FlateDecode /FlateDecode]")), "DOCUMENT_LIMIT_EXCEEDED"),
    "flate_bomb_unreferenced_content": (
        simple(
            stream(FLATE_BOMB, b"/Filter /FlateDecode"),
            page=b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] /Contents 4 0 R >>",
        ),
        "DOCUMENT_LIMIT_EXCEEDED",
    ),
    "object_stream_bomb": (
        simple(stream(FLATE_BOMB_TWICE, b"/Type /ObjStm /N 1 /First 4 /Filter [/FlateDecode /FlateDecode]")),
        "DOCUMENT_LIMIT_EXCEEDED",
    ),
    "many_bomblets": (simple(*[stream(BOMBLET, b"/Filter /FlateDecode")] * 9), "DOCUMENT_LIMIT_EXCEEDED"),
    "declared_stream_length_huge": (simple(stream(b"x", length=2_000_000_000)), "DOCUMENT_LIMIT_EXCEEDED"),
    "filter_chain_too_long": (
        simple(stream(b"x", b"/Filter [/AHx /AHx /AHx /AHx /AHx /AHx]")),
        "DOCUMENT_LIMIT_EXCEEDED",
    ),
    "huge_dictionary": (
        simple(b"<< " + b"".join(b"/K%d %d " % (i, i) for i in range(6000)) + b">>"),
        "DOCUMENT_LIMIT_EXCEEDED",
    ),
    "too_many_objects": (simple(*[b"null"] * 50_001), "DOCUMENT_LIMIT_EXCEEDED"),
    "3000_pages": (pages(3000), "DOCUMENT_LIMIT_EXCEEDED"),
    "deep_nesting": (simple(b"[" * 5000 + b"]" * 5000), "DOCUMENT_LIMIT_EXCEEDED"),
    "javascript_open_action": (
        simple(
            b"<< /S /JavaScript /JS (app.alert(1)) >>", catalog=b"<< /Type /Catalog /Pages 2 0 R /OpenAction 4 0 R >>"
        ),
        "DOCUMENT_JAVASCRIPT",
    ),
    "javascript_names_tree": (
        simple(
            b"<< /S /JavaScript /JS 5 0 R >>",
            stream(b"app.alert(1);"),
            catalog=b"<< /Type /Catalog /Pages 2 0 R /Names << /JavaScript << /Names [(a) 4 0 R] >> >> >>",
        ),
        "DOCUMENT_JAVASCRIPT",
    ),
    "javascript_in_annotation": (
        simple(
            b"<< /Type /Annot /Subtype /Link /Rect [0 0 9 9] /A << /S /JavaScript /JS (x) >> >>",
            page=b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] /Annots [4 0 R] >>",
        ),
        "DOCUMENT_JAVASCRIPT",
    ),
    "javascript_unreferenced": (simple(b"<< /S /JavaScript /JS (hidden) >>"), "DOCUMENT_JAVASCRIPT"),
    "launch_action": (
        simple(b"<< /S /Launch /F (cmd.exe) >>", catalog=b"<< /Type /Catalog /Pages 2 0 R /OpenAction 4 0 R >>"),
        "DOCUMENT_LAUNCH_ACTION",
    ),
    "embedded_file": (written(lambda w: w.add_attachment("a.txt", b"hello")), "DOCUMENT_EMBEDDED_FILES"),
    "file_attachment_annotation": (
        simple(
            b"<< /Type /Annot /Subtype /FileAttachment /Rect [0 0 9 9] /FS (a.exe) >>",
            page=b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] /Annots [4 0 R] >>",
        ),
        "DOCUMENT_EMBEDDED_FILES",
    ),
    "xfa_form": (written(_xfa), "DOCUMENT_XFA"),
    # the budgets of documents/budgets.py, each refused before the step it protects
    "cid_widths_100_million_glyphs": (type0_font(b"[0 100000000 500]", ONE_CODE_CMAP), "DOCUMENT_LIMIT_EXCEEDED"),
    "cid_widths_negative_range_then_huge": (
        type0_font(b"[0 -10000000 1 0 9000000 5]", ONE_CODE_CMAP),
        "DOCUMENT_LIMIT_EXCEEDED",
    ),
    "to_unicode_2000_full_ranges": (
        type0_font(b"[1 [500]]", b"2000 beginbfrange\n" + b"<0000> <FFFF> <0041>\n" * 2000 + b"endbfrange"),
        "DOCUMENT_LIMIT_EXCEEDED",
    ),
    "a_million_and_one_operators": (content_page(b"n\n" * 1_000_001), "DOCUMENT_LIMIT_EXCEEDED"),
    "operators_over_two_content_streams": (
        simple(
            flate(b"n\n" * 600_000),
            flate(b"n\n" * 600_000),
            page=b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] /Contents [4 0 R 5 0 R] >>",
        ),
        "DOCUMENT_LIMIT_EXCEEDED",
    ),
    "operators_in_a_form_xobject": (
        simple(flate(b"n\n" * 1_000_001, b"/Type /XObject /Subtype /Form /BBox [0 0 9 9]")),
        "DOCUMENT_LIMIT_EXCEEDED",
    ),
    "one_tj_of_15_million_characters": (
        content_page(
            b"BT /F1 12 Tf (" + b"A" * 15_000_000 + b") Tj ET",
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
            resources=b"/Resources << /Font << /F1 5 0 R >> >> ",
        ),
        "DOCUMENT_LIMIT_EXCEEDED",
    ),
    "text_over_21_strings": (
        content_page(
            b"BT /F1 12 Tf " + (b"(" + b"A" * 50_000 + b") Tj ") * 21 + b"ET",
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
            resources=b"/Resources << /Font << /F1 5 0 R >> >> ",
        ),
        "DOCUMENT_LIMIT_EXCEEDED",
    ),
    "image_declared_200000_square": (
        image(200_000, 200_000, zlib.compress(b"\0" * 64), b"/FlateDecode"),
        "DOCUMENT_LIMIT_EXCEEDED",
    ),
    "jpeg_stating_60000_square": (image(8, 8, jpeg_stating(60_000, 60_000), b"/DCTDecode"), "DOCUMENT_LIMIT_EXCEEDED"),
    "jpeg_stating_10000_square": (
        image(8, 8, jpeg_stating(10_000, 10_000), b"/DCTDecode"),
        "DOCUMENT_LIMIT_EXCEEDED",
    ),  # under Pillow's own bomb limit, over ours
    "jpx_that_is_no_image": (image(8, 8, b"\0\0\0\x0cjP  not really", b"/JPXDecode"), "DOCUMENT_UNSUPPORTED"),
    "jbig2_image": (image(8, 8, b"\0" * 16, b"/JBIG2Decode"), "DOCUMENT_UNSUPPORTED"),  # pypdf: DependencyError
    "page_14400000_points_square": (
        simple(page=b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 14400000 14400000] >>"),
        "DOCUMENT_LIMIT_EXCEEDED",
    ),
    "page_size_by_user_unit": (
        simple(page=b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 1000 1000] /UserUnit 75000 >>"),
        "DOCUMENT_LIMIT_EXCEEDED",
    ),
    "inherited_media_box_too_large": (
        raw_pdf(
            CATALOG,
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 /MediaBox [0 0 20000 20000] >>",
            b"<< /Type /Page /Parent 2 0 R >>",
        ),
        "DOCUMENT_LIMIT_EXCEEDED",
    ),
    "page_tree_count_999999999": (
        raw_pdf(CATALOG, b"<< /Type /Pages /Kids [3 0 R] /Count 999999999 >>", PAGE),
        "DOCUMENT_LIMIT_EXCEEDED",
    ),
    "20000_annotations": (many_annotations(20_000), "DOCUMENT_LIMIT_EXCEEDED"),
    "embedded_files_name_tree_loop": (
        simple(b"<< /Kids [4 0 R] >>", catalog=b"<< /Type /Catalog /Pages 2 0 R /Names << /EmbeddedFiles 4 0 R >> >>"),
        "DOCUMENT_LIMIT_EXCEEDED",
    ),
    "name_tree_40_deep": (chain(b"/Names << /Dests", b"<< /Kids [%d 0 R] >>", 40, b">>"), "DOCUMENT_LIMIT_EXCEEDED"),
    "outline_next_loop": (
        simple(
            b"<< /Type /Outlines /First 5 0 R /Last 5 0 R >>",
            b"<< /Title (a) /Parent 4 0 R /Next 5 0 R >>",
            catalog=b"<< /Type /Catalog /Pages 2 0 R /Outlines 4 0 R >>",
        ),
        "DOCUMENT_LIMIT_EXCEEDED",
    ),
    "outline_40_deep": (chain(b"/Outlines", b"<< /Title (a) /First %d 0 R >>", 40), "DOCUMENT_LIMIT_EXCEEDED"),
}

# Polyglots: a PDF that another format's reader accepts too (each opens as a ZIP holding lease.exe, or is markup or
# an executable to a sniffer), and data after the last %%EOF.
POLYGLOTS: dict[str, bytes] = {
    "zip_appended": simple() + zip_archive(),
    "zip_appended_whose_comment_ends_in_eof": simple() + zip_archive(b"\n%%EOF\n"),
    "zip_in_an_unreferenced_stream": simple(stream(zip_archive())),
    "trailing_garbage": simple() + b"MZ not a pdf",
    "html_after_the_header": raw_pdf(
        CATALOG, PAGES, PAGE, header=b"%PDF-1.7\n%<!DOCTYPE html><script>alert(1)</script>"
    ),
    "zip_local_header_in_a_string": simple(b"(PK\x03\x04 lease.exe)"),
    "elf_in_a_string": simple(b"(\x7fELF\x02\x01\x01)"),
}

# Refused at admission already: the bytes are not a PDF whatever Content-Type says.
NOT_PDF_AT_ADMISSION: dict[str, bytes] = {
    "gif": b"GIF89a" + b"\0" * 64,
    "zip_then_pdf_polyglot": b"PK\x03\x04" + simple(),
    "html": b"<!doctype html><script>alert(1)</script>",
    "empty": b"",
    "header_after_junk": b"junk\n" + simple(),
    "lowercase_magic": simple().replace(b"%PDF-", b"%pdf-", 1),
}
