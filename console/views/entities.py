"""The console's entity pages: a bucket's knowledge graph, and an operator's corrections of it.

An operator renames an entity, merges two, splits a wrong merge, adds or removes an alias,
deletes or fixes an edge. Each action calls one function of graph/corrections.py, which
records the correction (who, when) and audits it; a rebuild and later extraction follow it.
Merges, splits and edge deletions show what will happen first and act only on a POST with
``confirm=yes``. Viewing needs ``memories.view_memory``, correcting ``memories.change_memory``
(the graph is derived from the memories).

Every page sees only the tenants the operator operates (console/scoping.py): a bucket,
entity, edge or memory id outside them answers 404 and changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, time

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_date
from django.utils.http import urlencode

from console import graph_picture
from console.scoping import scope_queryset
from console.views.base import bucket_or_404, operator_actor, page_context, require
from engram_site.exceptions import DomainError, NotFound
from graph import corrections, selectors
from graph.extract import normalize_name
from graph.models import Correction, CorrectionKind, Edge, Entity
from graph.selectors import profile as profiles
from tenants.models import Bucket
from tenants.selectors import parse_uuid

ENTITY_PAGE_SIZE = 50
# The memories an entity page lists (and a split can choose from), newest first.
ENTITY_MEMORIES = 100
VIEW, CHANGE = "memories.view_memory", "memories.change_memory"
CONFIRMED_ACTIONS = {"merge", "split", "edge_delete"}
# The tokens of the digest an entity page shows: what an agent asking with this budget gets.
DIGEST_BUDGET = 300


@dataclass(frozen=True)
class CorrectionRow:
    correction: Correction
    label: str
    summary: str


def _name(target: dict | None) -> str:
    return (target or {}).get("name") or (target or {}).get("key") or "?"


def _edge_text(edge: dict) -> str:
    obj = edge.get("object_name") or edge.get("object") or edge.get("literal") or ""
    return f"{edge.get('subject_name') or edge.get('subject')} {edge.get('predicate')} {obj}"


def describe(correction: Correction) -> str:
    """One line saying what a correction did (plain text: the template escapes it)."""
    p, kind = correction.payload or {}, correction.kind
    if kind == CorrectionKind.RENAME:
        return f"“{_name(p.get('entity'))}” renamed “{_name(p.get('to'))}”"
    if kind == CorrectionKind.MERGE:
        return f"“{_name(p.get('source'))}” merged into “{_name(p.get('target'))}”"
    if kind == CorrectionKind.SPLIT:
        moved = len(p.get("memory_ids") or [])
        aliases = ", ".join(p.get("aliases") or []) or "none"
        return (
            f"“{_name(p.get('to'))}” split from “{_name(p.get('entity'))}” "
            f"({moved} memor{'y' if moved == 1 else 'ies'}; aliases: {aliases})"
        )
    if kind == CorrectionKind.ALIAS_ADD:
        return f"alias “{p.get('alias')}” added to “{_name(p.get('entity'))}”"
    if kind == CorrectionKind.ALIAS_REMOVE:
        return f"alias “{p.get('alias')}” removed from “{_name(p.get('entity'))}”"
    if kind == CorrectionKind.EDGE_DELETE:
        return f"edge deleted: {_edge_text(p.get('edge') or {})}"
    if kind == CorrectionKind.EDGE_FIX:
        to = p.get("to") or {}
        new = f"{to.get('predicate')} {_name(to['object']) if to.get('object') else to.get('literal')}"
        return f"edge fixed: {_edge_text(p.get('edge') or {})} → {new}"
    return kind


def _rows(queryset, limit: int = 100) -> list[CorrectionRow]:
    labels = dict(CorrectionKind.choices)
    return [CorrectionRow(c, labels.get(c.kind, c.kind), describe(c)) for c in queryset[:limit]]


def _entity_or_404(bucket: Bucket, value) -> Entity:
    pk = parse_uuid(str(value))
    entity = Entity.objects.for_bucket(bucket).filter(pk=pk).first() if pk else None
    if entity is None:
        raise Http404
    return entity


def _named(bucket: Bucket, name: str, *, exclude: Entity | None = None, type: str | None = None) -> Entity:
    """The bucket's entity called ``name`` (its name, else an alias; the same type preferred)."""
    key = normalize_name(name or "")
    if not key:
        raise DomainError("Name the entity.")
    entities = Entity.objects.for_bucket(bucket)
    if exclude is not None:
        entities = entities.exclude(pk=exclude.pk)
    found = list(entities.filter(normalized_name=key)) or list(entities.filter(aliases__contains=[key]))
    if not found:
        raise DomainError(f"No entity of this bucket is called “{name.strip()}”.")
    found.sort(key=lambda e: (e.type != type, -e.mention_count, str(e.pk)))
    return found[0]


