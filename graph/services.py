"""Writes to the knowledge graph: extraction, temporal timelines, supersession, rebuilds.

The graph is a view of the memories table. Extracting a memory replaces that
memory's mentions and edges (so it can be repeated safely), then recomputes the
validity windows of every functional timeline it touched and the supersession
state of the memories on those timelines. A rebuild does the same for a whole
bucket from scratch, in ``created_at`` order; running it twice gives the same
graph.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db import connection, transaction
from django.db.models import Case, Q, When

from engram_site import activity
from engram_site.providers import nlp
from graph import extract as extraction
from graph.models import Correction, Edge, Entity, Mention, Processed
from graph.rules import Rules, Target, bucket_rules
from graph.selectors import entities_by_first_name
from memories.models import EnrichmentStage, Memory
from memories.services.enrichment_failures import error_text, failures_clear, failures_record
from memories.services.supersession import memory_supersede, supersessions_clear
from tenants.models import Bucket, Tenant

logger = logging.getLogger(__name__)

# 2: relation predicates (manager_of, sibling_of, owns_pet …), the "Name:" speaker, first names.
EXTRACTOR_VERSION = 2
BATCH = 200


@dataclass
class GraphReport:
    memories: int = 0
    entities: int = 0
    edges: int = 0
    superseded: int = 0
    skipped: str | None = None
    errors: list[str] = field(default_factory=list)
    # Memories the extractor failed on, recorded in enrichment_failures (stage "graph").
    failures_recorded: int = 0


# --- entity resolution ----------------------------------------------------------------------


class _Entities:
    """Resolves extracted references to Entity rows of one bucket, creating them as needed,
    as the bucket's operator corrections say (``rules``, graph/rules.py)."""

    def __init__(self, bucket: Bucket, rules: Rules | None = None):
        self.bucket = bucket
        self.rules = rules if rules is not None else Rules()
        self.by_key: dict[str, Entity] = {}
        # Placeholders merged into named entities during this run: old id -> new id.
        self.merged: dict[uuid.UUID, uuid.UUID] = {}

    def final_id(self, entity_id: uuid.UUID) -> uuid.UUID:
        while entity_id in self.merged:
            entity_id = self.merged[entity_id]
        return entity_id

    def _lookup(self, keys: list[str]) -> None:
        wanted = [k for k in keys if k not in self.by_key]
        if not wanted:
            return
        found = Entity.objects.for_bucket(self.bucket).filter(
            Q(normalized_name__in=wanted) | Q(aliases__overlap=wanted)
        )
        # Exact names win over aliases; among several, the most mentioned.
        for entity in sorted(found, key=lambda e: e.mention_count):
            for key in [*entity.aliases, entity.normalized_name]:
                if key in wanted and self._may_name(key, entity):
                    self.by_key[key] = entity

    def _may_name(self, key: str, entity: Entity) -> bool:
        """Whether ``key`` (its name or an alias) may find ``entity`` (an operator may have said no)."""
        return not self.rules or key == entity.normalized_name or self.rules.alias_allowed(key, entity.normalized_name)

    def target(self, target: Target) -> Entity:
        """The entity a correction names: of that name (the same type preferred), else a new one."""
        found = (
            Entity.objects.for_bucket(self.bucket)
            .filter(normalized_name=target.key)
            .order_by(Case(When(type=target.type, then=0), default=1), "-mention_count", "id")
            .first()
        )
        if found is None:
            found = _get_or_create(self.bucket, extraction.Ref(name=target.name, key=target.key, type=target.type))
        return found

    def _add_aliases(self, entity: Entity, names: set) -> None:
        names = {
            n for n in names - {None, entity.normalized_name, *entity.aliases}
            if not self.rules or self.rules.alias_allowed(n, entity.normalized_name)
        }  # fmt: skip
        if names:
            entity.aliases = sorted({*entity.aliases, *names})
            entity.save(update_fields=["aliases"])

    def resolve(self, ref: extraction.Ref, memory_id: uuid.UUID | None = None) -> Entity:
        entity = self._resolve(ref)
        if self.rules.moves and memory_id is not None:
            # A split moved this memory's mentions of the entity to another one.
            moved = self.rules.moves.get((str(memory_id), entity.normalized_name))
            if moved is not None:
                entity = self.target(moved)
        return entity

    def _resolve(self, ref: extraction.Ref) -> Entity:
        redirected = self.rules.redirect(ref.key) if self.rules else None
        if redirected is not None:
            # An operator said what this name denotes (an alias, an old name, a merge).
            entity = self.by_key.get(ref.key)
            if entity is None or entity.normalized_name != redirected.key:
                entity = self.target(redirected)
            self._add_aliases(entity, {ref.key, ref.alias})
            self.by_key[ref.key] = entity
            return entity
        self._lookup([ref.key] + ([ref.alias] if ref.alias else []))
        entity = self.by_key.get(ref.key)
        placeholder = self.by_key.get(ref.alias) if ref.alias else None
        if entity is None and placeholder is not None and placeholder.normalized_name == ref.alias:
            # We knew "user's sister" before we learned her name: the placeholder becomes Anna.
            entity = placeholder
            entity.name, entity.normalized_name, entity.type = ref.name, ref.key, ref.type
            entity.aliases = sorted({*entity.aliases, ref.alias})
            entity.save(update_fields=["name", "normalized_name", "type", "aliases"])
        elif entity is not None and placeholder is not None and placeholder.pk != entity.pk:
            if placeholder.normalized_name == ref.alias:
                self.merged[placeholder.pk] = entity.pk
                _merge_entity(source=placeholder, target=entity)
            placeholder = None
        if entity is None and placeholder is None:
            entity = self._full_name(ref)
        if entity is None:
            entity = _get_or_create(self.bucket, ref)
        if ref.alias and ref.alias not in entity.aliases and ref.alias != entity.normalized_name:
            self._add_aliases(entity, {ref.alias})
        # A better type learned later ("Alice" as a subject first, then as a PERSON).
        better_type = entity.type == "THING" and ref.type not in {"THING", "SPEAKER"}
        if (
            better_type
            and not Entity.objects.for_bucket(self.bucket)
            .filter(normalized_name=entity.normalized_name, type=ref.type)
            .exists()
        ):
            entity.type = ref.type
            entity.save(update_fields=["type"])
        self.by_key[ref.key] = entity
        if ref.alias:
            self.by_key[ref.alias] = entity
        return entity

    def _full_name(self, ref: extraction.Ref) -> Entity | None:
        """A lone first name (or its nickname) is the bucket's one person of that first name:
        "Alice" is Alice Chen while the bucket knows no other Alice."""
        if " " in ref.key or ref.type not in {"PERSON", "THING"}:
            return None
        matches = entities_by_first_name(bucket=self.bucket, words=[ref.key]).get(ref.key, [])
        if len(matches) != 1:
            return None
        entity = Entity.objects.get(pk=matches[0])
        if self.rules and (ref.key, entity.normalized_name) in self.rules.blocked:
            return None  # an operator split this name off that person
        return entity


