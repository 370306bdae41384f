"""Hostile and well-formed PDFs built in the tests, byte by byte where a library would refuse to write them."""

from __future__ import annotations

import io
import zlib

from pypdf import PdfWriter
from pypdf.generic import ArrayObject, DictionaryObject, NameObject, TextStringObject

CATALOG = b"<< /Type /Catalog /Pages 2 0 R >>"
PAGES = b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>"
PAGE = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] >>"


def raw_pdf(*objects: bytes, trailer: bytes = b"/Root 1 0 R", header: bytes = b"%PDF-1.7") -> bytes:
    """Objects 1..n with a correct cross-reference table (so only the defect a test plants is there)."""
    out = bytearray(header + b"\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d " % (len(objects) + 1) + trailer + b" >>\nstartxref\n%d\n" % xref + b"%%EOF\n"
    return bytes(out)


def stream(data: bytes, extra: bytes = b"", length: int | None = None) -> bytes:
    return (
        b"<< /Length %d " % (len(data) if length is None else length) + extra + b" >>\nstream\n" + data + b"\nendstream"
    )


def simple(*extra_objects: bytes, catalog: bytes = CATALOG, page: bytes = PAGE) -> bytes:
    return raw_pdf(catalog, PAGES, page, *extra_objects)


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


def _encrypted(user: str, algorithm: str):
    return lambda writer: writer.encrypt(user_password=user, owner_password="owner", algorithm=algorithm)


def _xfa(writer: PdfWriter) -> None:
    writer._root_object[NameObject("/AcroForm")] = DictionaryObject(
        {NameObject("/Fields"): ArrayObject(), NameObject("/XFA"): TextStringObject("<xdp:xdp/>")}
    )


FLATE_BOMB = zlib.compress(b"\0" * (40 * 1024 * 1024), 9)  # 40 MiB of zeros in ~40 KiB
BOMBLET = zlib.compress(b"\0" * (12 * 1024 * 1024), 9)  # each under the per-stream limit

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
    "stream_length_lies": (simple(stream(b"q Q", length=9999)), "DOCUMENT_MALFORMED"),
    "header_not_at_start": (b"junk\n" + simple(), "DOCUMENT_NOT_PDF"),
    "encrypted_empty_user_password_rc4": (written(_encrypted("", "RC4-128")), "DOCUMENT_ENCRYPTED"),
    "encrypted_empty_user_password_aes256": (written(_encrypted("", "AES-256")), "DOCUMENT_ENCRYPTED"),
    "encrypted_with_password": (written(_encrypted("secret", "AES-128")), "DOCUMENT_ENCRYPTED"),
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
    "flate_bomb": (simple(stream(FLATE_BOMB, b"/Filter /FlateDecode")), "DOCUMENT_LIMIT_EXCEEDED"),
    "flate_bomb_unreferenced_content": (
        simple(
            stream(FLATE_BOMB, b"/Filter /FlateDecode"),
            page=b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] /Contents 4 0 R >>",
        ),
        "DOCUMENT_LIMIT_EXCEEDED",
    ),
    "object_stream_bomb": (
        simple(stream(FLATE_BOMB, b"/Type /ObjStm /N 1 /First 4 /Filter /FlateDecode")),
        "DOCUMENT_LIMIT_EXCEEDED",
    ),
    "many_bomblets": (simple(*[stream(BOMBLET, b"/Filter /FlateDecode")] * 6), "DOCUMENT_LIMIT_EXCEEDED"),
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
