"""The conflict review queue (the page says "Contradiction review"): one pair at a time, keep
both, supersede one memory by the other, or merge them."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpResponseNotAllowed
from django.shortcuts import redirect
from django.template.response import TemplateResponse

from console.views.base import operator_actor, page_context, require, row_id
from console.views.review import CONFLICTS_PAGE, back_url, queue_view, visible_pairs
from engram_site.exceptions import DomainError
from maintenance.models import ConflictStatus
from maintenance.services import conflict_review

# The latest supersedes the conflicts page lists with their undo.
RECENT_SUPERSEDES = 20


def conflicts_queue(request):
    """Open conflicts side by side, newest found first, with the detector's reason; below them,
    the latest pairs resolved by supersede, each with its undo."""
    superseded = (
        visible_pairs(request, CONFLICTS_PAGE)
        .filter(status=ConflictStatus.SUPERSEDED)
        .with_memories()
        .select_related("bucket", "tenant")
        .order_by("-resolved_at", "-id")[:RECENT_SUPERSEDES]
    )
    return queue_view(request, CONFLICTS_PAGE, superseded=superseded)


# decision -> (action, kept side)
CONFLICT_DECISIONS = {
    "keep_both": ("keep_both", None),
    "supersede_a": ("supersede", "b"),  # A is superseded: B stays current
    "supersede_b": ("supersede", "a"),
    "merge_a": ("merge", "a"),  # A absorbs B
    "merge_b": ("merge", "b"),
    "undo": ("undo", None),  # a supersede undone: the pair is open again
}


def conflicts_resolve(request):
    """One pair's decision. Keep both and supersede act at once (a supersede is undone from the
    list of superseded pairs: the pair is open again); a merge, which deletes a memory, shows what will happen first and
    acts only when confirmed, optionally with new content for the kept memory."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    require(request, "maintenance.change_conflictcandidate", "memories.change_memory")
    back = back_url(request, CONFLICTS_PAGE)
    candidate_id, _, decision = request.POST.get("pair", "").partition(":")
    known = row_id(candidate_id)
    candidate = visible_pairs(request, CONFLICTS_PAGE).filter(pk=known).first() if known else None
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
                visible_pairs(request, CONFLICTS_PAGE)
                .undecided()
                .with_memories()
                .select_related("bucket", "tenant")
                .filter(pk=candidate.pk)
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
        if action == "undo":
            result = conflict_review.conflict_undo(candidate=candidate, actor=operator_actor(request))
        else:
            result = conflict_review.conflict_resolve(
                candidate=candidate, action=action, keep=keep, content=content, actor=operator_actor(request)
            )
    except DomainError as exc:
        messages.error(request, exc.message)
        return redirect(back)
    done = {
        "keep_both": "Kept both memories; this pair will not be raised again.",
        "supersede": f"Memory {result.other_id} is now superseded by {result.kept_id}.",
        "merge": f"Memory {result.kept_id} absorbed {result.other_id}.",
        "undo": f"Memory {result.other_id} is no longer superseded by {result.kept_id}; the pair is open again.",
    }
    messages.success(request, done[action])
    return redirect(back)
