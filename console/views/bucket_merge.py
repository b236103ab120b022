"""Merging two buckets: pick, preview, confirm."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import reverse

from console.forms import BucketMergeForm
from console.views.base import bucket_or_404, operator_actor, page_context, require
from engram_site.exceptions import DomainError
from memories.services import buckets as memory_buckets


def bucket_merge(request):
    """Pick source and target → preview (counts) → confirm → merge."""
    require(request, "tenants.change_bucket", "tenants.delete_bucket", "memories.change_memory")
    if request.method == "POST":
        for name in ("source", "target"):
            if request.POST.get(name):
                bucket_or_404(request, request.POST[name])
        form = BucketMergeForm(request.POST, user=request.user)
        if form.is_valid():
            source, target = form.cleaned_data["source"], form.cleaned_data["target"]
            remove_source = form.cleaned_data["remove_source"]
            try:
                if request.POST.get("confirm") != "yes":
                    plan = memory_buckets.bucket_merge_preview(source=source, target=target)
                    return TemplateResponse(
                        request,
                        "console/bucket_merge_preview.html",
                        page_context(
                            request, "Confirm bucket merge", form=form, plan=plan, source=source, target=target,
                            remove_source=remove_source,
                        ),
                    )  # fmt: skip
                result = memory_buckets.bucket_merge(
                    source=source, target=target, remove_source=remove_source, actor=operator_actor(request)
                )
            except DomainError as exc:
                form.add_error(None, exc.message)
            else:
                what = "deleted" if result.source_removed else "left empty"
                messages.success(
                    request,
                    f"Merged “{source.name}” into “{target.name}”: {result.moved} memories moved, "
                    f"{result.deduplicated} deduplicated, {result.entities_merged} entities merged; "
                    f"the source bucket was {what}.",
                )
                return redirect(reverse("admin:tenants_bucket_change", args=[target.pk]))
    else:
        source = request.GET.get("source", "")
        if source:
            bucket_or_404(request, source)
        form = BucketMergeForm(initial={"source": source, "remove_source": True}, user=request.user)
    return TemplateResponse(request, "console/bucket_merge.html", page_context(request, "Merge buckets", form=form))
