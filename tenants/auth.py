"""Bearer-token authentication for the API.

The tenant always comes from the token (``request.auth.tenant``), never from
the request body. Failed attempts are counted per client address, in the cache
every worker process shares (engram_site/throttle.py), and throttled, so guessing
tokens is slow as well as hopeless. The count is consulted only for a request whose
token failed: an address over its limit never locks out a valid token.
"""

from __future__ import annotations

import ipaddress

from django.conf import settings
from django.utils import timezone
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header

from engram_site.scoping import enter_for_request, scope, scopes_disabled
from engram_site.throttle import FailureCounter
from tenants.models import ApiToken, hash_token


class TokenPrincipal:
    """``request.user`` for token requests: the token's tenant, not a Django user."""

    is_authenticated = True
    is_anonymous = False
    is_staff = False

    def __init__(self, token: ApiToken):
        self.token = token
        self.tenant = token.tenant
        self.pk = None

    def __str__(self) -> str:
        return f"token:{self.token.prefix}"


def _trusted(address: str, proxies: list[str]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    for proxy in proxies:
        if proxy == "*":
            return True
        try:
            if ip in ipaddress.ip_network(proxy, strict=False):
                return True
        except ValueError:
            continue
    return False


def client_address(request) -> str:
    """The address failures are counted by: the peer, or, when the peer is a trusted proxy
    (``ENGRAM_TRUSTED_PROXIES``, from FORWARDED_ALLOW_IPS), the client it forwards.
    X-Forwarded-For is read from the right: each trusted hop vouches for the entry before it,
    and the first untrusted one is the client (entries further left are whatever the client
    chose to send)."""
    address = request.META.get("REMOTE_ADDR") or "unknown"
    proxies = settings.ENGRAM_TRUSTED_PROXIES
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
    if not proxies or not forwarded:
        return address
    hops = [hop.strip() for hop in forwarded.split(",")]
    while hops and _trusted(address, proxies):
        hop = hops.pop()
        try:
            address = str(ipaddress.ip_address(hop))
        except ValueError:
            break  # not an address: keep the last hop that is one
    return address


class TokenAuthentication(BaseAuthentication):
    keyword = b"bearer"

    def authenticate(self, request):
        parts = get_authorization_header(request).split()
        if not parts:
            return None  # anonymous; the permission class answers 401
        if parts[0].lower() != self.keyword:
            raise exceptions.AuthenticationFailed("Use 'Authorization: Bearer <token>'.")
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed("Malformed Authorization header.")
        try:
            raw = parts[1].decode("ascii")
        except UnicodeDecodeError:
            self._fail(request, "Invalid token.")
        # Every API request runs this: the tenant comes in the same statement, and nothing else
        # (get() orders nothing; only token.bucket_id is read, so no bucket join).
        # Cross-tenant: whose token this is, and so the request's tenant, is what it finds out.
        with scopes_disabled():
            try:
                token = ApiToken.objects.select_related("tenant").get(token_hash=hash_token(raw))
            except ApiToken.DoesNotExist:
                token = None
        # The lookup is by a hash of the secret; the explicit constant-time compare
        # keeps it honest if the lookup is ever changed to go by prefix.
        if token is None or not token.matches(raw):
            self._fail(request, "Invalid token.")
        if token.is_revoked:
            self._fail(request, "Token has been revoked.")
        if token.is_expired:
            self._fail(request, "Token has expired.")
        if not token.tenant.is_active:
            self._fail(request, "Tenant is disabled.")
        # The rest of the request (view, throttles, the answer) sees this tenant's rows only.
        enter_for_request(request, scope(tenant=token.tenant_id))
        self._touch(token)
        return TokenPrincipal(token), token

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="engram"'

    # -- brute-force protection ---------------------------------------------------------
    @staticmethod
    def _failures() -> FailureCounter:
        return FailureCounter("api-auth", settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["auth_failures"])

    def _fail(self, request, message: str):
        """Refuse the request: 429 while its address is over the failure limit, else count the
        failure and answer 401. Only failing requests reach this, after the token was looked up:
        a valid token is served whatever its address has failed (behind a proxy not listed in
        FORWARDED_ALLOW_IPS every client shares one address, and 30 bad guesses a minute
        would otherwise keep every tenant out)."""
        failures, address = self._failures(), client_address(request)
        wait = failures.blocked_for(address)
        if wait:
            raise exceptions.Throttled(wait=wait)
        failures.record(address)
        raise exceptions.AuthenticationFailed(message)

    @staticmethod
    def _touch(token: ApiToken) -> None:
        now = timezone.now()
        if token.last_used_at is None or now - token.last_used_at >= ApiToken.LAST_USED_RESOLUTION:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
            token.last_used_at = now
