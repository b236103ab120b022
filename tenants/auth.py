"""Bearer-token authentication for the API.

The tenant always comes from the token (``request.auth.tenant``), never from
the request body. Failed attempts are counted per client address, in the cache
every worker process shares (engram_site/throttle.py), and throttled, so guessing
tokens is slow as well as hopeless.
"""

from __future__ import annotations

from django.conf import settings
from django.utils import timezone
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header

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
        # Every API request runs this: the tenant comes in the same statement, and nothing else
        # (get() orders nothing; only token.bucket_id is read, so no bucket join).
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
        self._touch(token)
        return TokenPrincipal(token), token

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="engram"'

    # -- brute-force protection ---------------------------------------------------------
    @staticmethod
    def _failures() -> FailureCounter:
        return FailureCounter("api-auth", settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["auth_failures"])

    def _check_failure_budget(self, request) -> None:
        wait = self._failures().blocked_for(client_address(request))
        if wait:
            raise exceptions.Throttled(wait=wait)

    def _fail(self, request, message: str):
        self._failures().record(client_address(request))
        raise exceptions.AuthenticationFailed(message)

    @staticmethod
    def _touch(token: ApiToken) -> None:
        now = timezone.now()
        if token.last_used_at is None or now - token.last_used_at >= ApiToken.LAST_USED_RESOLUTION:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
            token.last_used_at = now
