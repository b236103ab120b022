"""The retrieval playground: a search as an agent would run it, explained."""

from __future__ import annotations

from django.template.response import TemplateResponse

from console.forms import PlaygroundForm
from console.views.base import bucket_or_404, page_context, require
from memories.filters import MemoryFilters
from memories.retrieval import memories_search


def playground(request):
    """Run a search as an agent would, with the explain breakdown. Nothing is written:
    ``record_access=False`` leaves ``last_accessed_at`` alone."""
    require(request, "memories.view_memory")
    if request.GET.get("bucket"):
        bucket_or_404(request, request.GET["bucket"])
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
        request, "console/playground.html", page_context(request, "Retrieval playground", form=form, result=result)
    )
