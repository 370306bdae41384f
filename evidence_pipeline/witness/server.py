"""`evidence witness serve`: the tlog-witness `add-checkpoint` endpoint (c2sp.org/tlog-witness), on Starlette.

The witness trusts a fixed list of log keys (vkeys; each key's name is its log's origin line), keeps its own key
and its own state (state.py), and co-signs a checkpoint only when it extends the newest one it co-signed for that
log, as a consistency proof from that size shows. Answers, as the protocol gives them: 200 and the cosignature
line; 400 a malformed request; 403 no trusted log signature verifies; 404 an unknown origin; 409 (with the
witness's size, ``text/x.tlog.size``) an old size that is not the witness's, or a same-size checkpoint with
another root (a fork); 422 a consistency proof that does not verify. The body of a refusal is one line with a
reason code: no key material, no path.
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric import ed25519
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from evidence_pipeline.config import Settings
from evidence_pipeline.http_guard import guarded, server_config
from evidence_pipeline.ledger import merkle
from evidence_pipeline.signed_note import (
    COSIGNATURE_V1,
    MAX_NOTE_BYTES,
    SIZE_TYPE,
    NoteError,
    Verifier,
    cosign,
    parse_checkpoint,
    parse_note,
    verifier,
    verifies,
)
from evidence_pipeline.witness.state import WitnessState

log = logging.getLogger(__name__)
MAX_PROOF_LINES = 63
MAX_BODY_BYTES = MAX_NOTE_BYTES + 64 * (MAX_PROOF_LINES + 1)


@dataclass(frozen=True)
class Answer:
    status: int
    body: str
    media_type: str = "text/plain"


@dataclass
class Witness:
    name: str
    key: ed25519.Ed25519PrivateKey
    state: WitnessState
    logs: dict[str, list[Verifier]]  # origin -> the log's trusted keys

    @property
    def verifier(self) -> Verifier:
        return verifier(self.name, COSIGNATURE_V1, self.key)

    def add_checkpoint(self, body: bytes) -> Answer:
        try:
            old, proof, note = _parse_request(body)
            checkpoint = parse_checkpoint(note.text)
        except NoteError as error:
            return Answer(400, f"WITNESS_REQUEST_MALFORMED: {error}\n")
        keys = self.logs.get(checkpoint.origin)
        if keys is None:
            return Answer(404, "WITNESS_UNKNOWN_LOG: this witness does not witness that origin\n")
        results = [verifies(note, key) for key in keys]
        if False in results or True not in results:
            return Answer(403, "WITNESS_LOG_SIGNATURE_INVALID: no signature by a trusted log key verifies\n")
        if old > checkpoint.size:
            return Answer(400, "WITNESS_REQUEST_MALFORMED: the old size is above the checkpoint's size\n")
        if old == 0 and proof:
            return Answer(400, "WITNESS_REQUEST_MALFORMED: a proof from size 0 must be empty\n")
        with self.state.locked():  # the check and the update are one step: no rollback by a racing request
            try:
                latest = self.state.latest(checkpoint.origin)
            except NoteError:  # never start over at 0: that would co-sign any fork
                return Answer(500, "WITNESS_STATE_INVALID: this witness's record of the log is unreadable\n")
            known = latest.size if latest else 0
            if old != known:
                return Answer(409, f"{known}\n", SIZE_TYPE)
            if latest is not None and old == checkpoint.size and latest.root != checkpoint.root:
                return Answer(409, f"{known}\n", SIZE_TYPE)  # same size, another root: a fork
            if (
                latest is not None
                and old < checkpoint.size
                and not merkle.verify_consistency(old, checkpoint.size, proof, latest.root, checkpoint.root)
            ):
                return Answer(
                    422, "WITNESS_PROOF_INVALID: the checkpoint does not extend the one this witness co-signed\n"
                )
            self.state.record(checkpoint)
            return Answer(200, cosign(note.text, self.name, self.key, int(time.time())))


def _parse_request(body: bytes):
    """(old size, consistency proof, signed note) of an add-checkpoint body."""
    header, separator, rest = body.partition(b"\n\n")
    lines = header.split(b"\n")
    matched = re.fullmatch(rb"old (0|[1-9][0-9]{0,18})", lines[0])
    if not separator or not matched or len(lines) - 1 > MAX_PROOF_LINES:
        raise NoteError("the body is `old <size>`, up to 63 proof lines, a blank line and a checkpoint")
    try:
        proof = [base64.b64decode(line, validate=True) for line in lines[1:]]
    except binascii.Error:
        proof = [b""]
    if any(len(h) != 32 for h in proof):
        raise NoteError("a consistency proof line is not one base64 SHA-256 hash")
    return int(matched.group(1)), proof, parse_note(rest)


def build_app(witness: Witness, settings: Settings):
    """The witness's one route behind the guard every server of ours shares (http_guard.py)."""

    async def add_checkpoint(request: Request) -> Response:
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_BODY_BYTES:
                return PlainTextResponse("WITNESS_REQUEST_MALFORMED: the body is too large\n", 400)
        answer = witness.add_checkpoint(bytes(body))
        # the header as the protocol spells it: no charset parameter appended to text/x.tlog.size
        return Response(answer.body, answer.status, headers={"content-type": answer.media_type})

    return guarded([Route("/add-checkpoint", add_checkpoint, methods=["POST"])], settings, log)


def serve(witness: Witness, settings: Settings, host: str, port: int) -> None:
    """One process (the state's lock would also hold across several), behind the guarded protocol: a slow or huge
    request is refused on its own clock, and a new connection at the limit evicts the one waiting longest for its
    headers, so slow clients cannot turn a real checkpoint away."""
    import uvicorn

    uvicorn.Server(
        server_config(
            build_app(witness, settings),
            settings,
            host=host,
            port=port,
            log_level="warning",
            lifespan="off",
            timeout_keep_alive=5,
        )
    ).run()


def load_witness(name: str, key_path: Path, state: Path, log_vkeys: list[str]) -> Witness:
    from evidence_pipeline.signed_note import ED25519, parse_vkey
    from evidence_pipeline.signing.keys import load_private_ed25519

    logs: dict[str, list[Verifier]] = {}
    for text in log_vkeys:
        key = parse_vkey(text, ED25519)
        logs.setdefault(key.name, []).append(key)
    return Witness(name, load_private_ed25519(key_path, "the witness key"), WitnessState(state), logs)
