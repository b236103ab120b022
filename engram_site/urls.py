from csp.constants import SELF
from csp.decorators import csp_update
from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from engram_site import health, metrics

api_v1 = [
    path("", include("memories.urls")),
    path("", include("maintenance.urls")),
    path("", include("graph.urls")),
    path("", include("sources.urls")),
    path("", include("webhooks.urls")),
]

# Swagger UI: the split view serves its start-up script from /api/docs/?script instead of
# inline, and the page's inline style is in a stylesheet (templates/drf_spectacular/), so the
# site's Content-Security-Policy holds; Swagger UI's stylesheet draws icons from data: URLs.
api_docs = csp_update({"img-src": [SELF, "data:"]})(SpectacularSwaggerSplitView.as_view(url_name="api-schema"))

urlpatterns = [
    path("health", health.health, name="health"),
    path("ready", health.ready, name="ready"),
    path("metrics", metrics.metrics_view, name="metrics"),
    path("api/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", api_docs, name="api-docs"),
    path("admin/", admin.site.urls),
    path("", include("mcp_server.urls")),
]

# JSON errors for /api/ URLs that reach no API view (engram_site/exceptions.py).
handler400 = "engram_site.exceptions.bad_request"
handler404 = "engram_site.exceptions.not_found"
handler500 = "engram_site.exceptions.server_error"
