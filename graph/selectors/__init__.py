"""Reads of the knowledge graph, always scoped to one tenant (and the token's bucket)."""

from __future__ import annotations

import uuid
from datetime import datetime

from django.db import connection
from django.db.models import Count, F, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce

from engram_site.exceptions import NotFound
from graph.extract import first_name_variants, may_be_short_form, normalize_name
from graph.extract.vocabulary import SHORT_FORM_LETTERS, short_form_people
from graph.models import Correction, Edge, Entity, Mention
from memories.models import Memory
from tenants.models import AgentRestriction, ApiToken, Bucket, Tenant
from tenants.selectors import parse_uuid, token_scoped


def with_mentions_seen(entities: QuerySet[Entity], agents: AgentRestriction | None) -> QuerySet[Entity]:
    """``entities`` with ``mentions_seen``: their mention count, or for a token held to agents the
    count of the mentions by memories it may read (the others' are not its to count)."""
    if agents is None:
        return entities.annotate(mentions_seen=F("mention_count"))
    seen = (
        Mention.objects.filter(entity_id=OuterRef("pk"), memory__in=Memory.objects.visible_to(agents))
        .order_by()
        .values("entity_id")
        .annotate(n=Count("*"))
        .values("n")
    )
    return entities.annotate(mentions_seen=Coalesce(Subquery(seen), 0))


def entity_list(
    *, bucket: Bucket, query: str | None = None, type: str | None = None, agents: AgentRestriction | None = None
) -> QuerySet[Entity]:
    entities = with_mentions_seen(Entity.objects.for_bucket(bucket).visible_to(agents), agents)
    if query:
        key = normalize_name(query)
        if not key:  # only punctuation or articles ("!!!", "the"): it names nothing, not everything
            return entities.none()
        entities = entities.filter(Q(normalized_name__contains=key) | Q(aliases__contains=[key]))
    if type:
        entities = entities.filter(type=type.upper())
    return entities.order_by("-mentions_seen", "name", "id")


def entity_get(*, tenant: Tenant, entity_id, token: ApiToken | None = None) -> Entity:
    pk = parse_uuid(entity_id)
    entities = token_scoped(Entity.objects.filter(pk=pk), tenant=tenant, token=token)
    entity = with_mentions_seen(entities, token.agents if token else None).first() if pk else None
    if entity is None:
        raise NotFound("Entity not found.")
    return entity


def edge_get(*, tenant: Tenant, edge_id, token: ApiToken | None = None) -> Edge:
    pk = parse_uuid(edge_id)
    edges = token_scoped(Edge.objects.filter(pk=pk), tenant=tenant, token=token)
    edge = edges.select_related("subject", "object_entity").first() if pk else None
    if edge is None:
        raise NotFound("Edge not found.")
    return edge


def edges_of_entity(
    *,
    entity: Entity,
    as_of: datetime | None = None,
    agents: AgentRestriction | None = None,
    include_expired: bool = False,
) -> QuerySet[Edge]:
    """The edges touching ``entity``; not those of a memory past its ``expires_at`` unless
    ``include_expired`` (the console's operators see them). Validity windows are as stored."""
    edges = (
        Edge.objects.filter(tenant_id=entity.tenant_id, bucket_id=entity.bucket_id)
        .filter(Q(subject=entity) | Q(object_entity=entity))
        .visible_to(agents)
    )
    if not include_expired:
        edges = edges.stated()
    if as_of is not None:
        edges = edges.valid_at(as_of)
    return edges.select_related("subject", "object_entity").order_by("predicate", "valid_from", "id")


def edge_list(
    *,
    bucket: Bucket,
    valid_at: datetime | None = None,
    entity_id=None,
    predicate: str | None = None,
    agents: AgentRestriction | None = None,
) -> QuerySet[Edge]:
    """The bucket's edges, newest first; not those of a memory past its ``expires_at``."""
    edges = Edge.objects.for_bucket(bucket).visible_to(agents).stated()
    if valid_at is not None:
        edges = edges.valid_at(valid_at)
    if entity_id is not None:
        pk = parse_uuid(entity_id)
        edges = edges.filter(Q(subject_id=pk) | Q(object_entity_id=pk)) if pk else edges.none()
    if predicate:
        edges = edges.filter(predicate=predicate)
    return edges.select_related("subject", "object_entity").order_by("-valid_from", "id")


def edge_memories(*, edge: Edge, agents: AgentRestriction | None = None) -> QuerySet[Memory]:
    """The memory an edge came from, and every memory stating the same fact (``agents``: those
    a token held to agents may read); not those past their ``expires_at``, which search no
    longer returns either."""
    same_fact = Edge.objects.filter(
        tenant_id=edge.tenant_id,
        bucket_id=edge.bucket_id,
        subject_id=edge.subject_id,
        predicate=edge.predicate,
        object_entity_id=edge.object_entity_id,
        object_literal=edge.object_literal,
    ).values("source_memory_id")
    return (
        Memory.objects.filter(tenant_id=edge.tenant_id, bucket_id=edge.bucket_id)
        .filter(Q(pk=edge.source_memory_id) | Q(pk__in=same_fact))
        .unexpired()
        .visible_to(agents)
        .defer("embedding", "context_embedding")
        .order_by("created_at", "id")
    )


def entities_by_first_name(*, bucket: Bucket, words: list[str]) -> dict[str, list[uuid.UUID]]:
    """For each one-word name, the bucket's named PERSON entities of two or more words whose
    first word is that name or one of its nickname forms, else the person it is a short form of
    ("Mel": Melanie), as extraction reads it (at most two each: one means unique)."""
    return entities_by_partial_name(bucket=bucket, words=words, surnames=False, short_forms=True)


