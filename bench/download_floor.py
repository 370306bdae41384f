"""The floor of bench/downloads.py: the API's durable work for one output, without the app.

    python bench/download_floor.py FD PATH SHA256 SIZE      (started by bench/downloads.py, never by hand)

A blocking socket server on a listening socket the bench hands over (descriptor FD, so there is no race to bind):
for every GET on a kept-alive connection it opens the archived file, reads it CHUNK by CHUNK, hashes each chunk,
holds the last one back until the digest matches, and sends the bytes with the same headers the API sends. No
token or job lookup, no framework, no event loop: what is left is the machine's part of a download (the disk, two
hashes on the two sides and a loopback copy), the figure the API is measured against.
"""

from __future__ import annotations

import base64
import hashlib
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from evidence_pipeline.store import CHUNK  # noqa: E402


def headers_of(sha256: str, size: int, name: str) -> bytes:
    """The status line and headers of the API's answer to GET /v1/jobs/{id}/outputs/{name} (downloads.get_output)."""
    repr_digest = base64.b64encode(bytes.fromhex(sha256)).decode()
    return (
        f"HTTP/1.1 200 OK\r\netag: \"{sha256}\"\r\ncache-control: private, no-cache\r\n"
        f"content-length: {size}\r\nrepr-digest: sha-256=:{repr_digest}:\r\n"
        f"content-disposition: attachment; filename=\"{name}\"\r\nx-content-type-options: nosniff\r\n"
        f"content-type: application/pdf\r\n\r\n"
    ).encode()


def send_verified(conn: socket.socket, path: Path, sha256: str, size: int) -> None:
    """The file's bytes, each chunk hashed before it is sent, the last one sent only once the digest matched."""
    digest, held, read = hashlib.sha256(), b"", 0
    with path.open("rb") as file:
        while chunk := file.read(CHUNK):
            if held:
                conn.sendall(held)
            digest.update(chunk)
            held, read = chunk, read + len(chunk)
    if digest.hexdigest() != sha256 or read != size:
        raise SystemExit("the archived file does not match its digest")
    conn.sendall(held)


def serve(listener: socket.socket, path: Path, sha256: str, size: int) -> None:
    head = headers_of(sha256, size, path.name)
    while True:
        conn, _ = listener.accept()
        with conn:
            request = b""
            while data := conn.recv(4096):
                request += data
                while b"\r\n\r\n" in request:  # a GET has no body: each blank line ends a request
                    _, request = request.split(b"\r\n\r\n", 1)
                    conn.sendall(head)
                    send_verified(conn, path, sha256, size)


if __name__ == "__main__":
    fd, path, sha256, size = sys.argv[1:]
    serve(socket.socket(fileno=int(fd)), Path(path), sha256, int(size))
