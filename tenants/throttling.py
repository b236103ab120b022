from rest_framework.throttling import SimpleRateThrottle

from tenants.models import ApiToken


class TokenRateThrottle(SimpleRateThrottle):
    """Per-token request rate (ENGRAM_TOKEN_RATE); anonymous requests are throttled per address."""

    scope = "token"

    def get_cache_key(self, request, view):
        token = request.auth
        ident = f"token-{token.pk}" if isinstance(token, ApiToken) else self.get_ident(request)
        return self.cache_format % {"scope": self.scope, "ident": ident}
