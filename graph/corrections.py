"""Operators correcting a bucket's graph: rename, merge, split, aliases, edges.

Every correction goes through one function here, which in one transaction (under the
bucket's graph lock, so no extraction interleaves) changes the current graph, records the
correction in graph_corrections and writes the audit event. The recorded correction names
entities by normalized name and type and edges by what they say, so a rebuild — which
gives every row a new id — and later extraction follow it (graph/rules.py,
graph.services.entities.EntityResolver).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable

from django.db import transaction
from django.db.models import Case, When

from audit.services import Actor, audit_record
from engram_site.exceptions import DomainError, NotFound
from graph.extract import normalize_name
from graph.models import Correction, CorrectionKind, Edge, Entity, Mention
from graph.rules import Target
from graph.services.entities import entity_merge, mention_counts_refresh
from graph.services.extraction import edge_fixed_key
from graph.services.locks import bucket_lock
from graph.services.timelines import timelines_recompute

NAME_MAX_CHARS = 500
PREDICATE = re.compile(r"^[a-z][a-z0-9_:]{0,59}$")


def _target(entity: Entity) -> dict:
    return Target(key=entity.normalized_name, type=entity.type, name=entity.name).as_dict()


def _fresh(entity: Entity) -> Entity:
    """``entity`` as it is now, under the bucket's lock (an extraction may have merged it away)."""
    bucket_lock(entity.bucket)
    current = Entity.objects.filter(pk=entity.pk, tenant_id=entity.tenant_id).first()
    if current is None:
        raise NotFound("Entity not found.")
    return current


def _record(*, entity_or_edge, kind: str, payload: dict, names: Iterable[str], actor: Actor, ids: list) -> Correction:
    correction = Correction.objects.create(
        tenant_id=entity_or_edge.tenant_id,
        bucket_id=entity_or_edge.bucket_id,
        kind=kind,
        payload=payload,
        names=sorted({n for n in names if n}),
        actor_kind=actor.kind,
        actor_id=actor.id[:64],
        actor_label=actor.label[:200],
    )
    audit_record(
        actor=actor, action=f"graph.{kind}", tenant=entity_or_edge.bucket.tenant,
        object_type="edge" if kind.startswith("edge") else "entity", object_ids=ids,
        details={"bucket_id": str(entity_or_edge.bucket_id), "correction_id": correction.pk, **payload},
    )  # fmt: skip
    return correction


def _clean_name(name: str) -> tuple[str, str]:
    name = " ".join((name or "").split())
    if len(name) > NAME_MAX_CHARS:
        raise DomainError(f"A name is at most {NAME_MAX_CHARS} characters.")
    key = normalize_name(name)
    if not key:
        raise DomainError("The name must contain a letter or digit (titles and articles alone name nobody).")
    return name, key


def _same_name(entity: Entity, key: str, type: str | None = None):
    others = Entity.objects.for_bucket(entity.bucket).filter(normalized_name=key).exclude(pk=entity.pk)
    return others.filter(type=type) if type else others


def _timelines_recompute(entity_bucket, subject_ids: Iterable[uuid.UUID], extra_memories: Iterable = ()) -> None:
    """Recompute the functional timelines of ``subject_ids`` and the supersession of their memories."""
    timelines = set(
        Edge.objects.for_bucket(entity_bucket)
        .filter(subject_id__in=list(subject_ids), functional_key__isnull=False)
        .values_list("subject_id", "functional_key")
        .distinct()
    )
    timelines_recompute(bucket=entity_bucket, timelines=timelines, memory_ids=set(extra_memories))


# --- entities -------------------------------------------------------------------------------------


@transaction.atomic
def entity_rename(*, entity: Entity, name: str, actor: Actor) -> Entity:
    """Give ``entity`` a new name; its old name becomes an alias and keeps finding it."""
    entity = _fresh(entity)
    name, key = _clean_name(name)
    if name == entity.name:
        raise DomainError("That is already its name.")
    if key != entity.normalized_name and _same_name(entity, key, entity.type).exists():
        raise DomainError(f"Another {entity.type} is named “{name}”: merge the two instead.")
    before = _target(entity)
    old_key = entity.normalized_name
    entity.name, entity.normalized_name = name, key
    if key != old_key:
        entity.aliases = sorted(({*entity.aliases, old_key}) - {key})
    entity.save(update_fields=["name", "normalized_name", "aliases"])
    _record(
        entity_or_edge=entity, kind=CorrectionKind.RENAME, payload={"entity": before, "to": _target(entity)},
        names=[old_key, key], actor=actor, ids=[entity.pk],
    )  # fmt: skip
    return entity


