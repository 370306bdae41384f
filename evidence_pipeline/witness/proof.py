"""C2SP transparency log proofs (c2sp.org/tlog-proof@v1, files ``.tlog-proof``): an entry's index, its RFC 6962
inclusion proof (base64 hashes, the leaf's sibling first) and the co-signed checkpoint it reaches, verbatim:

    c2sp.org/tlog-proof@v1
    [extra <base64>]
    index <N>
    <base64 hash>…

    <the checkpoint note, its signature lines included>
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

from evidence_pipeline.ledger import merkle
from evidence_pipeline.signed_note import MAX_NOTE_BYTES, Checkpoint, Note, NoteError, parse_checkpoint, parse_note

HEADER = "c2sp.org/tlog-proof@v1"
MAX_HASHES = 64  # a tree of 2^64 entries needs no more
MAX_PROOF_BYTES = MAX_NOTE_BYTES + 4096


@dataclass(frozen=True)
class TlogProof:
    index: int
    hashes: tuple[bytes, ...]
    checkpoint: Note
    extra: bytes | None = None

    def encode(self) -> bytes:
        lines = [
            HEADER,
            *([f"extra {base64.b64encode(self.extra).decode()}"] if self.extra is not None else []),
            f"index {self.index}",
            *(base64.b64encode(h).decode() for h in self.hashes),
        ]
        return ("\n".join(lines) + "\n\n").encode() + self.checkpoint.encode()

    def reaches(self, leaf: bytes) -> Checkpoint:
        """The checkpoint whose root the proof reaches from ``leaf`` (an RFC 9162 leaf hash); NoteError if not."""
        body = parse_checkpoint(self.checkpoint.text)
        if not merkle.verify_inclusion(self.index, body.size, leaf, list(self.hashes), body.root):
            raise NoteError(f"the inclusion proof of entry {self.index} does not reach the checkpoint's root")
        return body


def parse_tlog_proof(data: bytes) -> TlogProof:
    """A proof in the format above; NoteError when it is not one (its signatures are not checked here)."""
    if len(data) > MAX_PROOF_BYTES:
        raise NoteError("the proof is too large")
    head, separator, note = data.partition(b"\n\n")
    try:
        lines = head.decode("ascii").split("\n")
    except UnicodeDecodeError:
        lines = []
    if not separator or not lines or lines[0] != HEADER:
        raise NoteError(f"not a {HEADER} proof")
    extra = None
    position = 1
    if len(lines) > 1 and lines[1].startswith("extra "):
        extra, position = _base64(lines[1].removeprefix("extra ")), 2
    index = re.fullmatch(r"index (0|[1-9][0-9]{0,18})", lines[position]) if len(lines) > position else None
    hashes = tuple(_base64(line) for line in lines[position + 1 :])
    if index is None or len(hashes) > MAX_HASHES or any(len(h) != 32 for h in hashes):
        raise NoteError("a proof states `index N`, then its inclusion proof: one base64 SHA-256 hash a line")
    return TlogProof(int(index.group(1)), hashes, parse_note(note), extra)


def _base64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        raise NoteError("not base64") from None
