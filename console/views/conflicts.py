"""The contradiction review queue."""

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
from maintenance import conflicts as maintenance_conflicts
from maintenance.models import ConflictCandidate, ConflictStatus
from tenants.selectors import parse_uuid


def _conflicts(request):
    """The contradiction pairs the operator may see."""
    return scope_queryset(ConflictCandidate.objects.all(), user=request.user)


def _open_conflicts(request):
    pairs = _conflicts(request).open().select_related("memory_a", "memory_b", "bucket", "tenant")
    pairs = pairs.defer(*(f"memory_{side}__{name}" for side in "ab" for name in MEMORY_FIELDS_DEFERRED))
    tenant_id, bucket_id = request.GET.get("tenant"), request.GET.get("bucket")
    if tenant_id:
        pk = parse_uuid(tenant_id)
        if pk is None or not operator_tenants(request.user).filter(pk=pk).exists():
            raise Http404
        pairs = pairs.filter(tenant_id=pk)
    if bucket_id:
        pairs = pairs.filter(bucket_id=bucket_or_404(request, bucket_id).pk)
    return pairs.order_by("-found_at", "-pk")


def conflicts_queue(request):
    """Open contradiction pairs side by side, newest found first, with the detector's reason."""
    require(request, "maintenance.view_conflictcandidate")
    page = Paginator(_open_conflicts(request), REVIEW_PAGE_SIZE).get_page(request.GET.get("page"))
    tenants = (
        operator_tenants(request.user)
        .filter(pk__in=_conflicts(request).open().values("tenant_id").distinct())
        .order_by("name")
    )
    return TemplateResponse(
        request,
        "console/conflicts.html",
        page_context(
            request,
            "Contradiction review",
            page=page,
            tenants=tenants,
            selected_tenant=request.GET.get("tenant", ""),
            query=urlencode({k: v for k, v in request.GET.items() if k in ("tenant", "bucket")}),
        ),
    )


# decision -> (action, kept side)
CONFLICT_DECISIONS = {
    "keep_both": ("keep_both", None),
    "supersede_a": ("supersede", "b"),  # A is superseded: B stays current
    "supersede_b": ("supersede", "a"),
    "merge_a": ("merge", "a"),  # A absorbs B
    "merge_b": ("merge", "b"),
}


def conflicts_resolve(request):
    """One pair's decision. Keep both and supersede act at once (a supersession is undone by
    editing the memory); a merge, which deletes a memory, shows what will happen first and
    acts only when confirmed, optionally with new content for the kept memory."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    require(request, "maintenance.change_conflictcandidate", "memories.change_memory")
    back = reverse("admin:console_conflicts") + (f"?{request.POST['query']}" if request.POST.get("query") else "")
    candidate_id, _, decision = request.POST.get("pair", "").partition(":")
    known = row_id(candidate_id)
    candidate = _conflicts(request).filter(pk=known).first() if known else None
    if candidate is None:
        # A pair the operator cannot see (or that is gone): nothing is decided, nothing told.
        raise Http404
    if decision not in CONFLICT_DECISIONS:
        messages.error(request, "Unknown action.")
        return redirect(back)
    action, keep = CONFLICT_DECISIONS[decision]
    content = None
    if action == "merge":
        require(request, "memories.delete_memory")  # a merge deletes one memory of the pair
        if request.POST.get("confirm") != "yes":
            pair = (
                _conflicts(request)
                .filter(pk=candidate.pk, status=ConflictStatus.OPEN)
                .select_related("memory_a", "memory_b", "bucket", "tenant")
                .first()
            )
            return TemplateResponse(
                request,
                "console/conflicts_confirm.html",
                page_context(request, "Confirm merge", c=pair, decision=decision, keep=keep,
                         query=request.POST.get("query", ""), back=back),
            )  # fmt: skip
        content = request.POST.get("content", "").strip() or None
    try:
        result = maintenance_conflicts.conflict_resolve(
            candidate=candidate, action=action, keep=keep, content=content, actor=operator_actor(request)
        )
    except DomainError as exc:
        messages.error(request, exc.message)
        return redirect(back)
    done = {
        "keep_both": "Kept both memories; this pair will not be raised again.",
        "supersede": f"Memory {result.other_id} is now superseded by {result.kept_id}.",
        "merge": f"Memory {result.kept_id} absorbed {result.other_id}.",
    }
    messages.success(request, done[action])
    return redirect(back)
