"""The console's own pages (registered by console/sites.py under /admin/console/).

Views are thin: check the operator's permission, validate, call the same service
the API calls, report. Destructive steps (merges) render a confirmation page first
and act only on a POST carrying ``confirm=yes``. Every change is audited by the
service it calls (the operator is the actor).

Every page sees only the tenants the operator operates (console/scoping.py). An id — in
the path, the query string or the form — naming an object outside them answers 404, like
a missing one, and changes nothing.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.http import Http404, HttpResponseNotAllowed
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.http import urlencode

from audit.services import Actor
from console import selectors
from console.forms import BucketMergeForm, PlaygroundForm, TopicNameField
from console.scoping import operator_tenants, scope_queryset, visible_bucket
from engram_site.exceptions import DomainError
from maintenance import conflicts as maintenance_conflicts
from maintenance.models import ConflictCandidate, ConflictStatus, DuplicateCandidate, DuplicateStatus
from maintenance.services import duplicate_review
from maintenance.services import topics as maintenance_topics
from memories import topics
from memories.filters import MemoryFilters
from memories.models import Memory
from memories.retrieval import memories_search
from memories.services import buckets as memory_buckets
from memories.services import topics as topic_services
from memories.services.enrichment_failures import enrichment_failures_retry
from tenants.models import Bucket
from tenants.selectors import parse_uuid

UNLABELLED = "__unlabelled__"
REVIEW_PAGE_SIZE = 25
MEMORY_FIELDS_DEFERRED = ("embedding", "context_embedding", "context_lemmatized", "text_lemmatized")


def _context(request, title: str, **extra) -> dict:
    return {**admin.site.each_context(request), "title": title, **extra}


def _row_id(text: str) -> int | None:
    """A posted row id as a number, or None when it cannot name a row: not ASCII digits ("²" is a
    digit to str.isdigit but not to int), or beyond PostgreSQL's bigint."""
    if text.isascii() and text.isdigit() and 0 < int(text) < 2**63:
        return int(text)
    return None


def _require(request, *perms: str) -> None:
    if not request.user.has_perms(perms):
        raise PermissionDenied


def _actor(request) -> Actor:
    return Actor.operator(request.user, request)


def _bucket_or_404(request, value) -> Bucket:
    """The bucket ``value`` names, if the operator operates its tenant; else 404."""
    bucket = visible_bucket(request.user, value)
    if bucket is None:
        raise Http404
    return bucket


def _candidates(request):
    """The review pairs the operator may see."""
    return scope_queryset(DuplicateCandidate.objects.all(), user=request.user)


def home(request):
    """/admin/console/: the console's pages are listed on the admin index."""
    return redirect(reverse("admin:index") + "#console-panel")


# --- health ---------------------------------------------------------------------------------------


def health(request):
    """Per tenant counts, waiting enrichment, enrichment failures, pending reviews, jobs, HNSW indexes."""
    _require(request, "tenants.view_tenant")
    report = selectors.health_report(user=request.user)
    return TemplateResponse(request, "console/health.html", _context(request, "Health", report=report))


