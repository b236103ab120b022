"""Request middleware of the whole site."""

from __future__ import annotations

from django.http import HttpResponse, JsonResponse

from engram_site.exceptions import database_unavailable


class DatabaseUnavailableMiddleware:
    """A database outage answers 503 everywhere, not only in the API.

    DRF views answer it themselves (``engram_site.exceptions.api_exception_handler``).
    Everything else — the operator console, whose session and user are loaded from the
    database — would answer Django's 500 page; this gives the same retryable 503.
    """

    MESSAGE = "The database is temporarily unavailable; retry shortly."

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if not database_unavailable(exception):
            return None
        if request.path.startswith("/api/"):
            response = JsonResponse({"detail": self.MESSAGE, "code": "database_unavailable"}, status=503)
        else:
            response = HttpResponse(
                f"<!doctype html><title>Database unavailable</title><h1>Database unavailable</h1><p>{self.MESSAGE}</p>",
                status=503,
            )
        response["Retry-After"] = "2"
        return response