def _get_or_create(bucket: Bucket, ref: extraction.Ref) -> Entity:
    with connection.cursor() as cur:
        cur.execute(
            """
            INSERT INTO graph_entities (tenant_id, bucket_id, name, normalized_name, type, aliases, mention_count)
            VALUES (%s, %s, %s, %s, %s, %s, 0)
            ON CONFLICT (tenant_id, bucket_id, normalized_name, type) DO NOTHING
            """,
            [bucket.tenant_id, bucket.pk, ref.name[:500], ref.key[:500], ref.type, [ref.alias] if ref.alias else []],
        )
    return Entity.objects.for_bucket(bucket).get(normalized_name=ref.key[:500], type=ref.type)


def _merge_entity(*, source: Entity, target: Entity) -> None:
    """Point everything at ``target`` and drop ``source``."""
    Edge.objects.filter(subject=source).update(subject=target)
    Edge.objects.filter(object_entity=source).update(object_entity=target)
    already = Mention.objects.filter(entity=target).values("memory_id")
    Mention.objects.filter(entity=source, memory_id__in=already).delete()
    Mention.objects.filter(entity=source).update(entity=target)
    target.aliases = sorted({*target.aliases, *source.aliases, source.normalized_name} - {target.normalized_name})
    target.mention_count = Mention.objects.filter(entity=target).count()
    target.save(update_fields=["aliases", "mention_count"])
    source.delete()


# --- extraction -------------------------------------------------------------------------------


def _parse(memories: list[Memory]) -> tuple[list, dict[uuid.UUID, str]]:
    """(memory, speaker, parsed text, parsed context) per memory; a leading "Name:" is the speaker.

    When the pipeline fails on the batch, the memories are parsed one by one and those it
    fails on come back as ``{memory id: error}`` instead."""
    pipeline = nlp.get_pipeline()
    speakers, texts = [], []
    for memory in memories:
        speaker, text = extraction.split_speaker(memory.content[:5000], attributed_to=memory.attributed_to)
        speakers.append(speaker)
        texts.append(text)
    contexts = [m.context_text[-2000:] if m.context_text else "" for m in memories]
    try:
        docs = list(pipeline.pipe(texts, batch_size=64))
        context_docs = list(pipeline.pipe(contexts, batch_size=64))
    except Exception:
        logger.exception("the spaCy pipeline failed on a batch of %d memories; parsing one by one", len(memories))
        return _parse_one_by_one(pipeline, memories, speakers, texts, contexts)
    parsed = [
        (memory, speaker, doc, context_doc if memory.context_text else None)
        for memory, speaker, doc, context_doc in zip(memories, speakers, docs, context_docs, strict=True)
    ]
    return parsed, {}


def _parse_one_by_one(pipeline, memories, speakers, texts, contexts) -> tuple[list, dict[uuid.UUID, str]]:
    parsed, failed = [], {}
    for memory, speaker, text, context in zip(memories, speakers, texts, contexts, strict=True):
        try:
            doc, context_doc = pipeline(text), pipeline(context)
        except Exception as exc:
            failed[memory.pk] = error_text(exc)
            continue
        parsed.append((memory, speaker, doc, context_doc if memory.context_text else None))
    return parsed, failed


