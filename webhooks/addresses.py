"""Which webhook URLs the worker may call: http(s), and — unless ENGRAM_WEBHOOKS_ALLOW_PRIVATE — only
hosts whose every address is a public one, checked when a subscription is saved and again
before each attempt (a host name may resolve elsewhere later)."""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings

from engram_site.exceptions import DomainError


class InvalidUrl(DomainError):
    code = "invalid_url"


def _refused_address(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # an IPv6 zone index is not part of the address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return not ip.is_global or ip.is_multicast


def url_check(url: str, *, resolve: bool = True) -> None:
    """Raise InvalidUrl unless ``url`` is http(s) with a host and — unless
    ENGRAM_WEBHOOKS_ALLOW_PRIVATE — every address the host resolves to is a public one."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise InvalidUrl("Not a valid URL.") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidUrl("A webhook URL must be http:// or https:// with a host name.")
    if parts.username or parts.password:
        raise InvalidUrl("A webhook URL must not carry credentials; sign with the secret instead.")
    if settings.ENGRAM_WEBHOOKS_ALLOW_PRIVATE or not resolve:
        return
    try:
        infos = socket.getaddrinfo(parts.hostname, port or (443 if parts.scheme == "https" else 80),
                                   type=socket.SOCK_STREAM)  # fmt: skip
    except (OSError, UnicodeError):
        raise InvalidUrl(f"The host {parts.hostname!r} does not resolve.") from None
    if any(_refused_address(info[4][0]) for info in infos):
        raise InvalidUrl(
            "The URL names a loopback, private, link-local or reserved address; such receivers are refused "
            "unless ENGRAM_WEBHOOKS_ALLOW_PRIVATE is on."
        )