@transaction.atomic
def entities_merge(*, source: Entity, target: Entity, actor: Actor) -> Entity:
    """Make ``source`` part of ``target``: its mentions, edges, name and aliases go to ``target``
    and it is deleted. Extraction resolves its names to ``target`` from now on."""
    if source.pk == target.pk:
        raise DomainError("Choose two different entities.")
    if (source.tenant_id, source.bucket_id) != (target.tenant_id, target.bucket_id):
        raise DomainError("Both entities must be in the same bucket.")
    source, target = _fresh(source), _fresh(target)
    payload = {"source": _target(source), "target": _target(target), "aliases": sorted(source.aliases)}
    ids = [source.pk, target.pk]
    entity_merge(source=source, target=target)
    # An edge between the two is now an edge of one entity with itself: it says nothing.
    Edge.objects.filter(subject=target, object_entity=target).delete()
    target.refresh_from_db()
    _timelines_recompute(target.bucket, [target.pk])
    _record(
        entity_or_edge=target, kind=CorrectionKind.MERGE, payload=payload,
        names=[source.normalized_name, target.normalized_name, *source.aliases], actor=actor, ids=ids,
    )  # fmt: skip
    return target


@transaction.atomic
def entity_split(
    *, entity: Entity, name: str, aliases: Iterable[str] = (), memory_ids: Iterable = (), actor: Actor
) -> Entity:
    """Undo a wrong merge: the mentions of ``entity`` in ``memory_ids`` (with the edges those
    memories state about it) and its ``aliases`` go to the entity named ``name`` — a new one of
    the same type, or the bucket's existing one of that name. Extraction keeps them apart."""
    entity = _fresh(entity)
    name, key = _clean_name(name)
    aliases = sorted(set(aliases))
    if key == entity.normalized_name:
        raise DomainError("The new entity needs a name of its own.")
    unknown = set(aliases) - set(entity.aliases)
    if unknown:
        raise DomainError(f"Not an alias of {entity.name}: {', '.join(sorted(unknown))}.")
    mentioned = set(Mention.objects.filter(entity=entity).values_list("memory_id", flat=True))
    memories = {m if isinstance(m, uuid.UUID) else _uuid(m) for m in memory_ids}
    if not memories <= mentioned:
        raise DomainError(f"Choose memories that mention {entity.name}.")
    if not memories and not aliases:
        raise DomainError("Choose the memories or aliases that belong to the other entity.")
    new = (
        _same_name(entity, key)
        .order_by(Case(When(type=entity.type, then=0), default=1), "-mention_count", "id")
        .first()
    )
    if new is None:
        new = Entity.objects.create(
            tenant_id=entity.tenant_id, bucket_id=entity.bucket_id, name=name, normalized_name=key, type=entity.type
        )
        new.refresh_from_db()
    before = _target(entity)
    ids = list(memories)
    # Mentions: the chosen memories now mention the new entity (once).
    already = set(Mention.objects.filter(entity=new, memory_id__in=ids).values_list("memory_id", flat=True))
    Mention.objects.filter(entity=entity, memory_id__in=already).delete()
    Mention.objects.filter(entity=entity, memory_id__in=ids).update(entity=new)
    Edge.objects.filter(subject=entity, source_memory_id__in=ids).update(subject=new)
    Edge.objects.filter(object_entity=entity, source_memory_id__in=ids).update(object_entity=new)
    Edge.objects.filter(subject=new, object_entity=new).delete()
    entity.aliases = sorted(set(entity.aliases) - set(aliases) - {key})
    entity.save(update_fields=["aliases"])
    new.aliases = sorted((set(new.aliases) | set(aliases)) - {key})
    new.save(update_fields=["aliases"])
    mention_counts_refresh(bucket=entity.bucket, entity_ids=[entity.pk, new.pk])
    _timelines_recompute(entity.bucket, [entity.pk, new.pk], ids)
    new.refresh_from_db()
    _record(
        entity_or_edge=new, kind=CorrectionKind.SPLIT,
        payload={"entity": before, "to": _target(new), "aliases": aliases, "memory_ids": sorted(str(m) for m in ids)},
        names=[before["key"], key, *aliases], actor=actor, ids=[entity.pk, new.pk],
    )  # fmt: skip
    return new


def _uuid(value) -> uuid.UUID:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise DomainError("Not a memory id.") from None


@transaction.atomic
def entity_alias_add(*, entity: Entity, alias: str, actor: Actor) -> Entity:
    """Let ``alias`` name ``entity``: mentions of it resolve to ``entity`` from now on."""
    entity = _fresh(entity)
    _name, key = _clean_name(alias)
    if key == entity.normalized_name or key in entity.aliases:
        raise DomainError(f"{entity.name} is already known as “{key}”.")
    named = _same_name(entity, key).first()
    if named is not None:
        raise DomainError(f"An entity is named “{named.name}”: merge it into {entity.name} instead.")
    # The alias leaves any other entity that had it (it names one entity).
    others = list(Entity.objects.for_bucket(entity.bucket).filter(aliases__contains=[key]).exclude(pk=entity.pk))
    for other in others:
        other.aliases = [a for a in other.aliases if a != key]
        other.save(update_fields=["aliases"])
    entity.aliases = sorted({*entity.aliases, key})
    entity.save(update_fields=["aliases"])
    _record(
        entity_or_edge=entity, kind=CorrectionKind.ALIAS_ADD, payload={"entity": _target(entity), "alias": key},
        names=[entity.normalized_name, key], actor=actor, ids=[entity.pk, *(o.pk for o in others)],
    )  # fmt: skip
    return entity