def _object_key(edge: Edge) -> str:
    return f"e:{edge.object_entity_id}" if edge.object_entity_id else f"l:{(edge.object_literal or '').casefold()}"


def _extract_batch(bucket: Bucket, memories: list[Memory], entities: _Entities, report: GraphReport) -> set:
    """Replace the graph rows of ``memories``; returns the (subject, functional_key) timelines touched."""
    touched: set[tuple[uuid.UUID, str]] = set()
    ids = [m.pk for m in memories]
    for subject_id, key in Edge.objects.filter(source_memory_id__in=ids, functional_key__isnull=False).values_list(
        "subject_id", "functional_key"
    ):
        touched.add((subject_id, key))
    Edge.objects.filter(source_memory_id__in=ids).delete()
    Mention.objects.filter(memory_id__in=ids).delete()

    new_edges: list[Edge] = []
    new_mentions: list[Mention] = []
    parsed, failed = _parse(memories)
    for memory, speaker, doc, context_doc in parsed:
        try:
            result = extraction.extract(doc, speaker=speaker, context_doc=context_doc)
        except Exception as exc:  # one odd memory must not stop a batch, nor a rebuild
            logger.exception("extraction failed for memory %s", memory.pk)
            failed[memory.pk] = error_text(exc)
            continue
        report.memories += 1
        mentioned: set[uuid.UUID] = set()
        for ref in result.mentions:
            entity = entities.resolve(ref, memory.pk)
            if entity.pk not in mentioned:
                mentioned.add(entity.pk)
                new_mentions.append(
                    Mention(tenant_id=bucket.tenant_id, bucket_id=bucket.pk, memory=memory, entity=entity)
                )
        seen_facts = set()
        for fact in result.facts:
            subject = entities.resolve(fact.subject, memory.pk)
            obj = entities.resolve(fact.obj, memory.pk) if fact.obj is not None else None
            if obj is not None and obj.pk == subject.pk:
                continue
            signature = (subject.pk, fact.predicate, obj.pk if obj else fact.literal)
            if signature in seen_facts:
                continue
            seen_facts.add(signature)
            new_edges.append(
                Edge(
                    tenant_id=bucket.tenant_id,
                    bucket_id=bucket.pk,
                    subject_id=subject.pk,
                    predicate=fact.predicate[:60],
                    object_entity_id=obj.pk if obj is not None else None,
                    object_literal=(fact.literal or "")[:500] or None if obj is None else None,
                    functional_key=fact.functional_key,
                    valid_from=fact.valid_from or memory.created_at,
                    confidence=fact.confidence,
                    source_memory_id=memory.pk,
                )
            )
            if fact.functional_key:
                touched.add((subject.pk, fact.functional_key))
    # A placeholder may have been merged into a named entity after we referenced it.
    for mention in new_mentions:
        mention.entity_id = entities.final_id(mention.entity_id)
    for edge in new_edges:
        edge.subject_id = entities.final_id(edge.subject_id)
        if edge.object_entity_id:
            edge.object_entity_id = entities.final_id(edge.object_entity_id)
    touched = {(entities.final_id(subject_id), key) for subject_id, key in touched}
    if entities.rules.edges:
        new_edges = _corrected_edges(new_edges, entities, touched)
    new_edges = [e for e in new_edges if e.subject_id != e.object_entity_id]
    Mention.objects.bulk_create(new_mentions, ignore_conflicts=True)
    Edge.objects.bulk_create(new_edges)
    report.edges += len(new_edges)
    _refresh_mention_counts(bucket, {m.entity_id for m in new_mentions})
    # A memory the extractor failed on is not marked processed: it gets a failure record (and
    # its retry time) instead, and the sweep comes back to it then.
    done = [i for i in ids if i not in failed]
    _record_processed(done)
    failures_clear(stage=EnrichmentStage.GRAPH, memory_ids=done)
    failures_record(stage=EnrichmentStage.GRAPH, errors=failed)
    report.errors += [f"{memory_id}: {error}" for memory_id, error in failed.items()]
    report.failures_recorded += len(failed)
    return touched


def edge_signature(edge: Edge, names: dict[uuid.UUID, str]):
    """What an edge says, as corrections name it (graph.rules.EdgeKey): ``names`` maps entity
    ids to normalized names."""
    obj = names.get(edge.object_entity_id) if edge.object_entity_id else None
    literal = None if edge.object_entity_id else edge.object_literal
    return (names.get(edge.subject_id), edge.predicate, obj, literal, str(edge.source_memory_id))


def edge_fixed_key(predicate: str, old_predicate: str, functional_key: str | None) -> str | None:
    """The timeline of an edge whose predicate an operator changed: a functional edge stays on
    its timeline under the new predicate (``owns:phone`` stays while the predicate stays owns);
    an accumulating one stays accumulating."""
    if functional_key is None or predicate == old_predicate:
        return functional_key
    return predicate


