"""The usage page: charts per day."""

from __future__ import annotations

from django.http import Http404
from django.template.response import TemplateResponse

from console import selectors
from console.scoping import operator_tenants
from console.views.base import page_context, require
from tenants.selectors import parse_uuid


def usage(request):
    """Charts per day of writes, searches, latency, tokens, storage and quota refusals: every
    tenant the operator operates added up, or one (``?tenant=<id>``, 404 outside them)."""
    require(request, "tenants.view_tenant")
    tenant = None
    if request.GET.get("tenant"):
        pk = parse_uuid(request.GET["tenant"])
        tenant = operator_tenants(request.user).filter(pk=pk).first() if pk else None
        if tenant is None:
            raise Http404
    report = selectors.usage_report(user=request.user, tenant=tenant)
    title = f"Usage — {tenant.name}" if tenant else "Usage"
    return TemplateResponse(request, "console/usage.html", page_context(request, title, **report))
