"""Bearer-token authentication for the API.

The tenant always comes from the token (``request.auth.tenant``), never from
the request body. Failed attempts are counted per client address and
throttled, so guessing tokens is slow as well as hopeless.
"""

from __future__ import annotations

import time

from django.conf import settings
from django.core.cache import cache
from django.utils import timezone
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header

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


def _parse_rate(rate: str) -> tuple[int, int]:
    count, period = rate.split("/")
    seconds = {"s": 1, "m": 60, "h": 3600, "d": 86400}[period[0]]
    return int(count), seconds


def client_address(request) -> str:
    return request.META.get("REMOTE_ADDR", "unknown")


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
        self._check_failure_budget(request)
        try:
            raw = parts[1].decode("ascii")
        except UnicodeDecodeError:
            self._fail(request, "Invalid token.")
        token = ApiToken.objects.select_related("tenant", "bucket").filter(token_hash=hash_token(raw)).first()
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
        self._touch(token)
        return TokenPrincipal(token), token

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="engram"'

    # -- brute-force protection ---------------------------------------------------------
    def _failure_key(self, request) -> str:
        return f"auth-failures:{client_address(request)}"

    def _check_failure_budget(self, request) -> None:
        limit, window = _parse_rate(settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["auth_failures"])
        history = [t for t in cache.get(self._failure_key(request), []) if t > time.time() - window]
        if len(history) >= limit:
            raise exceptions.Throttled(wait=max(1, int(history[0] + window - time.time())))

    def _fail(self, request, message: str):
        _, window = _parse_rate(settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["auth_failures"])
        key = self._failure_key(request)
        now = time.time()
        history = [t for t in cache.get(key, []) if t > now - window]
        history.append(now)
        cache.set(key, history, window)
        raise exceptions.AuthenticationFailed(message)

    @staticmethod
    def _touch(token: ApiToken) -> None:
        now = timezone.now()
        if token.last_used_at is None or now - token.last_used_at >= ApiToken.LAST_USED_RESOLUTION:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
            token.last_used_at = now