def entities_by_partial_name(
    *, bucket: Bucket, words: list[str], surnames: bool = True, short_forms: bool = False
) -> dict[str, list[uuid.UUID]]:
    """For each one-word name, the bucket's named PERSON entities of two or more words it may
    stand for (graph.extract.partial_name_of): by first name or its nickname forms, and with
    ``surnames`` by last word ("Natarajan" for Priya Natarajan). At most two each, the most
    mentioned first: one means the name is unambiguous. With ``short_forms``, a name none of
    them may stand for is also read as a short form (entities_by_short_form)."""
    wanted = {word: first_name_variants(word) for word in words if word and " " not in word}
    if not wanted:
        return {}
    firsts = sorted(set().union(*wanted.values()))
    lasts = sorted(wanted) if surnames else []
    # The people a short form may stand for come with the same statement (one round trip).
    shorts = [w for w in wanted if may_be_short_form(w)] if short_forms else []
    beginnings = sorted({w[:SHORT_FORM_LETTERS] for w in shorts})
    with connection.cursor() as cur:
        # graph_entities_first_word / _last_word: (tenant, bucket, first or last word of the
        # name) for PERSON rows.
        cur.execute(
            """
            SELECT split_part(normalized_name, ' ', 1), split_part(normalized_name, ' ', -1),
                   strpos(normalized_name, ' ') > 0, id
            FROM graph_entities
            WHERE tenant_id = %s AND bucket_id = %s AND type = 'PERSON'
              AND (strpos(normalized_name, ' ') > 0
                   AND (split_part(normalized_name, ' ', 1) = ANY(%s) OR split_part(normalized_name, ' ', -1) = ANY(%s))
                   OR left(split_part(normalized_name, ' ', 1), %s) = ANY(%s))
              -- a name, not a description such as "sister of Bob" (normalized "bob sister") that an
              -- older extractor stored
              AND split_part(lower(name), ' ', 1) = split_part(normalized_name, ' ', 1)
            ORDER BY mention_count DESC, id
            """,
            [bucket.tenant_id, bucket.pk, firsts, lasts, SHORT_FORM_LETTERS, beginnings],
        )
        rows = cur.fetchall()
    found: dict[str, list[uuid.UUID]] = {}
    for word, forms in wanted.items():
        ids = [pk for first, last, full, pk in rows if full and (first in forms or surnames and last == word)]
        found[word] = list(dict.fromkeys(ids))[:2]
        if not found[word] and word in shorts:
            found[word] = short_form_people(word, [(first, full, pk) for first, _last, full, pk in rows])
    return found


def entities_by_short_form(*, bucket: Bucket, words: list[str]) -> dict[str, list[uuid.UUID]]:
    """For each one-word name that may be a short form (graph.extract.may_be_short_form: three
    letters or more, not a common word), the people it may stand for as the beginning of a longer
    first name: "Mel" is Melanie, or Melanie Chen. Only when one first name of the bucket's people
    begins with it (Melanie and Melissa: none), and that first name is one person (Melanie Chen
    and Melanie Brooks: none; Melanie and Melanie Chen: Melanie Chen, as "Melanie" reads). At
    most two ids each, as entities_by_partial_name gives them: one means unambiguous."""
    wanted = [w for w in dict.fromkeys(words) if may_be_short_form(w)]
    if not wanted:
        return {}
    with connection.cursor() as cur:
        # The bucket's people (graph_entities_first_word narrows them to the bucket's PERSON rows).
        cur.execute(
            """
            SELECT split_part(normalized_name, ' ', 1), strpos(normalized_name, ' ') > 0, id FROM graph_entities
            WHERE tenant_id = %s AND bucket_id = %s AND type = 'PERSON'
              AND left(split_part(normalized_name, ' ', 1), %s) = ANY(%s)
              AND split_part(lower(name), ' ', 1) = split_part(normalized_name, ' ', 1)
            ORDER BY mention_count DESC, id
            """,
            [bucket.tenant_id, bucket.pk, SHORT_FORM_LETTERS, sorted({w[:SHORT_FORM_LETTERS] for w in wanted})],
        )
        rows = cur.fetchall()
    return {word: short_form_people(word, rows) for word in wanted}


def corrections_of_bucket(*, bucket: Bucket) -> QuerySet[Correction]:
    """The operator's corrections of a bucket's graph, newest first (graph_corrections_bucket)."""
    return Correction.objects.for_bucket(bucket).order_by("-id")


def corrections_of_entity(*, entity: Entity) -> QuerySet[Correction]:
    """The corrections naming ``entity`` by its name or an alias (graph_corrections_names)."""
    return corrections_of_bucket(bucket=entity.bucket).filter(names__overlap=[entity.normalized_name, *entity.aliases])


def entity_memories(*, entity: Entity) -> QuerySet[Memory]:
    """The memories mentioning ``entity``, newest first (graph_mentions_entity)."""
    return (
        Memory.objects.filter(tenant_id=entity.tenant_id, bucket_id=entity.bucket_id)
        .filter(pk__in=Mention.objects.filter(entity_id=entity.pk).values("memory_id"))
        .defer("embedding", "context_embedding")
        .order_by("-created_at", "id")
    )


def entity_counts(*, bucket_ids: list) -> dict:
    """bucket id -> number of entities (graph_entities_bucket)."""
    rows = Entity.objects.filter(bucket_id__in=bucket_ids).values("bucket_id").annotate(n=Count("id"))
    return {row["bucket_id"]: row["n"] for row in rows}
