from django.urls import path

from mcp_server import apis

urlpatterns = [
    path("mcp", apis.McpApi.as_view(), name="mcp"),
]