@transaction.atomic
def entity_alias_remove(*, entity: Entity, alias: str, actor: Actor) -> Entity:
    """``alias`` no longer names ``entity``; extraction does not give it back."""
    entity = _fresh(entity)
    if alias not in entity.aliases:
        raise DomainError(f"“{alias}” is not an alias of {entity.name}.")
    entity.aliases = [a for a in entity.aliases if a != alias]
    entity.save(update_fields=["aliases"])
    _record(
        entity_or_edge=entity, kind=CorrectionKind.ALIAS_REMOVE, payload={"entity": _target(entity), "alias": alias},
        names=[entity.normalized_name, alias], actor=actor, ids=[entity.pk],
    )  # fmt: skip
    return entity


# --- edges ----------------------------------------------------------------------------------------


def _edge_payload(edge: Edge) -> dict:
    subject = edge.subject.normalized_name
    obj = edge.object_entity.normalized_name if edge.object_entity_id else None
    return {
        "subject": subject, "subject_name": edge.subject.name, "predicate": edge.predicate, "object": obj,
        "object_name": edge.object_entity.name if edge.object_entity_id else None,
        "literal": None if edge.object_entity_id else edge.object_literal, "memory_id": str(edge.source_memory_id),
    }  # fmt: skip


def _fresh_edge(edge: Edge) -> Edge:
    bucket_lock(edge.bucket)
    current = Edge.objects.filter(pk=edge.pk, tenant_id=edge.tenant_id).select_related("subject", "object_entity")
    found = current.first()
    if found is None:
        raise NotFound("Edge not found.")
    return found


@transaction.atomic
def edge_delete(*, edge: Edge, actor: Actor) -> None:
    """Delete a wrong edge; extraction does not state it again from the same memory."""
    edge = _fresh_edge(edge)
    payload = {"edge": _edge_payload(edge)}
    edge_id, subject_id, memory_id = edge.pk, edge.subject_id, edge.source_memory_id
    edge.delete()
    _timelines_recompute(edge.bucket, [subject_id], [memory_id])
    _record(
        entity_or_edge=edge, kind=CorrectionKind.EDGE_DELETE, payload=payload,
        names=[payload["edge"]["subject"], payload["edge"]["object"]], actor=actor, ids=[edge_id],
    )  # fmt: skip


@transaction.atomic
def edge_fix(
    *, edge: Edge, predicate: str, object_entity: Entity | None = None, object_literal: str | None = None, actor: Actor
) -> Edge:
    """Change what an edge says (its predicate, its object entity or literal); extraction
    states the fixed edge from then on."""
    edge = _fresh_edge(edge)
    predicate = (predicate or "").strip()
    if not PREDICATE.match(predicate):
        raise DomainError("A predicate is lowercase letters, digits and underscores (at most 60), e.g. lives_in.")
    literal = " ".join((object_literal or "").split()) or None
    if (object_entity is None) == (literal is None):
        raise DomainError("Give the edge an object: an entity or a text, not both.")
    if literal is not None and len(literal) > NAME_MAX_CHARS:
        raise DomainError(f"The object text is at most {NAME_MAX_CHARS} characters.")
    if object_entity is not None:
        if (object_entity.tenant_id, object_entity.bucket_id) != (edge.tenant_id, edge.bucket_id):
            raise NotFound("Entity not found.")
        if object_entity.pk == edge.subject_id:
            raise DomainError("An edge joins two different entities.")
    before = _edge_payload(edge)
    to = {
        "predicate": predicate,
        "object": _target(object_entity) if object_entity is not None else None,
        "literal": literal,
    }
    if (predicate, object_entity.pk if object_entity else None, literal) == (
        edge.predicate, edge.object_entity_id, None if edge.object_entity_id else edge.object_literal,
    ):  # fmt: skip
        raise DomainError("The edge already says that.")
    edge.functional_key = edge_fixed_key(predicate, edge.predicate, edge.functional_key)
    edge.predicate = predicate
    edge.object_entity = object_entity
    edge.object_literal = literal
    edge.save(update_fields=["functional_key", "predicate", "object_entity", "object_literal"])
    _timelines_recompute(edge.bucket, [edge.subject_id], [edge.source_memory_id])
    _record(
        entity_or_edge=edge, kind=CorrectionKind.EDGE_FIX, payload={"edge": before, "to": to},
        names=[before["subject"], before["object"], to["object"]["key"] if to["object"] else None],
        actor=actor, ids=[edge.pk],
    )  # fmt: skip
    return edge
