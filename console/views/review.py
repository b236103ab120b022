"""What the two review queues' pages share (near-duplicates: duplicates.py; conflicts:
conflicts.py), written once: the undecided pairs the operator may see, narrowed to a tenant or a
bucket; the queue's page, one page of pairs at a time; the pairs a decision names, and where the
operator goes back to after it.

A tenant, bucket or pair outside the tenants the operator operates answers 404, like a missing
one, and changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.core.paginator import Paginator
from django.http import Http404
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.http import urlencode

from console.scoping import operator_tenants, scope_queryset
from console.views.base import bucket_or_404, page_context, require
from maintenance.review import CONFLICTS, DUPLICATES, Queue
from tenants.selectors import parse_uuid

PAGE_SIZE = 25


@dataclass(frozen=True)
class QueuePage:
    queue: Queue
    url_name: str  # the queue's page, admin:<url_name>
    view_permission: str
    title: str
    template: str


DUPLICATES_PAGE = QueuePage(
    queue=DUPLICATES,
    url_name="console_review",
    view_permission="maintenance.view_duplicatecandidate",
    title="Near-duplicate review",
    template="console/duplicates.html",
)
CONFLICTS_PAGE = QueuePage(
    queue=CONFLICTS,
    url_name="console_conflicts",
    view_permission="maintenance.view_conflictcandidate",
    title="Contradiction review",
    template="console/conflicts.html",
)


def visible_pairs(request, page: QueuePage):
    """The queue's pairs the operator may see, decided or not."""
    return scope_queryset(page.queue.model.objects.all(), user=request.user)


def undecided_pairs(request, page: QueuePage):
    """The undecided pairs the operator may see, with both memories, in the queue's order;
    only one tenant's or one bucket's when the query string names it."""
    pairs = visible_pairs(request, page).undecided().with_memories().select_related("bucket", "tenant")
    tenant_id, bucket_id = request.GET.get("tenant"), request.GET.get("bucket")
    if tenant_id:
        # A malformed id, a missing tenant and one the operator does not operate: all 404.
        pk = parse_uuid(tenant_id)
        if pk is None or not operator_tenants(request.user).filter(pk=pk).exists():
            raise Http404
        pairs = pairs.filter(tenant_id=pk)
    if bucket_id:
        pairs = pairs.filter(bucket_id=bucket_or_404(request, bucket_id).pk)
    return pairs.order_by(*page.queue.order)


def queue_view(request, page: QueuePage, **extra):
    """The undecided pairs side by side, one page at a time, with a filter by tenant (``extra``:
    more of the page's context)."""
    require(request, page.view_permission)
    pairs = Paginator(undecided_pairs(request, page), PAGE_SIZE).get_page(request.GET.get("page"))
    tenants = (
        operator_tenants(request.user)
        .filter(pk__in=visible_pairs(request, page).undecided().values("tenant_id").distinct())
        .order_by("name")
    )
    return TemplateResponse(
        request,
        page.template,
        page_context(
            request,
            page.title,
            page=pairs,
            tenants=tenants,
            selected_tenant=request.GET.get("tenant", ""),
            query=urlencode({k: v for k, v in request.GET.items() if k in ("tenant", "bucket")}),
            **extra,
        ),
    )


def back_url(request, page: QueuePage) -> str:
    """The queue's page as the operator left it (its filters ride along in the form's ``query``)."""
    return reverse(f"admin:{page.url_name}") + (f"?{request.POST['query']}" if request.POST.get("query") else "")
