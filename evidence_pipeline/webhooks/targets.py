"""Where a webhook may go. A tenant names the URL, so the service must not become its way into internal hosts: the
host is resolved at every attempt and every address it resolves to must lie in EVIDENCE_WEBHOOK_ALLOWED_NETWORKS
(loopback only by default); the attempt then connects to one of exactly those addresses (sender.py), so a name
that resolves elsewhere between the check and the connection changes nothing. Redirects are never followed."""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.outbound import Target, resolve

MAX_URL = 2048


def parse_url(url: str) -> Target:
    """The parts of a webhook URL: http or https, a host, no user info or fragment; WEBHOOK_URL_INVALID otherwise."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        parts = port = None
    if (
        parts is None
        or len(url) > MAX_URL
        or not url.isprintable()
        or " " in url
        or parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.username is not None
        or parts.password is not None
        or parts.fragment
    ):
        raise EvidenceError(
            ReasonCode.WEBHOOK_URL_INVALID, "a webhook URL is http(s)://host[:port]/path, without user info or fragment"
        )
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80), path)


def allowed_addresses(target: Target, networks: tuple[str, ...], timeout: float) -> list[str]:
    """Every address ``target``'s host resolves to, when all lie in ``networks``; WEBHOOK_HOST_REFUSED when one
    does not, WEBHOOK_HOST_UNRESOLVED (retryable) when the name does not resolve within ``timeout``."""
    try:
        found = resolve(target.host, target.port, timeout)
    except (socket.gaierror, UnicodeError, TimeoutError):
        raise EvidenceError(ReasonCode.WEBHOOK_HOST_UNRESOLVED, "the webhook's host name did not resolve") from None
    addresses = list(dict.fromkeys(info[4][0] for info in found))
    allowed = [ipaddress.ip_network(network) for network in networks]
    for address in addresses:
        ip = ipaddress.ip_address(address.split("%")[0])
        ip = ip.ipv4_mapped or ip if isinstance(ip, ipaddress.IPv6Address) else ip
        if not any(ip.version == network.version and ip in network for network in allowed):
            raise EvidenceError(
                ReasonCode.WEBHOOK_HOST_REFUSED,
                "the webhook's host resolves to an address outside EVIDENCE_WEBHOOK_ALLOWED_NETWORKS",
            )
    return addresses
