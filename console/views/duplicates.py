"""The near-duplicate review queue."""

from __future__ import annotations

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpResponseNotAllowed
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.http import urlencode

from console.scoping import operator_tenants, scope_queryset
from console.views.base import (
    MEMORY_FIELDS_DEFERRED,
    REVIEW_PAGE_SIZE,
    bucket_or_404,
    operator_actor,
    page_context,
    require,
    row_id,
)
from engram_site.exceptions import DomainError
from maintenance.models import DuplicateCandidate, DuplicateStatus
from maintenance.services import duplicate_review
from tenants.selectors import parse_uuid


def _candidates(request):
    """The review pairs the operator may see."""
    return scope_queryset(DuplicateCandidate.objects.all(), user=request.user)


def _pending_candidates(request):
    candidates = _candidates(request).pending().select_related("memory_a", "memory_b", "bucket", "tenant")
    candidates = candidates.defer(
        *(f"memory_{side}__{name}" for side in "ab" for name in MEMORY_FIELDS_DEFERRED)
    ).order_by("-similarity", "pk")
    tenant_id, bucket_id = request.GET.get("tenant"), request.GET.get("bucket")
    if tenant_id:
        # A malformed id, a missing tenant and one the operator does not operate: all 404.
        pk = parse_uuid(tenant_id)
        if pk is None or not operator_tenants(request.user).filter(pk=pk).exists():
            raise Http404
        candidates = candidates.filter(tenant_id=pk)
    if bucket_id:
        candidates = candidates.filter(bucket_id=bucket_or_404(request, bucket_id).pk)
    return candidates


def review_queue(request):
    """Pending near-duplicate pairs side by side, most similar first."""
    require(request, "maintenance.view_duplicatecandidate")
    candidates = _pending_candidates(request)
    page = Paginator(candidates, REVIEW_PAGE_SIZE).get_page(request.GET.get("page"))
    tenants = (
        operator_tenants(request.user)
        .filter(pk__in=_candidates(request).pending().values("tenant_id").distinct())
        .order_by("name")
    )
    return TemplateResponse(
        request,
        "console/review.html",
        page_context(
            request,
            "Near-duplicate review",
            page=page,
            tenants=tenants,
            selected_tenant=request.GET.get("tenant", ""),
            query=urlencode({k: v for k, v in request.GET.items() if k in ("tenant", "bucket")}),
        ),
    )


BULK_ACTIONS = {
    "merge_a": ("a", "Merge, keeping A"),
    "merge_b": ("b", "Merge, keeping B"),
    "merge_older": ("older", "Merge, keeping the older memory"),
    "merge_newer": ("newer", "Merge, keeping the newer memory"),
}


def review_confirm(request):
    """Decisions on pairs. Keep both acts at once; a merge (which deletes a memory) shows
    what will happen and acts only when confirmed."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    require(request, "maintenance.change_duplicatecandidate")
    back = reverse("admin:console_review") + (f"?{request.POST['query']}" if request.POST.get("query") else "")
    pair = request.POST.get("pair", "")
    if pair:  # one pair's own button: "<id>:a", "<id>:b" or "<id>:keep_both"
        candidate_id, _, decision = pair.partition(":")
        ids, action = [candidate_id], {"a": "merge_a", "b": "merge_b"}.get(decision, decision)
    else:
        ids, action = request.POST.getlist("candidates"), request.POST.get("action", "")
    ids = {row_id(i) for i in ids} - {None}
    if not ids:
        messages.warning(request, "Select at least one pair.")
        return redirect(back)
    candidates = _candidates(request).filter(pk__in=ids)
    if candidates.count() != len(ids):
        # A pair the operator cannot see (or that is gone): nothing is decided, nothing told.
        raise Http404
    actor = operator_actor(request)
    if action == "keep_both":
        result = duplicate_review.duplicates_keep_both(candidates=candidates, actor=actor)
        messages.success(request, f"Kept both memories of {result.done} pair(s); they will not be suggested again.")
        return redirect(back)
    if action not in BULK_ACTIONS:
        messages.error(request, "Unknown action.")
        return redirect(back)
    require(request, "memories.delete_memory")  # a merge deletes one memory of each pair
    keep, label = BULK_ACTIONS[action]
    if request.POST.get("confirm") != "yes":
        pending = (
            candidates.filter(status=DuplicateStatus.PENDING)
            .select_related("memory_a", "memory_b", "bucket", "tenant")
            .defer(*(f"memory_{side}__{name}" for side in "ab" for name in MEMORY_FIELDS_DEFERRED))
            .order_by("-similarity", "pk")
        )
        return TemplateResponse(
            request,
            "console/review_confirm.html",
            page_context(
                request, "Confirm merge", candidates=pending, action=action, keep=keep, label=label,
                query=request.POST.get("query", ""), back=back,
            ),
        )  # fmt: skip
    try:
        result = duplicate_review.duplicates_merge(candidates=candidates, keep=keep, actor=actor)
    except DomainError as exc:
        messages.error(request, exc.message)
        return redirect(back)
    note = f" ({result.skipped} skipped: already reviewed or changed by an earlier merge)" if result.skipped else ""
    messages.success(request, f"Merged {result.done} pair(s){note}.")
    return redirect(back)
