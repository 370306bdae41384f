"""The log's side of tlog-witness: submit a signed checkpoint to a witness with a consistency proof from the size
the witness last co-signed, and catch up when the witness says (409, ``text/x.tlog.size``) that its size is another.
Each submission is over by its timeout whatever the witness does (outbound.py).
"""

from __future__ import annotations

import base64
import http.client
from collections.abc import Callable
from dataclasses import dataclass

from evidence_pipeline import outbound
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.signed_note import (
    COSIGNATURE_V1,
    MAX_NOTE_BYTES,
    SIZE_TYPE,
    Note,
    NoteError,
    Verifier,
    parse_signature_lines,
    parse_vkey,
    verifies,
)


@dataclass(frozen=True)
class Endpoint:
    """A configured witness: its submission prefix and its cosigning key."""

    url: str
    key: Verifier


def endpoints(pairs: tuple[tuple[str, str], ...]) -> tuple[Endpoint, ...]:
    """The configured witnesses (EVIDENCE_WITNESSES, already checked by Settings) as endpoints."""
    return tuple(Endpoint(url.rstrip("/"), parse_vkey(vkey, COSIGNATURE_V1)) for url, vkey in pairs)


def submit(
    endpoint: Endpoint, note: Note, *, size: int, old: int, proof: Callable[[int], list[bytes]], timeout: float = 10.0
) -> str:
    """The witness's verified cosignature line on ``note`` (a checkpoint of ``size``), submitted as extending
    ``old``, with ``proof(old)`` (called only for 0 < old < size); on 409, once more from the size the witness
    answers. WITNESS_UNAVAILABLE or WITNESS_REFUSED."""
    for _ in range(2):
        hashes = proof(old) if 0 < old < size else []  # from size 0, or to the same size: no proof
        lines = "".join(base64.b64encode(h).decode() + "\n" for h in hashes)
        body = f"old {old}\n{lines}\n".encode() + note.encode()
        try:
            response = outbound.request(
                "POST",
                outbound.target(f"{endpoint.url}/add-checkpoint"),
                headers={},
                body=body,
                timeout=timeout,
                max_body=MAX_NOTE_BYTES,
            )
        except (OSError, http.client.HTTPException) as error:
            raise EvidenceError(
                ReasonCode.WITNESS_UNAVAILABLE, f"witness {endpoint.key.name} did not answer ({type(error).__name__})"
            ) from None
        text = response.body.decode("utf-8", "replace")
        known = _known_size(response.status, response.content_type, text)
        if known is not None and known != old and known <= size:
            old = known  # the witness co-signed another size than we recorded: prove from its size
            continue
        if response.status != 200:
            raise EvidenceError(
                ReasonCode.WITNESS_REFUSED,
                f"witness {endpoint.key.name} answered {response.status}: {text[:200].strip()}",
            )
        return _cosignature(endpoint, note, text)
    raise EvidenceError(ReasonCode.WITNESS_REFUSED, f"witness {endpoint.key.name} keeps answering 409")


def _known_size(status: int, content_type: str, text: str) -> int | None:
    if status != 409 or content_type.split(";")[0] != SIZE_TYPE:
        return None
    return int(text) if text.endswith("\n") and text[:-1].isdigit() and len(text) < 21 else None


def _cosignature(endpoint: Endpoint, note: Note, text: str) -> str:
    """The one line of the answer that is the witness's valid cosignature (others are ignored, as the spec says)."""
    try:
        signatures = parse_signature_lines(text)
    except NoteError:
        signatures = ()
    for name, signature in signatures:
        if verifies(Note(note.text, ((name, signature),)), endpoint.key):
            return f"\u2014 {name} {base64.b64encode(signature).decode()}\n"
    raise EvidenceError(ReasonCode.WITNESS_REFUSED, f"witness {endpoint.key.name} answered no valid cosignature")
