"""What a PDF's own syntax can carry as text, for the redaction's second pass (redaction_check.py).

``SPEC_NAMES``: every name the PDF specification defines as a key or a name value (pdf_names.txt, generated from the
PDF Association's Arlington PDF model by evidence_pipeline_tests/support/pdf_names.py, its commit in the file's
first line). Such a name is in any PDF and says nothing of a document; a name the file coins (a resource name, a
custom key, a font's name) is the file's own and may carry a value.

``comments``: a content stream's comments, which its parser drops.

``font_strings`` and ``icc_strings``: the text a font program or an ICC profile carries, read from its tables (a
TrueType or OpenType font's name table, a CFF font's names and strings, a Type 1 font's clear-text strings and
font name; a profile's description, copyright and other text tags), never its glyph outlines, hints, curves or
tables of numbers. None when the data is not what its kind says (the caller then searches its bytes).
``font_spans`` says where each of a font's strings lies, for the first pass to blank those that hold a value.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

SPEC_NAMES = frozenset(
    line for line in (Path(__file__).with_name("pdf_names.txt").read_text().splitlines()) if not line.startswith("#")
)
_LITERAL = re.compile(rb"\(((?:[^()\\]|\\.)*)\)", re.DOTALL)  # a PostScript string (unnested)
# the tokens of a content stream that may hold a "%": strings (nested once, escapes), hex strings, comments
_TOKENS = re.compile(rb"\((?:[^()\\]|\\.|\((?:[^()\\]|\\.)*\))*\)|<[0-9A-Fa-f\s]*>|%[^\r\n]*", re.DOTALL)
_FONT_NAME = re.compile(rb"/(?:FontName|FullName|FamilyName)\s*/([^\s/\[\](){}<>%]+)")


def comments(data: bytes) -> list[bytes]:
    """A content stream's comments: text the file carries that no reader draws (pypdf's parser drops them)."""
    return [token for token in _TOKENS.findall(data) if token[:1] == b"%"] if b"%" in data else []


def font_strings(stream, data: bytes) -> list[str] | None:
    """The names and strings of a font program (/FontFile, /FontFile2 or /FontFile3)."""
    spans = font_spans(stream, data)
    return None if spans is None else [data[start:end].decode(codec, "replace") for start, end, codec in spans]


def font_spans(stream, data: bytes) -> list[tuple[int, int, str]] | None:
    """Where each of a font program's names and strings lies in its data, and how it is encoded: (start, end,
    codec). The first pass blanks those that hold a value in place (redact.py), so the program keeps its layout."""
    try:
        if data[:4] in (b"\x00\x01\x00\x00", b"true", b"OTTO", b"typ1"):
            return _sfnt_spans(data)
        if stream.get("/Subtype") in ("/Type1C", "/CIDFontType0C"):
            return _cff_spans(data)
        if data[:2] == b"%!":  # Type 1: the clear-text part, before the encrypted glyph programs
            clear = data[: int(stream.get("/Length1", 0))] or data.split(b"eexec")[0]
            found = [*_LITERAL.finditer(clear), *_FONT_NAME.finditer(clear)]
            return [(*match.span(1), "latin-1") for match in found]
    except (struct.error, IndexError, ValueError):
        pass
    return None


def _sfnt_spans(data: bytes) -> list[tuple[int, int, str]]:
    (count,) = struct.unpack_from(">H", data, 4)
    tables = {}
    for i in range(count):
        tag, _, offset, length = struct.unpack_from(">4sIII", data, 12 + 16 * i)
        tables[tag] = (offset, length)
    spans = _cff_spans(data, *tables[b"CFF "]) if b"CFF " in tables else []
    if b"name" in tables:
        at, length = tables[b"name"]
        _, records, start = struct.unpack_from(">HHH", data, at)
        for i in range(records):
            platform, _, _, _, size, offset = struct.unpack_from(">HHHHHH", data, at + 6 + 12 * i)
            first = min(at + start + offset, at + length)  # a record past its table's end holds what the table does
            spans.append((first, min(first + size, at + length), "utf-16-be" if platform in (0, 3) else "latin-1"))
    return spans


def _cff_spans(data: bytes, at: int = 0, length: int | None = None) -> list[tuple[int, int, str]]:
    """A CFF font's Name INDEX (its font names) and String INDEX (its notice, full and family names, weight,
    and glyph names beyond the standard ones), in the CFF data that starts at ``at``."""
    cff = data[at : at + length] if length is not None else data
    if cff[0] != 1:
        raise ValueError("not CFF version 1")
    names, position = _index(cff, cff[2])
    _, position = _index(cff, position)  # the Top DICT: numbers and string ids only
    strings, _ = _index(cff, position)
    return [(at + start, at + end, "latin-1") for start, end in names + strings]


def _index(data: bytes, position: int) -> tuple[list[tuple[int, int]], int]:
    """Where each item of the CFF INDEX at ``position`` lies, and where the INDEX ends."""
    (count,) = struct.unpack_from(">H", data, position)
    if count == 0:
        return [], position + 2
    size = data[position + 2]
    offsets = [
        int.from_bytes(data[position + 3 + i * size : position + 3 + (i + 1) * size], "big") for i in range(count + 1)
    ]
    base = position + 2 + (count + 1) * size  # offsets count from 1
    if offsets != sorted(offsets) or base + offsets[-1] > len(data):
        raise ValueError("a CFF INDEX out of bounds")
    return [(base + offsets[i], base + offsets[i + 1]) for i in range(count)], base + offsets[-1]


def icc_strings(stream, data: bytes) -> list[str] | None:
    """An ICC profile's text tags, whatever their signature: ``desc`` (ICC v2), ``text`` and ``mluc`` (v4)."""
    try:
        if data[36:40] != b"acsp":
            return None
        (count,) = struct.unpack_from(">I", data, 128)
        strings = []
        for i in range(count):
            _, offset, size = struct.unpack_from(">4sII", data, 132 + 12 * i)
            tag = data[offset : offset + size]
            if tag[:4] == b"desc":
                (length,) = struct.unpack_from(">I", tag, 8)
                strings.append(tag[12 : 12 + length].decode("latin-1"))
            elif tag[:4] == b"text":
                strings.append(tag[8:].decode("latin-1"))
            elif tag[:4] == b"mluc":
                records, record_size = struct.unpack_from(">II", tag, 8)
                for j in range(records):
                    length, at = struct.unpack_from(">II", tag, 16 + j * record_size + 4)
                    strings.append(tag[at : at + length].decode("utf-16-be", "replace"))
        return strings
    except (struct.error, IndexError, ValueError):
        return None
