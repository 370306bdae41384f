"""A peer on 127.0.0.1 that answers every request one byte at a time: of its status line and headers
("headers"), or of its body after complete headers ("body"), one byte every ``interval`` seconds until the client
hangs up or ``limit`` bytes went out. A socket timeout longer than ``interval`` never fires against it."""

from __future__ import annotations

import socket
import threading
import time


class SlowPeer:
    def __init__(self, phase: str, interval: float = 0.1, limit: int = 300):
        self.phase, self.interval, self.limit = phase, interval, limit
        self.sent: list[int] = []  # per connection, bytes trickled before the client hung up (or the limit)
        self.open = 0  # connections being trickled now
        self._lock = threading.Lock()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}/hook"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)  # the request (small): its content does not matter
            if self.phase == "body":
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % self.limit)
                trickled = b"x" * self.limit
            else:
                trickled = b"HTTP/1.1 204 No Content\r\nX-Slow: " + b"a" * self.limit
            with self._lock:
                self.open += 1
            sent = 0
            try:
                while sent < self.limit:
                    conn.sendall(trickled[sent : sent + 1])
                    sent += 1
                    time.sleep(self.interval)
            except OSError:
                pass  # the client hung up
            with self._lock:
                self.open -= 1
                self.sent.append(sent)

    def close(self) -> None:
        self.server.close()
