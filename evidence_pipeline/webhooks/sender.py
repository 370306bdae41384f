"""One HTTP attempt at a webhook: a POST to an address that targets.py checked, never a redirect followed, over by
its deadline whatever the receiver does (outbound.py).

The connection goes to that address (the host name is only the Host header and, for https, the name the
certificate must carry), so the address checked is the address called."""

from __future__ import annotations

import http.client

from evidence_pipeline import outbound
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.outbound import Target


def post(target: Target, address: str, headers: dict[str, str], body: bytes, timeout: float) -> int:
    """POST ``body`` to ``target`` at ``address``; the status answered (the answer's body is not read beyond a
    little). WEBHOOK_UNREACHABLE when the connection fails or the whole attempt (connect, send, the answer) takes
    longer than ``timeout``: a receiver should answer at once and work later."""
    host = target.host if ":" not in target.host else f"[{target.host}]"
    default_port = 443 if target.scheme == "https" else 80
    try:
        return outbound.request(
            "POST",
            target,
            headers={
                **headers,
                "Host": host if target.port == default_port else f"{host}:{target.port}",
                "Content-Type": "application/json",
                "User-Agent": "evidence-pipeline-webhooks/1",
            },
            body=body,
            timeout=timeout,
            address=address,
        ).status
    except (OSError, http.client.HTTPException) as error:
        raise EvidenceError(
            ReasonCode.WEBHOOK_UNREACHABLE, f"the webhook receiver did not answer ({type(error).__name__})"
        ) from None