def _corrected_edges(edges: list[Edge], entities: _Entities, touched: set) -> list[Edge]:
    """The edges an operator deleted dropped, the ones they fixed changed (graph/rules.py)."""
    rules = entities.rules
    ids = {e.subject_id for e in edges} | {e.object_entity_id for e in edges if e.object_entity_id}
    names = dict(Entity.objects.filter(pk__in=ids).values_list("pk", "normalized_name"))
    kept = []
    for edge in edges:
        key = edge_signature(edge, names)
        if key in rules.deleted_edges:
            continue
        fix = rules.fixed_edges.get(key)
        if fix is not None:
            edge.functional_key = edge_fixed_key(fix.predicate, edge.predicate, edge.functional_key)
            edge.predicate = fix.predicate
            edge.object_entity_id = entities.target(fix.obj).pk if fix.obj is not None else None
            edge.object_literal = fix.literal if fix.obj is None else None
            if edge.functional_key:
                touched.add((edge.subject_id, edge.functional_key))
        kept.append(edge)
    return kept


def rules_settle(bucket: Bucket, rules: Rules) -> None:
    """Give the bucket's entities the names and aliases the operator gave them, and take away
    the aliases they removed (after extraction, which may have re-created the rows)."""
    entities = Entity.objects.for_bucket(bucket)
    for key, name in rules.names.items():
        entities.filter(normalized_name=key).exclude(name=name).update(name=name)
    keys = set(rules.aliases) | {key for _alias, key in rules.blocked}
    for entity in entities.filter(normalized_name__in=keys):
        wanted = set(entity.aliases) | rules.aliases.get(entity.normalized_name, set())
        wanted = {a for a in wanted if (a, entity.normalized_name) not in rules.blocked} - {entity.normalized_name}
        if wanted != set(entity.aliases):
            entity.aliases = sorted(wanted)
            entity.save(update_fields=["aliases"])


def _refresh_mention_counts(bucket: Bucket, entity_ids: Iterable[uuid.UUID]) -> None:
    ids = list(entity_ids)
    if not ids:
        return
    with connection.cursor() as cur:
        cur.execute(
            """
            UPDATE graph_entities e SET mention_count = (SELECT count(*) FROM graph_mentions m WHERE m.entity_id = e.id)
            WHERE e.tenant_id = %s AND e.bucket_id = %s AND e.id = ANY(%s)
            """,
            [bucket.tenant_id, bucket.pk, ids],
        )


def _record_processed(memory_ids: list[uuid.UUID]) -> None:
    with connection.cursor() as cur:
        cur.execute(
            """
            INSERT INTO graph_processed (memory_id, extractor_version, processed_at)
            SELECT unnest(%s::uuid[]), %s, now()
            ON CONFLICT (memory_id) DO UPDATE SET extractor_version = EXCLUDED.extractor_version,
                                                  processed_at = EXCLUDED.processed_at
            """,
            [memory_ids, EXTRACTOR_VERSION],
        )


# --- timelines and supersession -----------------------------------------------------------------


def _recompute_timelines(bucket: Bucket, timelines: set[tuple[uuid.UUID, str]]) -> set[uuid.UUID]:
    """Set ``valid_to`` along each functional timeline; returns the memories on them."""
    affected: set[uuid.UUID] = set()
    for subject_id, key in timelines:
        edges = list(
            Edge.objects.for_bucket(bucket)
            .filter(subject_id=subject_id, functional_key=key)
            .order_by("valid_from", "created_at", "id")
        )
        # Consecutive edges with the same value are one stretch of validity ("still in Boston").
        groups: list[list[Edge]] = []
        for edge in edges:
            if groups and _object_key(groups[-1][0]) == _object_key(edge):
                groups[-1].append(edge)
            else:
                groups.append([edge])
        changed = []
        for index, group in enumerate(groups):
            closes_at = groups[index + 1][0].valid_from if index + 1 < len(groups) else None
            for edge in group:
                if edge.valid_to != closes_at:
                    edge.valid_to = closes_at
                    changed.append(edge)
                affected.add(edge.source_memory_id)
        Edge.objects.bulk_update(changed, ["valid_to"])
    return affected


def _recompute_supersession(bucket: Bucket, memory_ids: set[uuid.UUID]) -> int:
    """A memory is historical from the moment a newer fact closed one of its
    functional edges; the memory stating that newer fact supersedes it."""
    if not memory_ids:
        return 0
    closers: dict[uuid.UUID, tuple] = {}
    closed = (
        Edge.objects.for_bucket(bucket)
        .filter(source_memory_id__in=memory_ids, functional_key__isnull=False, valid_to__isnull=False)
        .order_by("valid_to")
    )
    for edge in closed:
        if edge.source_memory_id in closers:
            continue
        successor = (
            Edge.objects.for_bucket(bucket)
            .filter(subject_id=edge.subject_id, functional_key=edge.functional_key, valid_from=edge.valid_to)
            .exclude(source_memory_id=edge.source_memory_id)
            .order_by("created_at", "id")
            .first()
        )
        if successor is not None:
            closers[edge.source_memory_id] = (edge.valid_to, successor.source_memory_id)
    changed = 0
    memories = (
        Memory.objects.for_bucket(bucket)
        .filter(pk__in=memory_ids)
        .only("id", "superseded_at", "superseded_by", "tenant_id", "bucket_id")
    )
    for memory in memories:
        at, by = closers.get(memory.pk, (None, None))
        if (memory.superseded_at, memory.superseded_by) == (at, by):
            continue
        memory_supersede(memory_id=memory.pk, at=at, by=by, previous_by=memory.superseded_by)
        changed += 1
    return changed


