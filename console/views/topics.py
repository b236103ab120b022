"""The topic pages: a bucket's topics renamed, merged or classified again."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import reverse

from console import selectors
from console.forms import TopicNameField
from console.scoping import scope_queryset
from console.views.base import bucket_or_404, operator_actor, page_context, require
from engram_site.exceptions import DomainError
from maintenance.services import topics as maintenance_topics
from memories import topics
from memories.models import Memory
from memories.services import topics as topic_services
from tenants.models import Bucket
from tenants.selectors import parse_uuid

UNLABELLED = "__unlabelled__"


def topics_index(request):
    require(request, "memories.view_memory")
    counts = selectors.bucket_memory_counts(user=request.user)
    buckets = list(
        scope_queryset(Bucket.objects.select_related("tenant"), user=request.user).order_by("tenant__name", "name")
    )
    for bucket in buckets:
        bucket.memory_count = counts.get(bucket.pk, 0)
    return TemplateResponse(request, "console/topics_index.html", page_context(request, "Topics", buckets=buckets))


def _topic_param(value: str) -> str | None:
    return None if value == UNLABELLED else value


def topics_bucket(request, bucket_id):
    """One bucket's topics: counts and samples; rename, merge, re-classify."""
    require(request, "memories.view_memory")
    bucket = bucket_or_404(request, bucket_id)
    here = reverse("admin:console_topics_bucket", args=[bucket.pk])
    if request.method == "POST":
        require(request, "memories.change_memory")
        action, actor = request.POST.get("action"), operator_actor(request)
        selected = [_topic_param(t) for t in request.POST.getlist("topics")]
        try:
            if action == "reclassify":
                if not selected:
                    raise DomainError("Select the topics to classify again.")
                counts = maintenance_topics.topics_reclassify(bucket=bucket, topics=selected, actor=actor)
                messages.success(request, _reclassified(bucket, counts))
                return redirect(here)
            if action in ("rename", "merge"):
                if action == "rename":
                    old = request.POST.get("rename_from", "")
                    new = TopicNameField().clean(request.POST.get("rename_to", ""))
                    if not old or old == UNLABELLED:
                        raise DomainError("Choose a topic to rename.")
                    sources, into = [old], new
                else:
                    sources = [t for t in selected if t is not None]
                    into = TopicNameField().clean(request.POST.get("merge_into", ""))
                    if not sources:
                        raise DomainError("Select the topics to merge (unlabelled memories can be classified again).")
                if request.POST.get("confirm") != "yes":
                    count = sum(topics.topic_memories(bucket=bucket, topic=t).count() for t in sources)
                    return TemplateResponse(
                        request,
                        "console/topics_confirm.html",
                        page_context(
                            request, "Confirm topic change", bucket=bucket, action=action, sources=sources, into=into,
                            count=count, back=here,
                        ),
                    )  # fmt: skip
                if action == "rename":
                    n = topic_services.topic_rename(bucket=bucket, topic=sources[0], new_name=into, actor=actor)
                else:
                    n = topic_services.topics_merge(bucket=bucket, topics=sources, into=into, actor=actor)
                messages.success(request, f"{n} memories now have the topic “{into}”.")
                return redirect(here)
            raise DomainError("Unknown action.")
        except DomainError as exc:
            messages.error(request, exc.message)
            return redirect(here)
        except ValidationError as exc:  # the new topic name
            messages.error(request, "; ".join(exc.messages))
            return redirect(here)
    groups = topics.topic_groups(bucket=bucket)
    return TemplateResponse(
        request,
        "console/topics_bucket.html",
        page_context(
            request, f"Topics of {bucket.name}", bucket=bucket, groups=groups, unlabelled=UNLABELLED,
            named=[g.topic for g in groups if g.topic is not None],
        ),
    )  # fmt: skip


def _reclassified(bucket: Bucket, counts: dict) -> str:
    note = "" if bucket.tenant.classification_enabled else " Classification is turned off for this tenant."
    return (
        f"Classified {counts.get('classified', 0)} of {counts.get('selected', 0)} selected memories again "
        f"(rows without an embedding wait for the enrichment sweep; labels clients set are kept).{note}"
    )


def topic_detail(request, bucket_id):
    """The memories of one topic (or the unlabelled ones), to re-classify a selection."""
    require(request, "memories.view_memory")
    bucket = bucket_or_404(request, bucket_id)
    topic = _topic_param(request.GET.get("topic", UNLABELLED))
    if request.method == "POST":
        require(request, "memories.change_memory")
        ids = {parse_uuid(i) for i in request.POST.getlist("memories")}
        if None in ids or Memory.objects.for_bucket(bucket).filter(pk__in=ids).count() != len(ids):
            raise Http404  # a memory of another bucket (or tenant), or no memory at all
        try:
            if not ids:
                raise DomainError("Select the memories to classify again.")
            counts = maintenance_topics.topics_reclassify(bucket=bucket, memory_ids=ids, actor=operator_actor(request))
            messages.success(request, _reclassified(bucket, counts))
        except (DomainError, ValueError) as exc:
            messages.error(request, getattr(exc, "message", str(exc)))
        return redirect(request.get_full_path())
    memories = topics.topic_memories(bucket=bucket, topic=topic)
    page = Paginator(memories, 50).get_page(request.GET.get("page"))
    label = topic if topic is not None else "(unlabelled)"
    return TemplateResponse(
        request,
        "console/topic_detail.html",
        page_context(
            request, f"{label} — {bucket.name}", bucket=bucket, topic=topic, label=label, page=page,
            topic_param=topic if topic is not None else UNLABELLED,
        ),
    )  # fmt: skip
