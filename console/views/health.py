"""The health page and the retry of enrichment failures it lists."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpResponseNotAllowed
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import reverse

from console import selectors
from console.views.base import operator_actor, page_context, require, row_id
from memories.services.enrichment_failures import enrichment_failures_retry


def health(request):
    """Per tenant counts, waiting enrichment, enrichment failures, pending reviews, jobs, HNSW indexes."""
    require(request, "tenants.view_tenant")
    report = selectors.health_report(user=request.user)
    return TemplateResponse(request, "console/health.html", page_context(request, "Health", report=report))


def enrichment_retry(request):
    """Retry selected enrichment failures now (their retry time becomes now and the work is
    queued); audited as ``enrichment.retry``. A failure outside the operator's tenants is 404."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    require(request, "tenants.view_tenant", "memories.change_memory")
    back = reverse("admin:console_health") + "#health-failures"
    ids = request.POST.getlist("failures")
    if not ids:
        messages.warning(request, "Select at least one failure to retry.")
        return redirect(back)
    numbers = {row_id(i) for i in ids}
    if None in numbers:
        raise Http404
    failures = list(selectors.enrichment_failures(user=request.user).filter(pk__in=numbers))
    if len(failures) != len(set(ids)):
        # One the operator cannot see (or that is gone: its stage succeeded): nothing retried.
        raise Http404
    n = enrichment_failures_retry(failures=failures, actor=operator_actor(request))
    messages.success(request, f"Queued {n} failed enrichment step(s) again; the sweeps also take them from now on.")
    return redirect(back)
