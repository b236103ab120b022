"""Which webhook URLs the worker may call: http(s), and — unless ENGRAM_WEBHOOKS_ALLOW_PRIVATE — only
hosts whose every address is a public one, checked when a subscription is saved and again
before each attempt (a host name may resolve elsewhere later). The attempt then connects to
the addresses it checked (webhooks/signing.py), never looking the name up a second time.

"Public" is decided here rather than by Python's ``is_global`` alone, which says yes to IPv6
forms that carry an IPv4 address inside (NAT64, 6to4, IPv4-compatible, IPv4-translated) and to
deprecated site-local addresses: on a network with NAT64 or a 6to4 relay those reach internal
IPv4 hosts. The embedded IPv4 address is decoded and judged like any other.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address, ip_network
from urllib.parse import urlsplit

import httpx
from django.conf import settings

from engram_site.exceptions import DomainError


class InvalidUrl(DomainError):
    code = "invalid_url"


# IANA's special-purpose IPv4 ranges that no public receiver lives in (whatever this Python's
# `is_global` thinks of them; 192.88.99.0/24, the deprecated 6to4 relay anycast, it calls global).
_IPV4_REFUSED = tuple(
    ip_network(n)
    for n in (
        "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
        "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16", "198.18.0.0/15",
        "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
    )
)  # fmt: skip

# Only global unicast (2000::/3) holds public IPv6 receivers; inside it, these ranges do not:
# IETF protocol assignments (Teredo among them), documentation, and 6to4, which is decoded instead.
_IPV6_GLOBAL_UNICAST = ip_network("2000::/3")
_IPV6_REFUSED = tuple(ip_network(n) for n in ("2001::/23", "2001:db8::/32", "3fff::/20"))

# IPv6 prefixes whose last 32 bits are an IPv4 address: IPv4-mapped (::ffff:0:0/96),
# IPv4-translated (::ffff:0:0:0/96, RFC 2765) and the well-known NAT64 prefix (64:ff9b::/96).
_IPV4_IN_LAST_32_BITS = tuple(ip_network(n) for n in ("::ffff:0:0/96", "::ffff:0:0:0/96", "64:ff9b::/96"))
_SIX_TO_FOUR = ip_network("2002::/16")


def _embedded_ipv4(ip: IPv6Address) -> IPv4Address | None:
    if any(ip in net for net in _IPV4_IN_LAST_32_BITS):
        return IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _SIX_TO_FOUR:
        return ip.sixtofour
    return None


def address_refused(address: str) -> bool:
    """Whether a webhook may not connect to ``address`` (an IPv4 or IPv6 address as text)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # an IPv6 zone index is not part of the address
    if isinstance(ip, IPv6Address):
        embedded = _embedded_ipv4(ip)
        if embedded is not None:
            ip = embedded
        elif ip not in _IPV6_GLOBAL_UNICAST or any(ip in net for net in _IPV6_REFUSED):
            # Everything outside global unicast: loopback, unspecified, IPv4-compatible
            # (::a.b.c.d, deprecated, even of a public address), the local-use NAT64 prefix,
            # unique local, link-local, site-local, multicast, discard-only, reserved.
            return True
    if isinstance(ip, IPv4Address) and any(ip in net for net in _IPV4_REFUSED):
        return True
    return not ip.is_global or ip.is_multicast or ip.is_private or ip.is_reserved


@dataclass(frozen=True)
class Target:
    """Where an attempt connects: the URL's host and port as the HTTP client names them, and the
    addresses checked for it, in the resolver's order."""

    host: str
    port: int
    addresses: tuple[str, ...]


def _parts(url: str) -> httpx.URL:
    try:
        split = urlsplit(url)
        split.port  # noqa: B018 (a port out of range raises here)
        parts = httpx.URL(url)
    except (httpx.InvalidURL, ValueError, TypeError):
        raise InvalidUrl("Not a valid URL.") from None
    if split.scheme not in ("http", "https") or not split.hostname or not parts.host:
        raise InvalidUrl("A webhook URL must be http:// or https:// with a host name.")
    if split.username or split.password:
        raise InvalidUrl("A webhook URL must not carry credentials; sign with the secret instead.")
    return parts


def _resolve(parts: httpx.URL) -> Target:
    # The host as the HTTP client sends it (IDNA-encoded, an IPv6 literal without brackets),
    # so the name checked is the name connected for.
    host = parts.raw_host.decode("ascii")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise InvalidUrl(f"The host {parts.host!r} does not resolve.") from None
    addresses = tuple(dict.fromkeys(info[4][0] for info in infos))
    if not settings.ENGRAM_WEBHOOKS_ALLOW_PRIVATE and any(address_refused(a) for a in addresses):
        raise InvalidUrl(
            "The URL names a loopback, private, link-local or reserved address; such receivers are refused "
            "unless ENGRAM_WEBHOOKS_ALLOW_PRIVATE is on."
        )
    return Target(host=host, port=port, addresses=addresses)


def url_check(url: str, *, resolve: bool = True) -> None:
    """Raise InvalidUrl unless ``url`` is http(s) with a host and — unless
    ENGRAM_WEBHOOKS_ALLOW_PRIVATE — every address the host resolves to is a public one."""
    parts = _parts(url)
    if settings.ENGRAM_WEBHOOKS_ALLOW_PRIVATE or not resolve:
        return
    _resolve(parts)


def target_vetted(url: str) -> Target:
    """Resolve ``url``'s host once and return the addresses an attempt may connect to (all of
    them public, unless ENGRAM_WEBHOOKS_ALLOW_PRIVATE); raise InvalidUrl otherwise."""
    return _resolve(_parts(url))
