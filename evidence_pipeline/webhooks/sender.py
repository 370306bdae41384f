"""One HTTP attempt at a webhook: a POST to an address that targets.py checked, never a redirect followed.

The connection goes to that address (the host name is only the Host header and, for https, the name the
certificate must carry), so the address checked is the address called."""

from __future__ import annotations

import http.client
import socket
import ssl

from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.webhooks.targets import Target


class _PinnedHTTPS(http.client.HTTPSConnection):
    def __init__(self, address: str, target: Target, timeout: float):
        super().__init__(target.host, target.port, timeout=timeout, context=ssl.create_default_context())
        self._address = address

    def connect(self) -> None:
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)


def post(target: Target, address: str, headers: dict[str, str], body: bytes, timeout: float) -> int:
    """POST ``body`` to ``target`` at ``address``; the status answered (the answer's body is not read beyond a
    little). WEBHOOK_UNREACHABLE when the connection fails or takes longer than ``timeout`` (to connect, or for
    any read of the answer: a receiver should answer at once and work later)."""
    if target.scheme == "https":
        connection = _PinnedHTTPS(address, target, timeout)
    else:
        connection = http.client.HTTPConnection(address, target.port, timeout=timeout)
    host = target.host if ":" not in target.host else f"[{target.host}]"
    default_port = 443 if target.scheme == "https" else 80
    try:
        connection.request("POST", target.path, body=body, headers={
            **headers, "Host": host if target.port == default_port else f"{host}:{target.port}",
            "Content-Type": "application/json", "User-Agent": "evidence-pipeline-webhooks/1",
        })
        answer = connection.getresponse()
        answer.read(4096)
        return answer.status
    except (OSError, http.client.HTTPException) as error:
        raise EvidenceError(ReasonCode.WEBHOOK_UNREACHABLE,
                            f"the webhook receiver did not answer ({type(error).__name__})") from None
    finally:
        connection.close()