def enrichment_retry(request):
    """Retry selected enrichment failures now (their retry time becomes now and the work is
    queued); audited as ``enrichment.retry``. A failure outside the operator's tenants is 404."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    _require(request, "tenants.view_tenant", "memories.change_memory")
    back = reverse("admin:console_health") + "#health-failures"
    ids = request.POST.getlist("failures")
    if not ids:
        messages.warning(request, "Select at least one failure to retry.")
        return redirect(back)
    numbers = {_row_id(i) for i in ids}
    if None in numbers:
        raise Http404
    failures = list(selectors.enrichment_failures(user=request.user).filter(pk__in=numbers))
    if len(failures) != len(set(ids)):
        # One the operator cannot see (or that is gone: its stage succeeded): nothing retried.
        raise Http404
    n = enrichment_failures_retry(failures=failures, actor=_actor(request))
    messages.success(request, f"Queued {n} failed enrichment step(s) again; the sweeps also take them from now on.")
    return redirect(back)


# --- usage ----------------------------------------------------------------------------------------


def usage(request):
    """Charts per day of writes, searches, latency, tokens, storage and quota refusals: every
    tenant the operator operates added up, or one (``?tenant=<id>``, 404 outside them)."""
    _require(request, "tenants.view_tenant")
    tenant = None
    if request.GET.get("tenant"):
        pk = parse_uuid(request.GET["tenant"])
        tenant = operator_tenants(request.user).filter(pk=pk).first() if pk else None
        if tenant is None:
            raise Http404
    report = selectors.usage_report(user=request.user, tenant=tenant)
    title = f"Usage — {tenant.name}" if tenant else "Usage"
    return TemplateResponse(request, "console/usage.html", _context(request, title, **report))


# --- near-duplicate review ------------------------------------------------------------------------


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
        candidates = candidates.filter(bucket_id=_bucket_or_404(request, bucket_id).pk)
    return candidates


def review_queue(request):
    """Pending near-duplicate pairs side by side, most similar first."""
    _require(request, "maintenance.view_duplicatecandidate")
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
        _context(
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
    _require(request, "maintenance.change_duplicatecandidate")
    back = reverse("admin:console_review") + (f"?{request.POST['query']}" if request.POST.get("query") else "")
    pair = request.POST.get("pair", "")
    if pair:  # one pair's own button: "<id>:a", "<id>:b" or "<id>:keep_both"
        candidate_id, _, decision = pair.partition(":")
        ids, action = [candidate_id], {"a": "merge_a", "b": "merge_b"}.get(decision, decision)
    else:
        ids, action = request.POST.getlist("candidates"), request.POST.get("action", "")
    ids = {_row_id(i) for i in ids} - {None}
    if not ids:
        messages.warning(request, "Select at least one pair.")
        return redirect(back)
    candidates = _candidates(request).filter(pk__in=ids)
    if candidates.count() != len(ids):
        # A pair the operator cannot see (or that is gone): nothing is decided, nothing told.
        raise Http404
    actor = _actor(request)
    if action == "keep_both":
        result = duplicate_review.duplicates_keep_both(candidates=candidates, actor=actor)
        messages.success(request, f"Kept both memories of {result.done} pair(s); they will not be suggested again.")
        return redirect(back)
    if action not in BULK_ACTIONS:
        messages.error(request, "Unknown action.")
        return redirect(back)
    _require(request, "memories.delete_memory")  # a merge deletes one memory of each pair
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
            _context(
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


# --- contradiction review -------------------------------------------------------------------------


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
        pairs = pairs.filter(bucket_id=_bucket_or_404(request, bucket_id).pk)
    return pairs.order_by("-found_at", "-pk")


def conflicts_queue(request):
    """Open contradiction pairs side by side, newest found first, with the detector's reason."""
    _require(request, "maintenance.view_conflictcandidate")
    page = Paginator(_open_conflicts(request), REVIEW_PAGE_SIZE).get_page(request.GET.get("page"))
    tenants = (
        operator_tenants(request.user)
        .filter(pk__in=_conflicts(request).open().values("tenant_id").distinct())
        .order_by("name")
    )
    return TemplateResponse(
        request,
        "console/conflicts.html",
        _context(
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
    _require(request, "maintenance.change_conflictcandidate", "memories.change_memory")
    back = reverse("admin:console_conflicts") + (f"?{request.POST['query']}" if request.POST.get("query") else "")
    candidate_id, _, decision = request.POST.get("pair", "").partition(":")
    known = _row_id(candidate_id)
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
        _require(request, "memories.delete_memory")  # a merge deletes one memory of the pair
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
                _context(request, "Confirm merge", c=pair, decision=decision, keep=keep,
                         query=request.POST.get("query", ""), back=back),
            )  # fmt: skip
        content = request.POST.get("content", "").strip() or None
    try:
        result = maintenance_conflicts.conflict_resolve(
            candidate=candidate, action=action, keep=keep, content=content, actor=_actor(request)
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


# --- bucket merge ---------------------------------------------------------------------------------


def bucket_merge(request):
    """Pick source and target → preview (counts) → confirm → merge."""
    _require(request, "tenants.change_bucket", "tenants.delete_bucket", "memories.change_memory")
    if request.method == "POST":
        for name in ("source", "target"):
            if request.POST.get(name):
                _bucket_or_404(request, request.POST[name])
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
                        _context(
                            request, "Confirm bucket merge", form=form, plan=plan, source=source, target=target,
                            remove_source=remove_source,
                        ),
                    )  # fmt: skip
                result = memory_buckets.bucket_merge(
                    source=source, target=target, remove_source=remove_source, actor=_actor(request)
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
            _bucket_or_404(request, source)
        form = BucketMergeForm(initial={"source": source, "remove_source": True}, user=request.user)
    return TemplateResponse(request, "console/bucket_merge.html", _context(request, "Merge buckets", form=form))


# --- topics ---------------------------------------------------------------------------------------


def topics_index(request):
    _require(request, "memories.view_memory")
    counts = selectors.bucket_memory_counts(user=request.user)
    buckets = list(
        scope_queryset(Bucket.objects.select_related("tenant"), user=request.user).order_by("tenant__name", "name")
    )
    for bucket in buckets:
        bucket.memory_count = counts.get(bucket.pk, 0)
    return TemplateResponse(request, "console/topics_index.html", _context(request, "Topics", buckets=buckets))


def _topic_param(value: str) -> str | None:
    return None if value == UNLABELLED else value


def topics_bucket(request, bucket_id):
    """One bucket's topics: counts and samples; rename, merge, re-classify."""
    _require(request, "memories.view_memory")
    bucket = _bucket_or_404(request, bucket_id)
    here = reverse("admin:console_topics_bucket", args=[bucket.pk])
    if request.method == "POST":
        _require(request, "memories.change_memory")
        action, actor = request.POST.get("action"), _actor(request)
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
                        _context(
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
        _context(
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
    _require(request, "memories.view_memory")
    bucket = _bucket_or_404(request, bucket_id)
    topic = _topic_param(request.GET.get("topic", UNLABELLED))
    if request.method == "POST":
        _require(request, "memories.change_memory")
        ids = {parse_uuid(i) for i in request.POST.getlist("memories")}
        if None in ids or Memory.objects.for_bucket(bucket).filter(pk__in=ids).count() != len(ids):
            raise Http404  # a memory of another bucket (or tenant), or no memory at all
        try:
            if not ids:
                raise DomainError("Select the memories to classify again.")
            counts = maintenance_topics.topics_reclassify(bucket=bucket, memory_ids=ids, actor=_actor(request))
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
        _context(
            request, f"{label} — {bucket.name}", bucket=bucket, topic=topic, label=label, page=page,
            topic_param=topic if topic is not None else UNLABELLED,
        ),
    )  # fmt: skip


# --- retrieval playground -------------------------------------------------------------------------


def playground(request):
    """Run a search as an agent would, with the explain breakdown. Nothing is written:
    ``record_access=False`` leaves ``last_accessed_at`` alone."""
    _require(request, "memories.view_memory")
    if request.GET.get("bucket"):
        _bucket_or_404(request, request.GET["bucket"])
    form = PlaygroundForm(
        request.GET or None, initial={"mode": "hybrid", "limit": 10, "include_superseded": True}, user=request.user
    )
    result = None
    if request.GET and form.is_valid():
        data = form.cleaned_data
        result = memories_search(
            bucket=data["bucket"],
            query=data["query"],
            mode=data["mode"],
            limit=data["limit"],
            token_budget=data.get("token_budget"),
            filters=MemoryFilters(include_superseded=data["include_superseded"]),
            explain=True,
            record_access=False,
        )
    return TemplateResponse(
        request, "console/playground.html", _context(request, "Retrieval playground", form=form, result=result)
    )
