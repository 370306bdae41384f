"""The hex string reader installed in pyHanko (signing/hexstrings.py) parses, rejects and positions the stream
exactly as pyHanko's own reader, on any input, across read boundaries."""

from io import BytesIO

import pyhanko.pdf_utils.generic
from hypothesis import given, settings
from hypothesis import strategies as st

from evidence_pipeline.signing import hexstrings, pades

# Hex digits, PDF whitespace, a comment's start and end, bytes that have no place in a hex string, and the ">".
_BYTES = st.sampled_from([*b"0123456789abcdefABCDEF", *b" \n\r\t\f\x00", *b"%>gZ<(", 0xFF])


def _outcome(reader, data: bytes, **options):
    stream = BytesIO(data)
    try:
        value = reader(stream, **options)
    except Exception as error:  # noqa: BLE001 (the comparison is the point: which error, with which message)
        return type(error), str(error)
    return type(value), value.original_bytes, stream.tell()


@settings(max_examples=400, deadline=None)
@given(
    body=st.lists(_BYTES, max_size=40).map(bytes),
    first_read=st.integers(1, 9),
    trailer=st.sampled_from([b"", b">", b"> /Length 3 >>"]),
)
def test_every_input_reads_as_pyhankos_reader_reads_it(body, first_read, trailer):
    data = b"<" + body + trailer
    assert _outcome(hexstrings.read_hex_string_from_stream, data, first_read=first_read) == _outcome(
        hexstrings._PYHANKO_READER, data
    )


def test_a_signature_sized_string_spanning_many_reads():
    contents = bytes(range(256)) * 40 + b"\x00" * 6000  # a CMS blob and its zero padding
    data = b"<" + contents.hex().encode() + b">\n/Type /Sig"
    for first_read in (hexstrings.FIRST_READ, 1, 4096, hexstrings.MAX_READ):
        stream = BytesIO(data)
        assert hexstrings.read_hex_string_from_stream(stream, first_read).original_bytes == contents
        assert stream.read() == b"\n/Type /Sig"


def test_pyhankos_parser_uses_it_once_pades_is_imported():
    assert pades.FIELD_NAME
    assert pyhanko.pdf_utils.generic.read_hex_string_from_stream is hexstrings.read_hex_string_from_stream
