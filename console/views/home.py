"""/admin/console/ itself."""

from __future__ import annotations

from django.shortcuts import redirect
from django.urls import reverse


def home(request):
    """/admin/console/: the console's pages are listed on the admin index."""
    return redirect(reverse("admin:index") + "#console-panel")
