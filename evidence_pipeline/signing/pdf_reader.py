"""pyHanko's reader of a PDF: the one every reading and signing of a file uses (the gate, the signature check,
contract review, the approval signature and verification), so a document the gate accepts is one they all read."""

from __future__ import annotations

from typing import BinaryIO

from pyhanko.pdf_utils.misc import PdfStrictReadError
from pyhanko.pdf_utils.reader import PdfFileReader

from evidence_pipeline.store import readable


class Reader(PdfFileReader):
    """pyHanko's reader, knowing whether its cross-reference sections were read leniently (see ``open_pdf``)."""

    lenient_xref = False


def open_pdf(pdf: bytes | BinaryIO) -> Reader:
    """pyHanko's reader of a PDF, the one every reading and signing of a file uses (gate, signature check, review,
    approval and verification). Strict, except for the cross-reference sections that only pyHanko's strict rules
    refuse and every viewer reads (a free-list head of generation 65536 as MuPDF and Word write, space-padded or
    out-of-order sections, orphaned generations, trailing bytes in an xref stream): those are read leniently, and
    the reader is then strict again, so every object is still parsed strictly and strictness's rules for signing
    and validation hold (no hybrid-reference files). The signature check says where pyHanko's difference analysis
    ran over leniently read sections (signature_check.py)."""
    stream = readable(pdf)
    stream.seek(0)
    try:
        return Reader(stream, strict=True)
    except PdfStrictReadError:
        stream.seek(0)
        reader = Reader(stream, strict=False)  # reads the cross-reference sections and the trailer, no object yet
        reader.strict, reader.lenient_xref = True, True
        return reader
