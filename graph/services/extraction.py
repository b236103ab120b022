"""Extraction: a memory's mentions and edges replaced by what the extractor reads in it, and
the timelines it touched recomputed; rebuilds of a whole bucket; the sweep of memories not
extracted yet."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable

from django.db import connection, transaction

from engram_site import activity
from engram_site.exceptions import NotFound
from engram_site.providers import nlp
from graph import extract as extraction
from graph.key_descriptions import description_signatures, mark_described_stale
from graph.models import Edge, Entity, Mention
from graph.rules import bucket_rules
from graph.services.entities import EntityResolver, mention_counts_refresh, rules_settle
from graph.services.locks import bucket_lock
from graph.services.reports import GraphReport
from graph.services.timelines import supersession_recompute, timeline_windows_recompute
from memories.models import EnrichmentStage, Memory
from memories.services.enrichment_failures import error_text, failures_clear, failures_record
from memories.services.ingest.locks import hold_bucket
from memories.services.keys import keys_mark_stale
from memories.services.supersession import supersessions_clear
from tenants.models import Bucket, Tenant

logger = logging.getLogger(__name__)

# 2: relation predicates (manager_of, sibling_of, owns_pet …), the "Name:" speaker, first names.
# 3: no entity named by a description (an unnamed relative is an attribute of its owner), names
#    learned later read into earlier memories, surnames, "hired".
# 4: short forms ("Mel" is the bucket's one Melanie), a relative of an unnamed relative ("my
#    sister's husband", "the husband of my sister": User sister_has husband) as an edge, not a
#    description as an object.
# 5: a name given by an apposition's "called" / "named" ("a rescue dog, a greyhound called Dash");
#    a common word opening a sentence read as the bucket's entity of that name ("Dash is scared…").
EXTRACTOR_VERSION = 5
BATCH = 200
# Memories read again in one extraction run because a name they use was learned; the rest go
# to the sweep.
REREAD_LIMIT = 200


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
        # A context is parsed only for a memory that reads it (he/she: extraction.reads_context).
        wanted = [i for i, doc in enumerate(docs) if contexts[i] and extraction.reads_context(doc)]
        context_docs = dict(zip(wanted, pipeline.pipe([contexts[i] for i in wanted], batch_size=64), strict=True))
    except Exception:
        logger.exception("the spaCy pipeline failed on a batch of %d memories; parsing one by one", len(memories))
        return _parse_one_by_one(pipeline, memories, speakers, texts, contexts)
    parsed = [
        (memory, speaker, doc, context_docs.get(i))
        for i, (memory, speaker, doc) in enumerate(zip(memories, speakers, docs, strict=True))
    ]
    return parsed, {}


def _parse_one_by_one(pipeline, memories, speakers, texts, contexts) -> tuple[list, dict[uuid.UUID, str]]:
    parsed, failed = [], {}
    for memory, speaker, text, context in zip(memories, speakers, texts, contexts, strict=True):
        try:
            doc = pipeline(text)
            context_doc = pipeline(context) if context and extraction.reads_context(doc) else None
        except Exception as exc:
            failed[memory.pk] = error_text(exc)
            continue
        parsed.append((memory, speaker, doc, context_doc))
    return parsed, failed


def _extract_batch(
    bucket: Bucket, memories: list[Memory], entities: EntityResolver, report: GraphReport, *, reread: bool = False
) -> set:
    """Replace the graph rows of ``memories``; returns the (subject, functional_key) timelines
    touched. ``reread``: the memories were extracted before, and are read again because
    something they say now resolves differently (EntityResolver.rereads)."""
    touched: set[tuple[uuid.UUID, str]] = set()
    ids = [m.pk for m in memories]
    before = set()
    for subject_id, object_id, key in Edge.objects.filter(source_memory_id__in=ids).values_list(
        "subject_id", "object_entity_id", "functional_key"
    ):
        before |= {subject_id, object_id} - {None}
        if key:
            touched.add((subject_id, key))
    before |= set(Mention.objects.filter(memory_id__in=ids).values_list("entity_id", flat=True))
    # What the graph says these entities are, so that the keys of other memories that mention
    # one whose descriptions change are built again (graph/key_descriptions.py).
    described = description_signatures(before)
    entities.forget(before)
    Edge.objects.filter(source_memory_id__in=ids).delete()
    Mention.objects.filter(memory_id__in=ids).delete()

    new_edges: list[Edge] = []
    new_mentions: list[Mention] = []
    parsed, failed = _parse(memories)
    results = []
    for memory, speaker, doc, context_doc in parsed:
        try:
            results.append((memory, extraction.extract(doc, speaker=speaker, context_doc=context_doc)))
        except Exception as exc:  # one odd memory must not stop a batch, nor a rebuild
            logger.exception("extraction failed for memory %s", memory.pk)
            failed[memory.pk] = error_text(exc)
    # The batch's names looked up at once (the extractor is a pure function of the text).
    refs = [
        ref
        for _memory, result in results
        for ref in (*result.mentions, *(r for fact in result.facts for r in (fact.subject, fact.obj)))
    ]
    entities.prefetch(refs)
    # The bucket's entities the batch names that these memories did not before: what they are
    # described as before the batch gives them aliases or edges.
    named = {entities.by_key.get(ref.key) for ref in refs if ref is not None} - {None}
    described |= description_signatures({e.pk for e in named} - before)
    for memory, result in results:
        if reread:
            report.reread += 1
        else:
            report.memories += 1

        def known(ref, memory_id=memory.pk) -> bool:
            return entities.resolve(ref, memory_id) is not None

        # "my sister" is the bucket's Anna when it knows her name; else an attribute of the user.
        result = extraction.stored(result, known)
        mentioned: set[uuid.UUID] = set()
        for ref in result.mentions:
            entity = entities.resolve(ref, memory.pk)
            if entity is not None and entity.pk not in mentioned:
                mentioned.add(entity.pk)
                new_mentions.append(
                    Mention(tenant_id=bucket.tenant_id, bucket_id=bucket.pk, memory=memory, entity=entity)
                )
        seen_facts = set()
        for fact in result.facts:
            subject = entities.resolve(fact.subject, memory.pk)
            obj = entities.resolve(fact.obj, memory.pk) if fact.obj is not None else None
            if subject is None or fact.obj is not None and obj is None or obj is not None and obj.pk == subject.pk:
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
    if entities.rules.edges:
        new_edges = _corrected_edges(new_edges, entities, touched)
    new_edges = [e for e in new_edges if e.subject_id != e.object_entity_id]
    Mention.objects.bulk_create(new_mentions, ignore_conflicts=True)
    Edge.objects.bulk_create(new_edges)
    report.edges += len(new_edges)
    mention_counts_refresh(bucket=bucket, entity_ids={m.entity_id for m in new_mentions})
    # A memory the extractor failed on is not marked processed: it gets a failure record (and
    # its retry time) instead, and the sweep comes back to it then.
    done = [i for i in ids if i not in failed]
    _record_processed(done)
    # Their key documents name what the graph says of them: built again (graph.tasks queues it).
    keys_mark_stale(memory_ids=done)
    mark_described_stale(described, before | {m.entity_id for m in new_mentions} | {e.subject_id for e in new_edges})
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


def _corrected_edges(edges: list[Edge], entities: EntityResolver, touched: set) -> list[Edge]:
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


def _bucket_held(bucket: Bucket) -> bool:
    """Hold the bucket's row (FOR KEY SHARE, the lock the graph rows' foreign keys take) for the
    rest of the transaction, before the graph lock: a delete or a merge of the bucket then waits
    for this extraction, or has already removed it and its memories, and there is nothing to
    extract. Without it, rows read before a delete committed were extracted into entities of a
    bucket that no longer exists, and the insert failed its foreign key."""
    try:
        hold_bucket(bucket)
    except NotFound:
        logger.info("bucket %s was deleted or merged away; its memories are not extracted", bucket.pk)
        return False
    return True


def _reread(bucket: Bucket, entities: EntityResolver, report: GraphReport, *, limit: int | None) -> tuple[set, set]:
    """Extract again the memories whose reading changed with what extraction just learned (a
    full name, a relative's name: EntityResolver.rereads), until nothing changes; returns the
    timelines touched and the memories read again. Past ``limit`` memories, the rest are left
    to the sweep (marked as seen by no extractor version). Then the entities nothing mentions
    any more are dropped."""
    touched: set = set()
    done: set[uuid.UUID] = set()
    while True:
        ids = entities.rereads() - done
        if not ids:
            break
        if limit is not None and len(done) + len(ids) > limit:
            ordered = list(Memory.objects.filter(pk__in=ids).order_by("created_at", "id").values_list("pk", flat=True))
            keep = max(limit - len(done), 0)
            _mark_stale(ordered[keep:])
            ids = set(ordered[:keep])
            if not ids:
                break
        done |= ids
        memories = list(
            Memory.objects.filter(pk__in=list(ids)).defer("embedding", "context_embedding").order_by("created_at", "id")
        )
        for start in range(0, len(memories), BATCH):
            touched |= _extract_batch(bucket, memories[start : start + BATCH], entities, report, reread=True)
    entities.drop_orphans()
    return touched, done


def _mark_stale(memory_ids: list[uuid.UUID]) -> None:
    """The sweep (graph_extract_pending) extracts these memories again."""
    if memory_ids:
        with connection.cursor() as cur:
            cur.execute("UPDATE graph_processed SET extractor_version = 0 WHERE memory_id = ANY(%s)", [memory_ids])


def _extract_in_bucket(bucket: Bucket, rows: list[Memory], report: GraphReport) -> None:
    with transaction.atomic():
        if not _bucket_held(bucket):
            return
        # One extractor at a time per bucket: entity creation and timelines stay consistent.
        bucket_lock(bucket)
        rules = bucket_rules(bucket=bucket)
        entities = EntityResolver(bucket, rules)
        touched: set = set()
        for start in range(0, len(rows), BATCH):
            touched |= _extract_batch(bucket, rows[start : start + BATCH], entities, report)
        reread_touched, reread = _reread(bucket, entities, report, limit=REREAD_LIMIT)
        touched |= reread_touched
        if rules:
            rules_settle(bucket, rules)
        # A memory read again may have left a timeline it was superseded on.
        affected = timeline_windows_recompute(bucket, touched) | reread
        report.superseded += supersession_recompute(bucket, affected)


def graph_rebuild(*, bucket: Bucket) -> GraphReport:
    """Drop and rebuild a bucket's graph from its memories, oldest first. The operator's
    corrections (graph_corrections) are not dropped: extraction follows them again."""
    report = GraphReport()
    if not nlp.available():
        report.skipped = "spaCy pipeline unavailable"
        return report
    with transaction.atomic():
        if not _bucket_held(bucket):
            report.skipped = "the bucket was deleted"
            return report
        bucket_lock(bucket)
        # Undo what the graph wrote onto memories, then drop the graph.
        supersessions_clear(bucket=bucket)
        Edge.objects.for_bucket(bucket).delete()
        Mention.objects.filter(tenant_id=bucket.tenant_id, bucket_id=bucket.pk).delete()
        Entity.objects.for_bucket(bucket).delete()
        # The operator's corrections are kept and replayed (graph/rules.py).
        rules = bucket_rules(bucket=bucket)
        entities = EntityResolver(bucket, rules)
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
        touched |= _reread(bucket, entities, report, limit=None)[0]
        if rules:
            rules_settle(bucket, rules)
        affected = timeline_windows_recompute(bucket, touched)
        report.superseded += supersession_recompute(bucket, affected)
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


def graph_extract_pending(*, limit: int = 1000, bucket: Bucket | None = None) -> GraphReport:
    """Extract memories the graph has not seen yet, oldest first, at most ``limit`` (of ``bucket``,
    or of every bucket: the sweep behind the async path)."""
    in_bucket = "AND m.tenant_id = %s AND m.bucket_id = %s" if bucket is not None else ""
    with connection.cursor() as cur:
        cur.execute(
            f"""
            SELECT m.id FROM memories m
            LEFT JOIN graph_processed p ON p.memory_id = m.id
            WHERE (p.memory_id IS NULL OR p.extractor_version < %s) {in_bucket}
              -- A memory the extractor failed on waits for its retry time
              -- (enrichment_failures_memory_stage serves the anti-join).
              AND NOT EXISTS (
                SELECT 1 FROM enrichment_failures f
                WHERE f.memory_id = m.id AND f.stage = %s AND f.next_retry_at > statement_timestamp()
              )
            ORDER BY m.created_at LIMIT %s
            """,
            [
                EXTRACTOR_VERSION,
                *([bucket.tenant_id, bucket.pk] if bucket is not None else []),
                EnrichmentStage.GRAPH.value,
                limit,
            ],
        )
        ids = [row[0] for row in cur.fetchall()]
    if not ids:
        return GraphReport()
    report = graph_extract_memories(memory_ids=ids)
    report.selected = len(ids)
    return report
