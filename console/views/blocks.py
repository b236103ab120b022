"""The memory blocks page: a bucket's blocks, each edited on the version shown (a stale form is
refused, never saved over another writer's text), and each block's history."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import reverse

from console import selectors
from console.scoping import scope_queryset
from console.views.base import bucket_or_404, operator_actor, page_context, require
from engram_site.exceptions import DomainError
from memories import selectors as memory_selectors
from memories.models import MemoryBlock
from memories.services import blocks as block_services
from tenants.models import Bucket


def blocks_index(request):
    require(request, "memories.view_memory")
    counts = selectors.bucket_block_counts(user=request.user)
    buckets = list(
        scope_queryset(Bucket.objects.select_related("tenant"), user=request.user).order_by("tenant__name", "name")
    )
    for bucket in buckets:
        bucket.block_count = counts.get(bucket.pk, 0)
    return TemplateResponse(
        request, "console/blocks_index.html", page_context(request, "Memory blocks", buckets=buckets)
    )


def _owner(value: str | None) -> str | None:
    return (value or "").strip() or None


def blocks_bucket(request, bucket_id):
    """A bucket's blocks with a form each (text, limit, reason) and one for a new block. A save
    names the version the form showed: if the block changed since, nothing is saved and the page
    says so, showing the current text."""
    require(request, "memories.view_memory")
    bucket = bucket_or_404(request, bucket_id)
    here = reverse("admin:console_blocks_bucket", args=[bucket.pk])
    if request.method == "POST":
        require(request, "memories.change_memory")
        label, agent_id = request.POST.get("label", "").strip(), _owner(request.POST.get("agent_id"))
        etag = request.POST.get("etag") or None
        actor = operator_actor(request)
        try:
            max_tokens = request.POST.get("max_tokens", "").strip()
            block, created = block_services.block_put(
                bucket=bucket, agent_id=agent_id, label=label, content=request.POST.get("content", ""),
                max_tokens=int(max_tokens) if max_tokens.isdigit() else None, reason=request.POST.get("reason", ""),
                # A form for a new block creates one only if there is none; an existing block's
                # form names the version it showed.
                expected=block_services.Expected.from_headers(etag, None if etag else "*"), actor=actor,
            )  # fmt: skip
            messages.success(request, f"Block {label!r} {'created' if created else 'saved'} (version {block.version}).")
        except DomainError as exc:
            messages.error(request, f"Nothing saved: {exc.message}")
        return redirect(here)
    blocks = memory_selectors.block_list(bucket=bucket, agents=None)
    return TemplateResponse(
        request, "console/blocks_bucket.html", page_context(request, f"Memory blocks of {bucket.name}", bucket=bucket,
                                                            blocks=blocks),
    )  # fmt: skip


def block_history(request, bucket_id, block_id):
    require(request, "memories.view_memory")
    bucket = bucket_or_404(request, bucket_id)
    block = MemoryBlock.objects.for_bucket(bucket).filter(pk=block_id).first()
    if block is None:
        raise Http404
    versions = memory_selectors.block_history(block=block)[:200]
    return TemplateResponse(
        request, "console/block_history.html",
        page_context(request, f"History of {block.label}", bucket=bucket, block=block, versions=versions),
    )  # fmt: skip