# --- for the operator's corrections (graph/corrections.py) -----------------------------------------


def bucket_lock(bucket: Bucket) -> None:
    """Hold the bucket's graph lock until the transaction ends (extraction takes it too)."""
    _bucket_lock(bucket)


def entity_merge(*, source: Entity, target: Entity) -> None:
    _merge_entity(source=source, target=target)


def mention_counts_refresh(*, bucket: Bucket, entity_ids: Iterable[uuid.UUID]) -> None:
    _refresh_mention_counts(bucket, entity_ids)


def timelines_recompute(*, bucket: Bucket, timelines: set, memory_ids: set) -> int:
    """Recompute ``timelines`` and the supersession of the memories on them and of ``memory_ids``."""
    affected = _recompute_timelines(bucket, timelines) | set(memory_ids)
    return _recompute_supersession(bucket, affected)


# --- entry points -----------------------------------------------------------------------------------


def graph_extract_memories(*, memory_ids: Iterable[uuid.UUID]) -> GraphReport:
    """Extract (or re-extract) the given memories into their buckets' graphs.

    Idempotent: a memory's previous mentions and edges are replaced. Memories are
    processed per bucket in ``created_at`` order. Without the spaCy pipeline the
    call does nothing and says why.
    """
    report = GraphReport()
    if not nlp.available():
        report.skipped = "spaCy pipeline unavailable"
        return report
    memories = list(
        Memory.objects.filter(pk__in=list(memory_ids))
        .select_related("bucket")
        .defer("embedding", "context_embedding")
        .order_by("bucket_id", "created_at", "id")
    )
    by_bucket: dict[uuid.UUID, list[Memory]] = {}
    for memory in memories:
        by_bucket.setdefault(memory.bucket_id, []).append(memory)
    # In a worker that gives way to requests, a bucket's memories go in turns, one transaction
    # each, with a pause point between them (engram_site/activity.py).
    for bucket_rows in by_bucket.values():
        for rows in activity.turns(bucket_rows):
            _extract_in_bucket(rows[0].bucket, rows, report)
    return report


def _extract_in_bucket(bucket: Bucket, rows: list[Memory], report: GraphReport) -> None:
    with transaction.atomic():
        # One extractor at a time per bucket: entity creation and timelines stay consistent.
        _bucket_lock(bucket)
        rules = bucket_rules(bucket=bucket)
        entities = _Entities(bucket, rules)
        touched: set = set()
        for start in range(0, len(rows), BATCH):
            touched |= _extract_batch(bucket, rows[start : start + BATCH], entities, report)
        if rules:
            rules_settle(bucket, rules)
        affected = _recompute_timelines(bucket, touched)
        report.superseded += _recompute_supersession(bucket, affected)


def _bucket_lock(bucket: Bucket) -> None:
    with connection.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(hashtext('graph:' || %s))", [str(bucket.pk)])


def graph_rebuild(*, bucket: Bucket) -> GraphReport:
    """Drop and rebuild a bucket's graph from its memories, oldest first. The operator's
    corrections (graph_corrections) are not dropped: extraction follows them again."""
    report = GraphReport()
    if not nlp.available():
        report.skipped = "spaCy pipeline unavailable"
        return report
    with transaction.atomic():
        _bucket_lock(bucket)
        # Undo what the graph wrote onto memories, then drop the graph.
        supersessions_clear(bucket=bucket)
        Edge.objects.for_bucket(bucket).delete()
        Mention.objects.filter(tenant_id=bucket.tenant_id, bucket_id=bucket.pk).delete()
        Entity.objects.for_bucket(bucket).delete()
        # The operator's corrections are kept and replayed (graph/rules.py).
        rules = bucket_rules(bucket=bucket)
        entities = _Entities(bucket, rules)
        touched: set = set()
        queryset = (
            Memory.objects.for_bucket(bucket).defer("embedding", "context_embedding").order_by("created_at", "id")
        )
        batch: list[Memory] = []
        for memory in queryset.iterator(chunk_size=BATCH):
            batch.append(memory)
            if len(batch) == BATCH:
                touched |= _extract_batch(bucket, batch, entities, report)
                batch = []
        if batch:
            touched |= _extract_batch(bucket, batch, entities, report)
        if rules:
            rules_settle(bucket, rules)
        affected = _recompute_timelines(bucket, touched)
        report.superseded += _recompute_supersession(bucket, affected)
        report.entities = Entity.objects.for_bucket(bucket).count()
    return report


def graph_rebuild_tenant(*, tenant: Tenant) -> GraphReport:
    total = GraphReport()
    for bucket in tenant.buckets.all():
        report = graph_rebuild(bucket=bucket)
        total.memories += report.memories
        total.entities += report.entities
        total.edges += report.edges
        total.superseded += report.superseded
        total.errors += report.errors
        total.skipped = report.skipped
    return total


