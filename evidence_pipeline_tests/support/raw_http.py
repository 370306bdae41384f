"""HTTP spoken byte by byte, for what a well-behaved client would never send."""

from __future__ import annotations

import json
import socket


def answer(sock: socket.socket) -> tuple[int, dict, dict]:
    """Status, headers and JSON body of the one response on ``sock`` (the server closes after it)."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, json.loads(body)
