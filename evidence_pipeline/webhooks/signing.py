"""Standard Webhooks signatures: ``webhook-signature`` is ``v1,<base64 HMAC-SHA256(secret, "id.timestamp.body")>``,
one per valid secret, space-separated, so a receiver holding either secret of a rotation verifies the message.
A secret is ``whsec_`` + the base64 of 32 random bytes; the HMAC key is those bytes."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets as random_bytes

PREFIX = "whsec_"
_SECRET_BYTES = 32  # the specification asks for 24 to 64


def new_secret() -> str:
    return PREFIX + base64.b64encode(random_bytes.token_bytes(_SECRET_BYTES)).decode("ascii")


def secret_id(secret: str) -> str:
    """What events and listings name a secret by: a prefix of its SHA-256, which reveals nothing of it."""
    return "sec_" + hashlib.sha256(secret.encode("ascii")).hexdigest()[:16]


def signature(secret: str, delivery_id: str, timestamp: int, body: bytes) -> str:
    key = base64.b64decode(secret.removeprefix(PREFIX))
    signed = f"{delivery_id}.{timestamp}.".encode("ascii") + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode("ascii")


def headers(secrets: list[str], delivery_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three Standard Webhooks headers of one attempt, signed with every secret in ``secrets``."""
    return {
        "webhook-id": delivery_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(signature(secret, delivery_id, timestamp, body) for secret in secrets),
    }