def graph_extract_pending(*, limit: int = 1000) -> GraphReport:
    """Extract memories the graph has not seen yet (the sweep behind the async path)."""
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT m.id FROM memories m
            LEFT JOIN graph_processed p ON p.memory_id = m.id
            WHERE (p.memory_id IS NULL OR p.extractor_version < %s)
              -- A memory the extractor failed on waits for its retry time
              -- (enrichment_failures_memory_stage serves the anti-join).
              AND NOT EXISTS (
                SELECT 1 FROM enrichment_failures f
                WHERE f.memory_id = m.id AND f.stage = %s AND f.next_retry_at > statement_timestamp()
              )
            ORDER BY m.created_at LIMIT %s
            """,
            [EXTRACTOR_VERSION, EnrichmentStage.GRAPH.value, limit],
        )
        ids = [row[0] for row in cur.fetchall()]
    if not ids:
        return GraphReport()
    return graph_extract_memories(memory_ids=ids)


def supersession_pass(*, bucket: Bucket) -> GraphReport:
    """Recompute every functional timeline of a bucket and the supersession state of its memories."""
    report = GraphReport()
    with transaction.atomic():
        _bucket_lock(bucket)
        timelines = set(
            Edge.objects.for_bucket(bucket)
            .filter(functional_key__isnull=False)
            .values_list("subject_id", "functional_key")
            .distinct()
        )
        affected = _recompute_timelines(bucket, timelines)
        report.superseded = _recompute_supersession(bucket, affected)
    return report


def graph_forget_memory(*, bucket: Bucket, memory_id: uuid.UUID, timelines: set) -> None:
    """After a memory is deleted (its edges went with it): reopen what it had closed."""
    with transaction.atomic():
        _bucket_lock(bucket)
        affected = _recompute_timelines(bucket, timelines)
        # Memories it superseded are current again unless something else closes them.
        affected |= set(Memory.objects.for_bucket(bucket).filter(superseded_by=memory_id).values_list("id", flat=True))
        _recompute_supersession(bucket, affected)


# --- erasure (memories.services.erasure, through graph/receivers.py) -----------------------------------


def graph_erase_memories(*, tenant: Tenant, memory_ids: list[uuid.UUID]) -> dict:
    """Delete the graph rows of erased memories, in the erasure's transaction, before the rows go.

    Their mentions and edges go, and every entity they named that nothing else names now — no
    mention left, no edge as subject or object — goes too: an entity's name may be the person
    being forgotten. The timelines their edges were on, and the supersession of the memories
    left on them (or superseded by an erased one), are recomputed, as after a delete.
    """
    ids = list(memory_ids)
    edges = Edge.objects.filter(tenant_id=tenant.pk, source_memory_id__in=ids)
    mentions = Mention.objects.filter(tenant_id=tenant.pk, memory_id__in=ids)
    # No index serves superseded_by: an erasure reads the tenant's rows once (idx_memories_tenant).
    superseded = Memory.objects.for_tenant(tenant).filter(superseded_by__in=ids).exclude(pk__in=ids)
    bucket_ids = (
        set(edges.values_list("bucket_id", flat=True).distinct())
        | set(mentions.values_list("bucket_id", flat=True).distinct())
        | set(superseded.values_list("bucket_id", flat=True).distinct())
    )
    buckets = list(Bucket.objects.filter(tenant_id=tenant.pk, pk__in=bucket_ids).order_by("pk"))
    for bucket in buckets:  # in one order, so two erasures cannot deadlock
        _bucket_lock(bucket)
    timelines: dict[uuid.UUID, set] = {}
    named = set(mentions.values_list("entity_id", flat=True))
    for bucket_id, subject_id, object_id, key in edges.values_list(
        "bucket_id", "subject_id", "object_entity_id", "functional_key"
    ):
        named |= {subject_id, object_id} - {None}
        if key is not None:
            timelines.setdefault(bucket_id, set()).add((subject_id, key))
    counts = {"graph_edges": edges.delete()[0], "graph_mentions": mentions.delete()[0]}
    Processed.objects.filter(memory_id__in=ids).delete()
    orphans = (
        Entity.objects.for_tenant(tenant)
        .filter(pk__in=named)
        .exclude(pk__in=Mention.objects.filter(entity_id__in=named).values("entity_id"))
        .exclude(pk__in=Edge.objects.filter(subject_id__in=named).values("subject_id"))
        .exclude(pk__in=Edge.objects.filter(object_entity_id__in=named).values("object_entity_id"))
    )
    # An operator's corrections naming a forgotten entity go with it: they quote its name.
    forgotten = list(orphans.values_list("normalized_name", flat=True))
    counts["graph_corrections"] = (
        Correction.objects.for_tenant(tenant).filter(names__overlap=forgotten).delete()[0] if forgotten else 0
    )
    counts["graph_entities"] = orphans.delete()[0]
    erased = set(ids)
    for bucket in buckets:
        _refresh_mention_counts(bucket, named)
        affected = _recompute_timelines(bucket, timelines.get(bucket.pk, set()))
        affected |= set(superseded.filter(bucket_id=bucket.pk).values_list("id", flat=True))
        _recompute_supersession(bucket, affected - erased)
    return counts


# --- merges: memories absorbed into others, buckets merged ---------------------------------------------


def _unnest(pairs: dict) -> list:
    return [list(pairs), list(pairs.values())]


def graph_absorb_memories(*, mapping: dict[uuid.UUID, uuid.UUID]) -> dict:
    """Move the graph rows of absorbed memories onto their survivors (``memories.merge``).

    A mention the survivor already has is dropped; an edge stating a fact the survivor
    already states (same subject, predicate and object) is dropped, the others now come
    from the survivor. Then the timelines those edges are on, and the supersession of
    the memories on them, are recomputed in the survivors' buckets.
    """
    if not mapping:
        return {"mentions": 0, "edges": 0}
    params = _unnest(mapping)
    with connection.cursor() as cur:
        cur.execute(
            """
            DELETE FROM graph_mentions g USING unnest(%s::uuid[], %s::uuid[]) AS v(absorbed, survivor)
            WHERE g.memory_id = v.absorbed AND (
                EXISTS (SELECT 1 FROM graph_mentions s WHERE s.memory_id = v.survivor AND s.entity_id = g.entity_id)
                -- two absorbed rows of one survivor mentioning the same entity: keep one
                OR EXISTS (SELECT 1 FROM graph_mentions o JOIN unnest(%s::uuid[], %s::uuid[]) AS w(absorbed, survivor)
                           ON o.memory_id = w.absorbed
                           WHERE w.survivor = v.survivor AND o.entity_id = g.entity_id AND o.id < g.id))
            """,
            params + params,
        )
        cur.execute(
            """
            UPDATE graph_mentions g SET memory_id = v.survivor
            FROM unnest(%s::uuid[], %s::uuid[]) AS v(absorbed, survivor)
            WHERE g.memory_id = v.absorbed
            """,
            params,
        )
        mentions = cur.rowcount
        cur.execute(
            """
            DELETE FROM graph_edges e USING unnest(%s::uuid[], %s::uuid[]) AS v(absorbed, survivor)
            WHERE e.source_memory_id = v.absorbed AND EXISTS (
                SELECT 1 FROM graph_edges s
                WHERE s.source_memory_id = v.survivor AND s.subject_id = e.subject_id AND s.predicate = e.predicate
                  AND s.object_entity_id IS NOT DISTINCT FROM e.object_entity_id
                  AND s.object_literal IS NOT DISTINCT FROM e.object_literal)
            """,
            params,
        )
        cur.execute(
            """
            UPDATE graph_edges e SET source_memory_id = v.survivor
            FROM unnest(%s::uuid[], %s::uuid[]) AS v(absorbed, survivor)
            WHERE e.source_memory_id = v.absorbed
            """,
            params,
        )
        edges = cur.rowcount
        survivors = list(set(mapping.values()))
        # Mentions dropped as duplicates change their entities' counts.
        cur.execute(
            """
            UPDATE graph_entities e SET mention_count = (SELECT count(*) FROM graph_mentions m WHERE m.entity_id = e.id)
            WHERE e.id IN (SELECT entity_id FROM graph_mentions WHERE memory_id = ANY(%s))
            """,
            [survivors],
        )
        cur.execute("SELECT DISTINCT bucket_id FROM memories WHERE id = ANY(%s)", [survivors])
        bucket_ids = [row[0] for row in cur.fetchall()]
    for bucket in Bucket.objects.filter(pk__in=bucket_ids).order_by("pk"):
        graph_recompute(bucket=bucket, memory_ids=survivors)
    return {"mentions": mentions, "edges": edges}


RECOMPUTE_BATCH = 5000


def graph_recompute(*, bucket: Bucket, memory_ids: Iterable[uuid.UUID]) -> int:
    """Recompute the functional timelines the edges of ``memory_ids`` are on, and the
    supersession of every memory on them (after edges moved between memories or buckets)."""
    ids = list(memory_ids)
    changed = 0
    with transaction.atomic():
        _bucket_lock(bucket)
        with connection.cursor() as cur:
            # graph_edges_source: edges by source memory (an array, not one parameter per id).
            cur.execute(
                """
                SELECT DISTINCT subject_id, functional_key FROM graph_edges
                WHERE source_memory_id = ANY(%s) AND tenant_id = %s AND bucket_id = %s AND functional_key IS NOT NULL
                """,
                [ids, bucket.tenant_id, bucket.pk],
            )
            timelines = set(cur.fetchall())
        affected = sorted(_recompute_timelines(bucket, timelines))
        # Each memory's state is computed on its own: batches keep the queries' parameter lists bounded.
        for start in range(0, len(affected), RECOMPUTE_BATCH):
            changed += _recompute_supersession(bucket, set(affected[start : start + RECOMPUTE_BATCH]))
    return changed


def _entity_pairs(source: Bucket, target: Bucket) -> list[tuple[uuid.UUID, uuid.UUID]]:
    """(source entity, target entity) pairs with the same normalized name, as extraction
    resolves names within a bucket: the same type preferred, else the target's most
    mentioned entity of that name (spaCy may type "Alice" ORG in one text, THING in another)."""
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT DISTINCT ON (s.id) s.id, t.id FROM graph_entities s
            JOIN graph_entities t ON t.tenant_id = s.tenant_id AND t.bucket_id = %s
                 AND t.normalized_name = s.normalized_name
            WHERE s.tenant_id = %s AND s.bucket_id = %s
            ORDER BY s.id, (t.type = s.type) DESC, t.mention_count DESC, t.id
            """,
            [target.pk, source.tenant_id, source.pk],
        )
        return [(a, b) for a, b in cur.fetchall()]


