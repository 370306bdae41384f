"""C2SP signed notes (c2sp.org/signed-note), checkpoints (tlog-checkpoint) and Ed25519 cosignatures
(tlog-cosignature, cosignature/v1), with verifier keys ("vkeys") as the Go `note` package writes them:
``<name>+<key id, 8 hex digits>+base64(<signature type> || <public key>)``.

No maintained Python library implements these formats; they are a few lines each, checked in the tests against
the specifications' own examples.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import struct
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import ed25519
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

ED25519 = 0x01  # a note signature over the note text
COSIGNATURE_V1 = 0x04  # a timestamped cosignature over "cosignature/v1\ntime <t>\n" + the note text
DASH = "\u2014"
MAX_NOTE_BYTES = 64 * 1024
MAX_SIGNATURES = 64
SIZE_TYPE = "text/x.tlog.size"  # tlog-witness: the media type of a 409 answer, the witness's size
_NAME = re.compile(r"[^\s+\u2014]+")  # non-empty, no Unicode space, no plus (and no em dash, for our own parsing)


class NoteError(ValueError):
    """A note, a checkpoint, a signature line or a vkey that is not in its format."""


def raw_public(public: ed25519.Ed25519PublicKey) -> bytes:
    return public.public_bytes(Encoding.Raw, PublicFormat.Raw)


def is_key_name(name: str) -> bool:
    return len(name) <= 255 and _NAME.fullmatch(name) is not None


def witness_pairs(text: str) -> tuple[tuple[str, str], ...]:
    """EVIDENCE_WITNESSES: comma-separated ``URL VKEY`` pairs, a witness's submission prefix and its cosignature
    vkey (`evidence witness vkey`)."""
    pairs = []
    for entry in filter(None, (part.strip() for part in text.split(","))):
        url, _, vkey = entry.partition(" ")
        parse_vkey(vkey, COSIGNATURE_V1)
        if not url.startswith(("http://", "https://")):
            raise NoteError("each witness is `URL VKEY`: an http(s) URL, a space, the witness's vkey")
        pairs.append((url, vkey.strip()))
    return tuple(pairs)


def key_id(name: str, kind: int, public: bytes) -> bytes:
    """SHA-256(name || 0x0A || signature type || public key)[:4]."""
    return hashlib.sha256(name.encode() + b"\n" + bytes([kind]) + public).digest()[:4]


@dataclass(frozen=True)
class Verifier:
    """A named public key of one signature type: a log's (ED25519) or a witness's (COSIGNATURE_V1)."""

    name: str
    kind: int
    public: ed25519.Ed25519PublicKey

    @property
    def key_id(self) -> bytes:
        return key_id(self.name, self.kind, raw_public(self.public))

    def vkey(self) -> str:
        material = base64.b64encode(bytes([self.kind]) + raw_public(self.public)).decode()
        return f"{self.name}+{self.key_id.hex()}+{material}"

    def signature_line(self, signature: bytes) -> str:
        return f"{DASH} {self.name} {base64.b64encode(self.key_id + signature).decode()}\n"


def verifier(name: str, kind: int, private: ed25519.Ed25519PrivateKey) -> Verifier:
    if not is_key_name(name):
        raise NoteError("a key name must be non-empty, without spaces or '+'")
    return Verifier(name, kind, private.public_key())


def parse_vkey(text: str, kind: int | None = None) -> Verifier:
    """A vkey of an Ed25519 key (type 0x01 or 0x04; ``kind`` when only one is acceptable)."""
    name, _, rest = text.strip().partition("+")
    hash_hex, _, material = rest.partition("+")  # the base64 key may itself hold '+'
    try:
        raw = base64.b64decode(material, validate=True)
        stated = bytes.fromhex(hash_hex)
    except (ValueError, binascii.Error):
        raise NoteError("not a vkey (name+keyid+base64 key)") from None
    if (
        not is_key_name(name)
        or len(raw) != 33
        or raw[0] not in (ED25519, COSIGNATURE_V1)
        or (kind is not None and raw[0] != kind)
        or len(stated) != 4
    ):
        raise NoteError("not an Ed25519 vkey of the expected signature type")
    found = Verifier(name, raw[0], ed25519.Ed25519PublicKey.from_public_bytes(raw[1:]))
    if found.key_id != stated:
        raise NoteError("the vkey's key id does not match its name and key")
    return found


@dataclass(frozen=True)
class Checkpoint:
    """The first three lines of a tlog-checkpoint (no extension lines: this log writes none)."""

    origin: str
    size: int
    root: bytes

    def text(self) -> str:
        return f"{self.origin}\n{self.size}\n{base64.b64encode(self.root).decode()}\n"


def parse_checkpoint(text: str) -> Checkpoint:
    lines = text.split("\n")
    if len(lines) < 4 or lines[-1] != "" or not lines[0] or not re.fullmatch(r"0|[1-9][0-9]{0,18}", lines[1]):
        raise NoteError("not a checkpoint (origin, size, root hash)")
    try:
        root = base64.b64decode(lines[2], validate=True)
    except binascii.Error:
        root = b""
    if len(root) != 32 or any(line == "" for line in lines[3:-1]):
        raise NoteError("the checkpoint's root hash is not 32 bytes of base64")
    return Checkpoint(lines[0], int(lines[1]), root)


@dataclass(frozen=True)
class Note:
    text: str  # including its final newline
    signatures: tuple[tuple[str, bytes], ...]  # (key name, key id || signature)

    def encode(self) -> bytes:
        lines = "".join(f"{DASH} {name} {base64.b64encode(sig).decode()}\n" for name, sig in self.signatures)
        return (self.text + "\n" + lines).encode()


def parse_note(data: bytes) -> Note:
    """A signed note: text, a blank line, signature lines (the last blank line separates them)."""
    if len(data) > MAX_NOTE_BYTES:
        raise NoteError("the note is too large")
    try:
        decoded = data.decode()
    except UnicodeDecodeError:
        raise NoteError("a note is UTF-8") from None
    if any(ord(c) < 0x20 and c != "\n" for c in decoded):
        raise NoteError("a note holds no control character but newline")
    text, separator, block = decoded.rpartition("\n\n")
    if not separator or not block.endswith("\n"):
        raise NoteError("a note is text, a blank line and signature lines")
    return Note(text + "\n", parse_signature_lines(block))


def parse_signature_lines(block: str) -> tuple[tuple[str, bytes], ...]:
    lines = block.split("\n")
    if lines[-1] != "" or not 1 <= len(lines) - 1 <= MAX_SIGNATURES:
        raise NoteError("signature lines end in a newline; between 1 and 64 of them")
    signatures = []
    for line in lines[:-1]:
        matched = re.fullmatch(rf"{DASH} ([^ ]+) ([A-Za-z0-9+/=]+)", line)
        try:
            raw = base64.b64decode(matched.group(2), validate=True) if matched else b""
        except binascii.Error:
            raw = b""
        if not matched or not _NAME.fullmatch(matched.group(1)) or len(raw) < 5:
            raise NoteError("not a note signature line")
        signatures.append((matched.group(1), raw))
    return tuple(signatures)


def sign_note(text: str, name: str, private: ed25519.Ed25519PrivateKey) -> Note:
    """The note ``text`` signed by a log key (type 0x01)."""
    signer = verifier(name, ED25519, private)
    return Note(text, ((name, signer.key_id + private.sign(text.encode())),))


def cosigned_message(text: str, timestamp: int) -> bytes:
    return f"cosignature/v1\ntime {timestamp}\n{text}".encode()


def cosign(text: str, name: str, private: ed25519.Ed25519PrivateKey, timestamp: int) -> str:
    """A cosignature/v1 signature line on the checkpoint ``text``."""
    signer = verifier(name, COSIGNATURE_V1, private)
    return signer.signature_line(struct.pack(">Q", timestamp) + private.sign(cosigned_message(text, timestamp)))


def verifies(note: Note, key: Verifier) -> bool | None:
    """Whether ``note`` carries a valid signature by ``key`` (None: none by that name and key id; False: one
    that does not verify). A cosignature's timestamp is part of what it signs."""
    found = [sig for name, sig in note.signatures if name == key.name and sig[:4] == key.key_id]
    if not found:
        return None
    for sig in found:
        body = sig[4:]
        if key.kind == COSIGNATURE_V1:
            if len(body) != 72 or struct.unpack(">Q", body[:8])[0] >= 1 << 63:
                return False
            message, body = cosigned_message(note.text, struct.unpack(">Q", body[:8])[0]), body[8:]
        else:
            message = note.text.encode()
        try:
            key.public.verify(body, message)
        except InvalidSignature:
            return False
    return True


def cosigned_at(note: Note, key: Verifier) -> int | None:
    """The timestamp (POSIX seconds) of ``key``'s cosignature on ``note``, None unless one carries it and verifies."""
    if verifies(note, key) is not True:
        return None
    return min(
        int.from_bytes(sig[4:12], "big") for name, sig in note.signatures if name == key.name and sig[:4] == key.key_id
    )
