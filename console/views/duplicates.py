"""The near-duplicate review queue: merge a pair (keeping A, B, the older or the newer memory)
or keep both, one pair or a selection at a time."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpResponseNotAllowed
from django.shortcuts import redirect
from django.template.response import TemplateResponse

from console.views.base import operator_actor, page_context, require, row_id
from console.views.review import DUPLICATES_PAGE, back_url, queue_view, visible_pairs
from engram_site.exceptions import DomainError
from maintenance.services import duplicate_review


def review_queue(request):
    """Pending near-duplicate pairs side by side, most similar first."""
    return queue_view(request, DUPLICATES_PAGE)


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
    back = back_url(request, DUPLICATES_PAGE)
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
    candidates = visible_pairs(request, DUPLICATES_PAGE).filter(pk__in=ids)
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
            candidates.undecided()
            .with_memories()
            .select_related("bucket", "tenant")
            .order_by(*DUPLICATES_PAGE.queue.order)
        )
        return TemplateResponse(
            request,
            "console/duplicates_confirm.html",
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