# --- pages ----------------------------------------------------------------------------------------


def entities_index(request):
    """The operator's buckets, each with its entity count."""
    require(request, VIEW)
    buckets = list(
        scope_queryset(Bucket.objects.select_related("tenant"), user=request.user).order_by("tenant__name", "name")
    )
    counts = selectors.entity_counts(bucket_ids=[b.pk for b in buckets])
    for bucket in buckets:
        bucket.entity_count = counts.get(bucket.pk, 0)
    return TemplateResponse(request, "console/entities_index.html", page_context(request, "Entities", buckets=buckets))


def entities_bucket(request, bucket_id):
    """A bucket's entities (search by name or alias), and the corrections made to its graph."""
    require(request, VIEW)
    bucket = bucket_or_404(request, bucket_id)
    query, kind = request.GET.get("q", "")[:200], request.GET.get("type", "")[:20]
    entities = selectors.entity_list(bucket=bucket, query=query or None, type=kind or None)
    page = Paginator(entities, ENTITY_PAGE_SIZE).get_page(request.GET.get("page"))
    return TemplateResponse(
        request,
        "console/entities_bucket.html",
        page_context(
            request, f"Entities of {bucket.name}", bucket=bucket, page=page, query=query, type=kind,
            corrections=_rows(selectors.corrections_of_bucket(bucket=bucket)),
            filters=urlencode({k: v for k, v in (("q", query), ("type", kind)) if v}),
        ),
    )  # fmt: skip


def entity_page(request, bucket_id, entity_id):
    """One entity: its neighbourhood and the timeline of its facts (as of a day, ``?as_of=``), the
    digest an agent gets, aliases, memories, edges, corrections, and the forms that correct them."""
    require(request, VIEW)
    bucket = bucket_or_404(request, bucket_id)
    entity = _entity_or_404(bucket, entity_id)
    if request.method == "POST":
        require(request, CHANGE)
        return _correct(request, bucket, entity)
    edges = list(selectors.edges_of_entity(entity=entity, include_expired=True))
    as_of = _as_of(request)
    profile = profiles.entity_profile(entity=entity, as_of=as_of, budget=DIGEST_BUDGET, limit=profiles.MAX_FACTS)
    now = timezone.now()
    return TemplateResponse(
        request,
        "console/entity.html",
        page_context(
            request, str(entity.name), bucket=bucket, entity=entity, edges=edges, profile=profile,
            picture=graph_picture.neighbourhood(profile), chart=graph_picture.timeline(profile, now=now),
            as_of_value=as_of.date().isoformat() if as_of else "", digest_budget=DIGEST_BUDGET,
            memories=list(selectors.entity_memories(entity=entity)[:ENTITY_MEMORIES]),
            corrections=_rows(selectors.corrections_of_entity(entity=entity)),
        ),
    )  # fmt: skip


def _as_of(request) -> datetime | None:
    """The day (``?as_of=YYYY-MM-DD``) whose end the picture shows the entity at; a bad one is ignored, and said."""
    value = request.GET.get("as_of", "").strip()
    if not value:
        return None
    try:
        day = parse_date(value) if len(value) <= 10 else None
    except ValueError:  # well formed, but no such day (2024-02-30)
        day = None
    if day is None or not 1900 <= day.year <= 2200:
        messages.error(request, "The date to show the entity at is not a date (YYYY-MM-DD): showing it now.")
        return None
    return datetime.combine(day, time.max, tzinfo=UTC)


