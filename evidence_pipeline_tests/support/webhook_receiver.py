"""A tenant's webhook receiver on 127.0.0.1, written from the Standard Webhooks specification with its own library
(not from this code): it verifies each request, answers 500 to the first ``fail_first`` attempts of each message,
and accepts a message once, deduplicating on `webhook-id` as the specification asks (a message sent again after
it was accepted is answered 204 and counted in ``duplicates``)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError


class Receiver:
    def __init__(self, secret: str = "", fail_first: int = 0):
        self.secrets, self.fail_first = [secret] if secret else [], fail_first
        self.attempts: Counter = Counter()  # webhook-id -> requests that verified
        self.accepted: list[tuple[str, dict]] = []  # (webhook-id, body), once per message
        self.duplicates: Counter = Counter()  # webhook-id -> requests after it was accepted
        self.refused = 0  # requests whose signature did not verify
        self.before_accepting: Callable[[str], None] | None = None  # called before a message is first accepted
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                status = receiver.answer(body, dict(self.headers))
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except OSError:
                    pass  # the sender is gone (a test killed it)

            def log_message(self, *_args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/evidence?v=1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, body: bytes, headers: dict) -> int:
        verified = None
        for secret in self.secrets:
            try:
                verified = Webhook(secret).verify(body, headers)
                break
            except WebhookVerificationError:
                continue
        with self._lock:
            if verified is None:
                self.refused += 1
                return 400
            message_id = headers["webhook-id"]
            self.attempts[message_id] += 1
            if self.attempts[message_id] <= self.fail_first:
                return 500
            if any(seen == message_id for seen, _ in self.accepted):
                self.duplicates[message_id] += 1
                return 204
            if self.before_accepting is not None:
                self.before_accepting(message_id)
            self.accepted.append((message_id, verified))
            return 204

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