def graph_merge_preview(*, source: Bucket, target: Bucket) -> dict:
    return {
        "entities": Entity.objects.for_bucket(source).count(),
        "entities_to_merge": len(_entity_pairs(source, target)),
    }


def graph_merge_buckets(*, source: Bucket, target: Bucket) -> dict:
    """Move ``source``'s graph into ``target`` (same tenant), in the caller's transaction.

    Entities with the same normalized name become one (the target's — of the same type if
    it has one: edges and mentions re-pointed, aliases united, counts refreshed); the
    rest, and every mention and edge, change bucket. Timelines are recomputed by the caller once the memories
    have moved too (:func:`graph_recompute`).
    """
    with transaction.atomic():
        for bucket in sorted([source, target], key=lambda b: str(b.pk)):
            _bucket_lock(bucket)
        pairs = _entity_pairs(source, target)
        with connection.cursor() as cur:
            cur.execute(
                "UPDATE graph_edges SET bucket_id = %s WHERE tenant_id = %s AND bucket_id = %s",
                [target.pk, source.tenant_id, source.pk],
            )
            edges = cur.rowcount
            cur.execute(
                "UPDATE graph_mentions SET bucket_id = %s WHERE tenant_id = %s AND bucket_id = %s",
                [target.pk, source.tenant_id, source.pk],
            )
            mentions = cur.rowcount
            if pairs:
                params = [[a for a, _ in pairs], [b for _, b in pairs]]
                # _merge_entity, set-based: edges and mentions first, then aliases, then the rows.
                cur.execute(
                    "UPDATE graph_edges e SET subject_id = v.t FROM unnest(%s::uuid[], %s::uuid[]) AS v(s, t)"
                    " WHERE e.subject_id = v.s",
                    params,
                )
                cur.execute(
                    "UPDATE graph_edges e SET object_entity_id = v.t FROM unnest(%s::uuid[], %s::uuid[]) AS v(s, t)"
                    " WHERE e.object_entity_id = v.s",
                    params,
                )
                # Two source entities of one name (two types) can land on one target entity.
                cur.execute(
                    "DELETE FROM graph_edges WHERE tenant_id = %s AND bucket_id = %s AND subject_id = object_entity_id",
                    [target.tenant_id, target.pk],
                )
                cur.execute(
                    """
                    DELETE FROM graph_mentions g USING unnest(%s::uuid[], %s::uuid[]) AS v(s, t)
                    WHERE g.entity_id = v.s AND (
                        EXISTS (SELECT 1 FROM graph_mentions o WHERE o.entity_id = v.t AND o.memory_id = g.memory_id)
                        OR EXISTS (SELECT 1 FROM graph_mentions o JOIN unnest(%s::uuid[], %s::uuid[]) AS w(s, t)
                                   ON o.entity_id = w.s
                                   WHERE w.t = v.t AND o.memory_id = g.memory_id AND o.id < g.id))
                    """,
                    params + params,
                )
                cur.execute(
                    "UPDATE graph_mentions g SET entity_id = v.t FROM unnest(%s::uuid[], %s::uuid[]) AS v(s, t)"
                    " WHERE g.entity_id = v.s",
                    params,
                )
                cur.execute(
                    """
                    UPDATE graph_entities t SET aliases = coalesce((
                        SELECT array_agg(DISTINCT a ORDER BY a)
                        FROM unnest(t.aliases || s.aliases || ARRAY[s.normalized_name]) AS a
                        WHERE a <> t.normalized_name), '{}')
                    FROM graph_entities s, unnest(%s::uuid[], %s::uuid[]) AS v(s, t)
                    WHERE s.id = v.s AND t.id = v.t
                    """,
                    params,
                )
                cur.execute("DELETE FROM graph_entities WHERE id = ANY(%s)", [params[0]])
            cur.execute(
                "UPDATE graph_entities SET bucket_id = %s WHERE tenant_id = %s AND bucket_id = %s",
                [target.pk, source.tenant_id, source.pk],
            )
            moved = cur.rowcount
            # The operator's corrections follow the graph they corrected (replayed in id order).
            cur.execute(
                "UPDATE graph_corrections SET bucket_id = %s WHERE tenant_id = %s AND bucket_id = %s",
                [target.pk, source.tenant_id, source.pk],
            )
        _refresh_mention_counts(target, [b for _, b in pairs])
    return {"entities_merged": len(pairs), "entities_moved": moved, "mentions": mentions, "edges": edges}