def _edge_of(entity: Entity, value) -> Edge:
    pk = parse_uuid(str(value or ""))
    edge = selectors.edges_of_entity(entity=entity, include_expired=True).filter(pk=pk).first() if pk else None
    if edge is None:
        raise Http404
    return edge


def _correct(request, bucket: Bucket, entity: Entity):
    here = reverse("admin:console_entity", args=[bucket.pk, entity.pk])
    post, actor, action = request.POST, operator_actor(request), request.POST.get("action", "")
    # Ids of rows outside this entity are 404 before anything else is looked at.
    edge = _edge_of(entity, post.get("edge")) if action in ("edge_delete", "edge_fix") else None
    memory_ids = []
    if action == "split":
        mentioned = set(selectors.entity_memories(entity=entity).values_list("pk", flat=True))
        memory_ids = [parse_uuid(v) for v in post.getlist("memories")]
        if any(pk is None or pk not in mentioned for pk in memory_ids):
            raise Http404
    try:
        if action in CONFIRMED_ACTIONS and post.get("confirm") != "yes":
            return _confirm(request, bucket, entity, action, edge=edge, memory_ids=memory_ids)
        if action == "rename":
            corrections.entity_rename(entity=entity, name=post.get("name", ""), actor=actor)
            messages.success(request, "Renamed.")
        elif action == "alias_add":
            corrections.entity_alias_add(entity=entity, alias=post.get("alias", ""), actor=actor)
            messages.success(request, "Alias added.")
        elif action == "alias_remove":
            corrections.entity_alias_remove(entity=entity, alias=post.get("alias", ""), actor=actor)
            messages.success(request, "Alias removed.")
        elif action == "merge":
            target = _named(bucket, post.get("into", ""), exclude=entity, type=entity.type)
            corrections.entities_merge(source=entity, target=target, actor=actor)
            messages.success(request, f"Merged into “{target.name}”.")
            return redirect(reverse("admin:console_entity", args=[bucket.pk, target.pk]))
        elif action == "split":
            aliases = post.getlist("aliases")
            new = corrections.entity_split(
                entity=entity, name=post.get("name", ""), aliases=aliases, memory_ids=memory_ids, actor=actor
            )
            messages.success(request, f"Split “{new.name}” off.")
        elif action == "edge_delete":
            corrections.edge_delete(edge=edge, actor=actor)
            messages.success(request, "Edge deleted.")
        elif action == "edge_fix":
            as_entity = post.get("object_kind") == "entity"
            obj = _named(bucket, post.get("object", "")) if as_entity else None
            corrections.edge_fix(
                edge=edge, predicate=post.get("predicate", ""), object_entity=obj,
                object_literal=None if as_entity else post.get("object", ""), actor=actor,
            )  # fmt: skip
            messages.success(request, "Edge fixed.")
        else:
            raise DomainError("Unknown action.")
    except NotFound:
        raise Http404 from None
    except DomainError as exc:
        messages.error(request, exc.message)
    return redirect(here)


def _confirm(request, bucket: Bucket, entity: Entity, action: str, *, edge, memory_ids):
    post = request.POST
    context = {"bucket": bucket, "entity": entity, "action": action, "edge": edge}
    if action == "merge":
        context["target"] = _named(bucket, post.get("into", ""), exclude=entity, type=entity.type)
        context["into"] = post.get("into", "")
    elif action == "split":
        _name_ok = normalize_name(post.get("name", ""))
        if not _name_ok:
            raise DomainError("Name the entity to split off.")
        aliases = [a for a in post.getlist("aliases") if a in entity.aliases]
        if not memory_ids and not aliases:
            raise DomainError("Choose the memories or aliases that belong to the other entity.")
        context.update(
            name=post.get("name", ""), aliases=aliases,
            memories=list(selectors.entity_memories(entity=entity).filter(pk__in=memory_ids)),
        )  # fmt: skip
    return TemplateResponse(request, "console/entity_confirm.html", page_context(request, "Confirm", **context))
