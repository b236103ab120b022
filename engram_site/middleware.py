"""Request middleware of the whole site."""

from __future__ import annotations

from django.conf import settings
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


class UrlLengthMiddleware:
    """A URL (path and query string, as sent) over ``settings.MAX_URL_BYTES`` answers 414 before
    anything else runs: in the API's JSON error shape under ``/api/``, a short page elsewhere.

    gunicorn reads request lines up to 8190 bytes (engram_site/gunicorn_config.py), so URLs
    between the two limits get this answer instead of the server's own HTML 414.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        limit = settings.MAX_URL_BYTES
        # get_full_path() is the URL as sent, percent-encoded: ASCII, so characters are bytes.
        if len(request.get_full_path()) <= limit:
            return self.get_response(request)
        message = f"The URL is longer than {limit} bytes (path and query string); send long values in a body."
        if request.path.startswith("/api/"):
            return JsonResponse({"detail": message, "code": "uri_too_long"}, status=414)
        return HttpResponse(
            f"<!doctype html><title>URL too long</title><h1>URL too long</h1><p>{message}</p>", status=414
        )
