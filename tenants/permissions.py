"""Scope checks for token requests."""

from __future__ import annotations

from rest_framework.permissions import SAFE_METHODS, BasePermission

from tenants.models import ApiToken, Scope


def required_scope(request, view) -> str:
    """The scope a request needs: the view's ``required_scopes`` for its method, or
    read for safe methods and write for the rest."""
    explicit = getattr(view, "required_scopes", {}).get(request.method)
    if explicit:
        return explicit
    return Scope.READ if request.method in SAFE_METHODS else Scope.WRITE


class HasTenantToken(BasePermission):
    message = "This token lacks the scope this operation needs."

    def has_permission(self, request, view) -> bool:
        token = request.auth
        if not isinstance(token, ApiToken):
            return False  # DRF turns this into 401 for unauthenticated requests
        scope = required_scope(request, view)
        if not token.has_scope(scope):
            self.message = f"This token lacks the '{scope}' scope."
            return False
        return True
