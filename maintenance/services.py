"""The maintenance jobs. Each public function is the body of one Celery task and
one management command (see ``maintenance/tasks.py`` and ``management/commands``).

All of them are idempotent and safe to run again after a crash: they only fill
what is missing (NULL columns, pairs not yet stored, links not yet recorded),
commit in batches, and keep their place in the database itself (the NULLs, or a
:class:`~maintenance.models.ScanCursor`). Runs are recorded by
``maintenance.jobs.run_job``; the ``recorder`` argument receives totals, progress
and counts.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from audit.services import Actor, audit_record
from engram_site import activity
from engram_site.exceptions import Conflict, DomainError, NotFound
from engram_site.providers import embedding
from maintenance import contradictions, neighbours, signals
from maintenance.classifier import Classification, ClassifyInput, get_classifier
from maintenance.jobs import JobRecorder, advisory_lock
from maintenance.models import ConflictCandidate, ConflictStatus, DuplicateCandidate, DuplicateStatus, ScanCursor
from maintenance.pairs import repoint_pairs
from memories import hooks, lemmatizer
from memories.links import RESERVED_PREFIX
from memories.models import EnrichmentStage, Memory
from memories.services.classification import memories_label
from memories.services.embedding_switch import embedding_switch_run, embedding_switch_status
from memories.services.enrichment import (
    ENRICHMENT_KINDS,
    EnrichmentReport,
    memories_enrich_all_pending,
    pending_enrichment_count,
)
from memories.services.enrichment_failures import deferred, failures_clear, failures_record, isolate
from memories.services.feed import events_expire, events_trim
from memories.services.links import links_add
from memories.services.merge import memories_absorb
from memories.text import text_hash
from tenants.models import Bucket, Tenant

logger = logging.getLogger(__name__)

SCAN_BATCH = 500


def _null_recorder() -> JobRecorder:
    return JobRecorder(None)


# --- enrichment: embeddings, lemmas, context vectors ---------------------------------------------


def memory_events_maintain(*, recorder: JobRecorder, now: datetime | None = None) -> dict:
    """The change feed's job: record ``expired`` for memories whose expiry passed since the last
    run (the schedule's interval is the latency), delete events past ENGRAM_EVENTS_RETENTION_DAYS."""
    counts = {"expired": events_expire(now=now), "trimmed": events_trim(now=now)}
    recorder.add(**counts)
    return counts


def enrichment_sweep(*, recorder: JobRecorder, batch_size: int | None = None) -> EnrichmentReport:
    """Fill every missing derived column (the every-minute sweep).

    This is what makes the broker optional: a write whose hint was lost (broker
    down, worker killed) still has NULL columns, and this finds it through the
    partial index idx_memories_enrich_pending. Rows that get their embedding are
    handed on to classification, the near-duplicate scan and the link pass.
    """
    recorder.set_total(pending_enrichment_count())

    def on_batch(report: EnrichmentReport) -> None:
        recorder.advance(report.scanned)
        if report.embedded_ids:
            hooks.after_enrichment(memory_ids=report.embedded_ids)

    report = memories_enrich_all_pending(batch_size=batch_size or settings.ENGRAM_ENRICH_BATCH_SIZE, on_batch=on_batch)
    recorder.add(**report.counts())
    if report.failed:
        recorder.fail("; ".join(report.errors))
    return report


def missing_fill(
    *, recorder: JobRecorder, kind: str, bucket: Bucket | None = None, batch_size: int | None = None
) -> EnrichmentReport:
    """``embed_missing`` (kind="embeddings") and ``lemmatize_missing`` (kind="lemmas").

    Batched (one transaction per batch), resumable (the NULL columns are the
    cursor: a run that stops leaves the rest for the next) and safe to run
    concurrently (rows are claimed with FOR UPDATE SKIP LOCKED).
    """
    if kind not in ENRICHMENT_KINDS:
        raise ValueError(f"unknown kind {kind!r}")
    recorder.set_total(pending_enrichment_count(bucket=bucket, kind=kind))
    report = memories_enrich_all_pending(
        batch_size=batch_size or settings.ENGRAM_ENRICH_BATCH_SIZE,
        bucket=bucket,
        kind=kind,
        on_batch=lambda r: recorder.advance(r.scanned),
    )
    recorder.add(**report.counts())
    if report.failed:
        recorder.fail("; ".join(report.errors))
    return report


# --- embedding model switch ---------------------------------------------------------------------


def embedding_switch(*, recorder: JobRecorder, bucket: Bucket, stop_after: int | None = None) -> dict:
    """The ``switch_embedding_model`` job of one bucket (memories.services.embedding_switch):
    progress is the bucket's memories with vectors of the new model staged. One run per
    bucket at a time (an advisory lock); LockHeld when another holds it."""
    with advisory_lock(f"switch_embedding_model:{bucket.pk}"):
        status = embedding_switch_status(bucket=bucket)
        recorder.set(bucket_id=str(bucket.pk), model=status.model, next_model=status.next_model)
        recorder.set_total(status.memories)
        recorder.advance(status.staged)  # staged by earlier runs
        try:
            outcome = embedding_switch_run(bucket=bucket, on_batch=recorder.advance, stop_after=stop_after)
        except embedding.EmbeddingUnavailable as exc:
            recorder.fail(f"the embedding model is unavailable ({exc}); the next run goes on from here")
            return {"status": "failed", "model": status.next_model, "staged": recorder.done}
        recorder.add(staged=outcome["staged"], swapped=outcome.get("swapped", 0))
        recorder.set(status=outcome["status"])
        return outcome


# --- HNSW reindex -----------------------------------------------------------------------------------

HNSW_INDEXES = ("idx_memories_embedding_hnsw", "idx_memories_context_hnsw")


def _index_size(cur, name: str) -> int | None:
    cur.execute("SELECT pg_relation_size(c.oid) FROM pg_class c WHERE c.relname = %s AND c.relkind = 'i'", [name])
    row = cur.fetchone()
    return row[0] if row else None


def _drop_leftovers(cur, name: str) -> list[str]:
    """A REINDEX CONCURRENTLY that was interrupted leaves an invalid ``<name>_ccnew``
    (or ``_ccold``) index behind, which every write keeps maintaining. Drop them."""
    cur.execute(
        """
        SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
        WHERE NOT i.indisvalid AND (c.relname LIKE %s OR c.relname LIKE %s)
        """,
        [name + "_ccnew%", name + "_ccold%"],
    )
    dropped = [row[0] for row in cur.fetchall()]
    for leftover in dropped:
        cur.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{leftover}"')
    return dropped


def hnsw_reindex(*, recorder: JobRecorder, indexes: Iterable[str] = HNSW_INDEXES) -> dict:
    """``REINDEX INDEX CONCURRENTLY`` each HNSW index (seed 000: the graph degrades as
    the inserted distribution drifts from the one it was built on).

    CONCURRENTLY builds a new index next to the old one and swaps them, taking
    only locks that let reads and writes go on. It cannot run inside a
    transaction, so this must be called in autocommit mode; the caller holds the
    advisory lock that keeps two reindexes apart (``run_job(..., lock=True)``).
    Records each index's size before and after and how long it took.
    """
    if connection.in_atomic_block:
        raise RuntimeError("REINDEX CONCURRENTLY cannot run inside a transaction")
    indexes = list(indexes)
    recorder.set_total(len(indexes))
    results: dict = {}
    with connection.cursor() as cur:
        for name in indexes:
            if not re.fullmatch(r"[a-z0-9_]+", name):
                raise ValueError(f"not an index name: {name!r}")
            dropped = _drop_leftovers(cur, name)
            before = _index_size(cur, name)
            if before is None:
                results[name] = {"skipped": "no such index"}
                recorder.advance()
                continue
            started = time.monotonic()
            cur.execute(f'REINDEX INDEX CONCURRENTLY "{name}"')
            seconds = round(time.monotonic() - started, 3)
            after = _index_size(cur, name)
            results[name] = {"size_before": before, "size_after": after, "seconds": seconds}
            if dropped:
                results[name]["dropped_leftovers"] = dropped
            recorder.set(**{name: results[name]})
            recorder.advance()
            logger.info("reindexed %s in %.1fs: %d -> %d bytes", name, seconds, before, after)
    return results


# --- classification ---------------------------------------------------------------------------------


def _classifiable(*, force: bool) -> Q:
    if force:
        # Everything a classifier labelled before, and everything unlabelled; labels a
        # client set itself (no "classified_by") are left alone.
        return (
            Q(classified_scope__isnull=True) | Q(classified_topic__isnull=True) | Q(metadata__has_key="classified_by")
        )
    return Q(classified_scope__isnull=True) | Q(classified_topic__isnull=True)


def classification_disabled_tenants():
    """Tenants whose memories are not classified: the per-tenant flag is off
    (seed 000: classification costs money on long-tail tenants), or the tenant is inactive."""
    return Tenant.objects.filter(Q(settings__classification_enabled=False) | Q(is_active=False)).values("pk")


def memories_classify(
    *,
    recorder: JobRecorder | None = None,
    memory_ids: Iterable | None = None,
    bucket: Bucket | None = None,
    force: bool = False,
    batch_size: int = 64,
    classifier=None,
) -> dict:
    """Set ``classified_scope`` and ``classified_topic`` where they are missing.

    Only rows with an embedding are classified (the local classifier compares it
    with its prototypes; rows without one are picked up once the enrichment
    sweep has filled it). Labels a client set are kept: a NULL column is filled,
    a set one is not overwritten (``force`` relabels what a classifier labelled).
    The classifier's name goes into ``metadata.classified_by``.
    """
    recorder = recorder or _null_recorder()
    classifier = classifier or get_classifier()
    queryset = (
        Memory.objects.filter(_classifiable(force=force), embedding__isnull=False)
        .exclude(tenant_id__in=classification_disabled_tenants())
        .order_by("id")
    )
    if bucket is not None:
        queryset = queryset.for_bucket(bucket)
    if memory_ids is not None:
        queryset = queryset.filter(pk__in=list(memory_ids))
    else:
        # The sweep leaves a row the classifier failed on until its retry time.
        queryset = queryset.filter(~deferred(EnrichmentStage.CLASSIFICATION))
    recorder.set_total(queryset.count())
    counts = {"classified": 0, "general": 0, "specific": 0, "failures_recorded": 0}
    last_id = None
    while True:
        activity.pause()
        page = queryset if last_id is None else queryset.filter(pk__gt=last_id)
        rows = list(page.values_list("id", "content", "embedding", "embedding_model")[:batch_size])
        if not rows:
            break
        last_id = rows[-1][0]
        items = [
            _Classified(id=i, input=ClassifyInput(content=content, embedding=vector, model=model))
            for i, content, vector, model in rows
        ]
        # A row the classifier fails on is found (the batch is halved) and recorded; the rest
        # of the batch is labelled.
        found = isolate(items, lambda batch: _classify(classifier, batch), key=lambda item: item.id)
        done = [item for item in items if item.id not in found.errors]
        counts["classified"] += memories_label(
            ids=[item.id for item in done],
            scopes=[item.result.scope for item in done],
            topics=[item.result.topic for item in done],
            by=[item.result.by for item in done],
            force=force,
        )
        failures_clear(stage=EnrichmentStage.CLASSIFICATION, memory_ids=[item.id for item in done])
        failures_record(stage=EnrichmentStage.CLASSIFICATION, errors=found.errors)
        counts["failures_recorded"] += len(found.errors)
        for item in done:
            counts[item.result.scope] += 1
        recorder.advance(len(rows))
    failures = getattr(classifier, "failures", 0)
    if failures:
        counts["llm_fallbacks"] = failures
    counts["classifier"] = classifier.name
    recorder.set(**counts)
    return counts


@dataclass
class _Classified:
    id: uuid.UUID
    input: ClassifyInput
    result: Classification | None = None


def _classify(classifier, items: list[_Classified]) -> dict:
    results = classifier.classify([item.input for item in items])
    if len(results) != len(items):
        raise ValueError(f"the classifier answered {len(results)} labels for {len(items)} memories")
    for item, result in zip(items, results, strict=True):
        item.result = result
    return {}


# --- incremental bucket scans (near-duplicates, links) ------------------------------------------------


@dataclass(frozen=True)
class _Row:
    id: uuid.UUID
    created_at: datetime


def _buckets(bucket: Bucket | None) -> list[tuple[uuid.UUID, uuid.UUID]]:
    if bucket is not None:
        return [(bucket.tenant_id, bucket.pk)]
    return list(Bucket.objects.order_by("tenant_id", "id").values_list("tenant_id", "id"))


def _scan_rows(*, tenant_id, bucket_id, after: tuple | None) -> Iterator[list[_Row]]:
    """Batches of embedded rows of a bucket after ``after`` = (created_at, id), in that order."""
    while True:
        with connection.cursor() as cur:
            position = "AND (created_at, id) > (%s, %s)" if after else ""
            cur.execute(
                f"""
                SELECT id, created_at FROM memories
                WHERE tenant_id = %s AND bucket_id = %s AND embedding IS NOT NULL {position}
                ORDER BY created_at, id LIMIT %s
                """,
                [tenant_id, bucket_id, *(after or ()), SCAN_BATCH],
            )
            rows = [_Row(id=r[0], created_at=r[1]) for r in cur.fetchall()]
        if not rows:
            return
        yield rows
        after = (rows[-1].created_at, rows[-1].id)


def _first_unembedded(*, tenant_id, bucket_id, after: tuple | None) -> tuple | None:
    with connection.cursor() as cur:
        position = "AND (created_at, id) > (%s, %s)" if after else ""
        cur.execute(
            f"""
            SELECT created_at, id FROM memories
            WHERE tenant_id = %s AND bucket_id = %s AND embedding IS NULL {position}
            ORDER BY created_at, id LIMIT 1
            """,
            [tenant_id, bucket_id, *(after or ())],
        )
        row = cur.fetchone()
    return tuple(row) if row else None


def _pending_scan_count(*, tenant_id, bucket_id, after: tuple | None) -> int:
    with connection.cursor() as cur:
        position = "AND (created_at, id) > (%s, %s)" if after else ""
        cur.execute(
            "SELECT count(*) FROM memories"
            f" WHERE tenant_id = %s AND bucket_id = %s AND embedding IS NOT NULL {position}",
            [tenant_id, bucket_id, *(after or ())],
        )
        return cur.fetchone()[0]


def _incremental_scan(
    *, job: str, bucket: Bucket | None, full: bool, recorder: JobRecorder, visit, after_bucket=None
) -> None:
    """Visit every embedded memory once, bucket by bucket, after the bucket's cursor.

    The cursor advances in (created_at, id) order as batches complete, so a run
    that dies resumes where it stopped; it never passes a row that still has no
    embedding (that row is visited once the sweep has embedded it). ``full``
    starts from the beginning. Memories written later with an older
    ``created_at`` (imports) are visited by the per-write hint instead
    (``hooks.after_ingest``), or by a ``--full`` run.
    """
    plan = []
    for tenant_id, bucket_id in _buckets(bucket):
        cursor, _ = ScanCursor.objects.get_or_create(tenant_id=tenant_id, bucket_id=bucket_id, job=job)
        after = None if full or cursor.position_at is None else (cursor.position_at, cursor.position_id)
        pending = _pending_scan_count(tenant_id=tenant_id, bucket_id=bucket_id, after=after)
        if pending:
            plan.append((cursor, after, pending))
    recorder.set_total(sum(p[2] for p in plan))
    recorder.add(buckets=len(plan), scanned=0)
    for cursor, after, _pending in plan:
        tenant_id, bucket_id = cursor.tenant_id, cursor.bucket_id
        stop = _first_unembedded(tenant_id=tenant_id, bucket_id=bucket_id, after=after)
        exact = neighbours.embedded_count(tenant_id=tenant_id, bucket_id=bucket_id) < neighbours.EXACT_SCAN_BELOW
        visited = 0
        for rows in _scan_rows(tenant_id=tenant_id, bucket_id=bucket_id, after=after):
            for row in rows:
                activity.pause()
                visit(row, tenant_id=tenant_id, bucket_id=bucket_id, exact=exact)
            visited += len(rows)
            # Advance to the last row visited, but never past a row still waiting for its
            # embedding (the rows after it are visited again next time: harmless, idempotent).
            done = [r for r in rows if stop is None or (r.created_at, r.id) < stop]
            if done:
                cursor.position_at, cursor.position_id = done[-1].created_at, done[-1].id
                cursor.save(update_fields=["position_at", "position_id", "updated_at"])
            recorder.advance(len(rows))
        recorder.add(scanned=visited)
        if after_bucket is not None and visited:
            after_bucket(tenant_id=tenant_id, bucket_id=bucket_id)


# --- near-duplicates ---------------------------------------------------------------------------------

NEAR_DUPLICATE_K = 5


def _store_candidates(*, tenant_id, bucket_id, memory_id, found: list[neighbours.Neighbour]) -> int:
    if not found:
        return 0
    params: list = []
    for n in found:
        a, b = sorted([memory_id, n.id])  # uuid order == PostgreSQL's uuid order
        params += [tenant_id, bucket_id, a, b, n.similarity, DuplicateStatus.PENDING]
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO duplicate_candidates (tenant_id, bucket_id, memory_a_id, memory_b_id, similarity, status) "
            "VALUES " + ", ".join(["(%s, %s, %s, %s, %s, %s)"] * len(found)) +
            # One row per pair: dupcand_pair_unique.
            " ON CONFLICT (memory_a_id, memory_b_id) DO NOTHING",
            params,
        )  # fmt: skip
        return cur.rowcount


def _threshold(threshold: float | None) -> float:
    return settings.ENGRAM_NEAR_DUPLICATE_THRESHOLD if threshold is None else threshold


def near_duplicates_scan(
    *, recorder: JobRecorder, bucket: Bucket | None = None, full: bool = False, threshold: float | None = None
) -> dict:
    """Store pairs of memories of a bucket whose cosine similarity is at least
    ``threshold`` as pending :class:`DuplicateCandidate` rows for review.

    Exact duplicates never get here (the hash index makes them one row); these
    are paraphrases and near-copies. Each memory is compared once, by a kNN
    query, with the whole bucket; the bucket's cursor makes the hourly run look
    only at memories added since the last one.
    """
    minimum = _threshold(threshold)
    found = {"candidates": 0}

    def visit(row: _Row, *, tenant_id, bucket_id, exact: bool) -> None:
        near = neighbours.nearest(
            tenant_id=tenant_id, bucket_id=bucket_id, memory_id=row.id, k=NEAR_DUPLICATE_K, min_similarity=minimum,
            exact=exact,
        )  # fmt: skip
        found["candidates"] += _store_candidates(tenant_id=tenant_id, bucket_id=bucket_id, memory_id=row.id, found=near)

    _incremental_scan(job="near_duplicates", bucket=bucket, full=full, recorder=recorder, visit=visit)
    recorder.add(candidates=found["candidates"])
    recorder.set(threshold=minimum)
    return dict(recorder.counts)


def near_duplicates_find_for(*, memory_ids: Iterable, threshold: float | None = None) -> dict:
    """The per-write hint: compare these (new) memories with their buckets."""
    minimum = _threshold(threshold)
    counts = {"scanned": 0, "candidates": 0}
    rows = Memory.objects.filter(pk__in=list(memory_ids), embedding__isnull=False)
    for memory_id, tenant_id, bucket_id in rows.values_list("id", "tenant_id", "bucket_id"):
        activity.pause()
        near = neighbours.nearest(
            tenant_id=tenant_id, bucket_id=bucket_id, memory_id=memory_id, k=NEAR_DUPLICATE_K, min_similarity=minimum
        )
        counts["candidates"] += _store_candidates(
            tenant_id=tenant_id, bucket_id=bucket_id, memory_id=memory_id, found=near
        )
        counts["scanned"] += 1
    return counts


# --- contradictions ----------------------------------------------------------------------------------

CONFLICT_K = contradictions.CANDIDATE_K
CONFLICT_MIN_SIMILARITY = contradictions.CANDIDATE_MIN_SIMILARITY


# At most this many memories of the bucket found by the diet probe's words, newest first.
CONFLICT_LEXICAL_LIMIT = 20


def _lexical_partners(*, tenant_id, bucket_id, memory_id, content: str) -> list[uuid.UUID]:
    """Memories of the bucket that share a diet probe's words with ``content`` (contradictions.diet_probe)."""
    words = sorted(contradictions.diet_probe(content))
    if not words:
        return []
    with connection.cursor() as cur:
        # idx_memories_lemmatized_tsv serves the @@; the probe's words are [a-z]+ only.
        cur.execute(
            "SELECT id FROM memories WHERE tenant_id = %s AND bucket_id = %s AND id <> %s"
            " AND lemmatized_tsv @@ to_tsquery('simple', %s) ORDER BY created_at DESC LIMIT %s",
            [tenant_id, bucket_id, memory_id, " | ".join(words), CONFLICT_LEXICAL_LIMIT],
        )
        return [row[0] for row in cur.fetchall()]


def _store_conflicts(*, tenant_id, bucket_id, memory_id, found: list[neighbours.Neighbour]) -> int:
    """Run the detector on ``memory_id`` and each neighbour, and each memory its diet probe
    finds; store the pairs it raises."""
    me = Memory.objects.filter(pk=memory_id).values("id", "content", "created_at", "superseded_by").first()
    if me is None:
        return 0
    similarity: dict = {n.id: n.similarity for n in found}
    for other_id in _lexical_partners(
        tenant_id=tenant_id, bucket_id=bucket_id, memory_id=memory_id, content=me["content"]
    ):
        similarity.setdefault(other_id, None)
    if not similarity:
        return 0
    rows = {
        r["id"]: r
        for r in Memory.objects.filter(pk__in=list(similarity)).values("id", "content", "created_at", "superseded_by")
    }
    params: list = []
    for other_id in similarity:
        other = rows.get(other_id)
        if other is None or me["superseded_by"] == other_id or other["superseded_by"] == memory_id:
            continue  # gone, or one already replaced the other: nothing left to review
        older, newer = sorted([me, other], key=lambda r: (r["created_at"], str(r["id"])))
        finding = contradictions.detect(older["content"], newer["content"])
        if finding is None:
            continue
        a, b = sorted([memory_id, other_id])  # uuid order == PostgreSQL's uuid order
        params += [tenant_id, bucket_id, a, b, finding.code, finding.reason, finding.score,
                   similarity[other_id], contradictions.DETECTOR_VERSION, ConflictStatus.OPEN]  # fmt: skip
    if not params:
        return 0
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO conflict_candidates (tenant_id, bucket_id, memory_a_id, memory_b_id, code, reason, score, "
            "similarity, detector_version, status, resolved_by) VALUES "
            + ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, '')"] * (len(params) // 10))
            # One row per pair (conflict_pair_unique): a pair found again, or resolved, stays as it is.
            + " ON CONFLICT (memory_a_id, memory_b_id) DO NOTHING",
            params,
        )
        return cur.rowcount


def conflicts_scan(*, recorder: JobRecorder, bucket: Bucket | None = None, full: bool = False) -> dict:
    """Store pairs of memories of a bucket that likely contradict each other as open
    :class:`ConflictCandidate` rows for review (the hourly catch-up of the per-write hint).

    Each memory added since the bucket's cursor is compared with its nearest neighbours by
    the detector of ``maintenance/contradictions.py``; pairs already stored (open or
    resolved) are left as they are. Reads only: no memory changes.
    """
    found = {"conflicts": 0}

    def visit(row: _Row, *, tenant_id, bucket_id, exact: bool) -> None:
        near = neighbours.nearest(
            tenant_id=tenant_id, bucket_id=bucket_id, memory_id=row.id, k=CONFLICT_K,
            min_similarity=CONFLICT_MIN_SIMILARITY, exact=exact,
        )  # fmt: skip
        found["conflicts"] += _store_conflicts(tenant_id=tenant_id, bucket_id=bucket_id, memory_id=row.id, found=near)

    _incremental_scan(job="conflicts", bucket=bucket, full=full, recorder=recorder, visit=visit)
    recorder.add(conflicts=found["conflicts"])
    recorder.set(detector_version=contradictions.DETECTOR_VERSION)
    return dict(recorder.counts)


def conflicts_find_for(*, memory_ids: Iterable) -> dict:
    """The per-write hint (queued after enrichment): look for contradictions of these (new) memories."""
    counts = {"scanned": 0, "conflicts": 0}
    rows = Memory.objects.filter(pk__in=list(memory_ids), embedding__isnull=False)
    for memory_id, tenant_id, bucket_id in rows.values_list("id", "tenant_id", "bucket_id"):
        activity.pause()
        near = neighbours.nearest(
            tenant_id=tenant_id, bucket_id=bucket_id, memory_id=memory_id, k=CONFLICT_K,
            min_similarity=CONFLICT_MIN_SIMILARITY,
        )  # fmt: skip
        counts["conflicts"] += _store_conflicts(
            tenant_id=tenant_id, bucket_id=bucket_id, memory_id=memory_id, found=near
        )
        counts["scanned"] += 1
    return counts


def duplicate_candidates_resolve(*, candidates, status: str) -> int:
    """Record an operator's decision on candidates (``kept_both`` or ``merged``)."""
    if status not in (DuplicateStatus.KEPT_BOTH, DuplicateStatus.MERGED):
        raise ValueError(f"not a resolution: {status!r}")
    return candidates.update(status=status, reviewed_at=timezone.now())


# --- links: refines / cites (and the graph's supersedes) ---------------------------------------------

# "refines": a newer memory says what an older one said, and more. Its embedding is
# close (cosine >= REFINE_MIN_SIMILARITY), it contains at least REFINE_MIN_COVERAGE of
# the older memory's content words, and adds at least REFINE_MIN_EXTRA_TERMS of its own.
REFINE_MIN_SIMILARITY = 0.6
REFINE_MIN_COVERAGE = 0.75
REFINE_MIN_EXTRA_TERMS = 2
REFINE_MIN_TERMS = 2
LINK_K = 8
# "cites": a memory names another by id, or quotes its whole text in quotation marks.
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.IGNORECASE)
_QUOTED = re.compile(r"[\"“”«»]([^\"“”«»]{8,2000})[\"“”«»]")
QUOTE_MIN_WORDS = 3


def _terms(texts: list[str]) -> list[set[str]]:
    try:
        lemmas = lemmatizer.lemmatize_many(texts)
    except lemmatizer.LemmatizerUnavailable:
        lemmas = [" ".join(re.findall(r"\w+", t.lower())) for t in texts]
    return [set(lemma.split()) for lemma in lemmas]


def _cited(memory: dict) -> set[uuid.UUID]:
    """Memories of the same bucket that ``memory`` names by id or quotes verbatim."""
    # Ids in the content or in the client's metadata (not in the links this pass wrote).
    metadata = {k: v for k, v in (memory["metadata"] or {}).items() if not k.startswith(RESERVED_PREFIX)}
    haystack = memory["content"] + " " + json.dumps(metadata, default=str)
    ids = {uuid.UUID(m) for m in _UUID.findall(haystack)} - {memory["id"]}
    hashes = {
        text_hash(q) for q in _QUOTED.findall(memory["content"]) if len(q.split()) >= QUOTE_MIN_WORDS
    }  # fmt: skip
    if not ids and not hashes:
        return set()
    same_bucket = Memory.objects.filter(tenant_id=memory["tenant_id"], bucket_id=memory["bucket_id"]).exclude(
        pk=memory["id"]
    )
    return set(
        same_bucket.filter(Q(pk__in=ids) | Q(text_hash__in=hashes)).values_list("id", flat=True)
    )  # fmt: skip


def _refined(memory: dict, *, exact: bool | None) -> set[uuid.UUID]:
    """Older memories of the same bucket that ``memory`` refines."""
    near = neighbours.nearest(
        tenant_id=memory["tenant_id"], bucket_id=memory["bucket_id"], memory_id=memory["id"], k=LINK_K,
        min_similarity=REFINE_MIN_SIMILARITY, exact=exact,
    )  # fmt: skip
    if not near:
        return set()
    older = list(
        Memory.objects.filter(pk__in=[n.id for n in near], created_at__lt=memory["created_at"]).values_list(
            "id", "content"
        )
    )
    if not older:
        return set()
    mine, *theirs = _terms([memory["content"]] + [content for _, content in older])
    refined = set()
    for (other_id, _), terms in zip(older, theirs, strict=True):
        if len(terms) < REFINE_MIN_TERMS:
            continue
        coverage = len(terms & mine) / len(terms)
        if coverage >= REFINE_MIN_COVERAGE and len(mine - terms) >= REFINE_MIN_EXTRA_TERMS:
            refined.add(other_id)
    return refined


def _store_links(memory_id: uuid.UUID, links: list[tuple[uuid.UUID, str]]) -> int:
    """Add links to ``linked_memory_ids`` and their kinds (memories/links.py)."""
    return links_add(memory_id=memory_id, links=links)


def _link_one(memory: dict, *, exact: bool | None) -> dict[str, int]:
    cites = _cited(memory)
    refines = _refined(memory, exact=exact) - cites
    links = [(i, "cites") for i in sorted(cites)] + [(i, "refines") for i in sorted(refines)]
    _store_links(memory["id"], links)
    return {"cites": len(cites), "refines": len(refines)}


_LINK_FIELDS = ("id", "tenant_id", "bucket_id", "content", "metadata", "created_at")


def _supersession(*, tenant_id, bucket_id) -> int | None:
    """What the apps listening to ``signals.links_recorded`` (the graph's supersession pass)
    changed in a bucket whose links were just recorded; None when nobody listens."""
    bucket = Bucket.objects.get(pk=bucket_id, tenant_id=tenant_id)
    answers = [n for _receiver, n in signals.links_recorded.send(Bucket, bucket=bucket) if n is not None]
    return sum(int(n) for n in answers) if answers else None


def links_pass(*, recorder: JobRecorder, bucket: Bucket | None = None, full: bool = False) -> dict:
    """Record refines / cites links for memories added since the last pass, then run
    the graph's supersession pass on the buckets that changed (``supersedes`` links
    are the graph app's: it decides from temporal facts which memory replaced which)."""
    totals = {"cites": 0, "refines": 0, "superseded": 0}

    def visit(row: _Row, *, tenant_id, bucket_id, exact: bool) -> None:
        memory = Memory.objects.filter(pk=row.id).values(*_LINK_FIELDS).first()
        if memory is not None:
            for kind, n in _link_one(memory, exact=exact).items():
                totals[kind] += n

    def after_bucket(*, tenant_id, bucket_id) -> None:
        superseded = _supersession(tenant_id=tenant_id, bucket_id=bucket_id)
        if superseded is not None:
            totals["superseded"] += superseded

    _incremental_scan(job="links", bucket=bucket, full=full, recorder=recorder, visit=visit, after_bucket=after_bucket)
    recorder.add(**totals)
    return dict(recorder.counts)


def links_find_for(*, memory_ids: Iterable) -> dict:
    """The per-write hint: refines / cites links of these (new) memories."""
    totals = {"scanned": 0, "cites": 0, "refines": 0}
    for memory in Memory.objects.filter(pk__in=list(memory_ids), embedding__isnull=False).values(*_LINK_FIELDS):
        activity.pause()
        for kind, n in _link_one(memory, exact=None).items():
            totals[kind] += n
        totals["scanned"] += 1
    return totals


# --- near-duplicate review: merge / keep both (the console's review queue) -----------------------------

KEEP_CHOICES = ("a", "b")
BULK_KEEP_CHOICES = ("a", "b", "older", "newer")


@dataclass(frozen=True)
class DuplicateMergeResult:
    candidate_id: int
    kept_id: uuid.UUID
    removed_id: uuid.UUID


@dataclass
class BulkReviewResult:
    done: int = 0
    # Candidates already resolved, or removed by an earlier merge of the same batch.
    skipped: int = 0


def duplicate_candidates_repoint(*, mapping: dict[uuid.UUID, uuid.UUID]) -> int:
    """Candidates naming an absorbed memory name its survivor instead (``memories_absorbing``).

    A pair that becomes a memory with itself is deleted; a pair that already exists
    keeps one row, and a decision (kept both) wins over a pending state, so a pair an
    operator said to keep is never suggested again.
    """
    if not mapping:
        return 0
    changed = 0
    with connection.cursor() as cur:
        # memory_a leads dupcand_pair_unique, memory_b has dupcand_memory_b.
        cur.execute(
            "SELECT id FROM duplicate_candidates WHERE memory_a_id = ANY(%s) OR memory_b_id = ANY(%s) ORDER BY id",
            [list(mapping), list(mapping)],
        )
        ids = [row[0] for row in cur.fetchall()]
    for start in range(0, len(ids), 5000):
        changed += _repoint_candidates(ids[start : start + 5000], mapping)
    return changed


def duplicate_candidates_erase(*, tenant: Tenant, memory_ids: list[uuid.UUID]) -> int:
    """Delete the review candidates of erased memories (``memories_erasing``), reviewed or not;
    returns how many. Their foreign keys would cascade too: deleting them here counts them."""
    ids = list(memory_ids)
    # memory_a leads dupcand_pair_unique, memory_b has dupcand_memory_b.
    pairs = DuplicateCandidate.objects.for_tenant(tenant).filter(Q(memory_a_id__in=ids) | Q(memory_b_id__in=ids))
    return pairs.delete()[0]


def _repoint_candidates(ids: list[int], mapping: dict[uuid.UUID, uuid.UUID]) -> int:
    pairs = DuplicateCandidate.objects.filter(pk__in=ids)
    return repoint_pairs(pairs, mapping, undecided=DuplicateStatus.PENDING, decision=("reviewed_at",))


def duplicate_merge(*, candidate: DuplicateCandidate, keep: str, actor: Actor) -> DuplicateMergeResult:
    """Resolve a near-duplicate pair by keeping one memory (``keep``: "a" or "b").

    In one transaction: the kept memory absorbs the other (tags and links united,
    other memories' links, supersession, graph mentions and edges and other candidates
    re-pointed to it — ``memories.services.merge.memories_absorb``), and the other memory is
    **deleted**. The candidate row goes with it (its foreign keys cascade), so the
    audit event ``duplicate.merge`` — which keeps the removed memory's content — is
    the record of the decision.
    """
    if keep not in KEEP_CHOICES:
        raise DomainError(f"keep must be one of {list(KEEP_CHOICES)}.")
    with transaction.atomic():
        locked = DuplicateCandidate.objects.select_for_update().filter(pk=candidate.pk).first()
        if locked is None:
            raise NotFound("This pair is no longer in the review queue.")
        if locked.status != DuplicateStatus.PENDING:
            raise Conflict(f"This pair was already reviewed ({locked.get_status_display()}).", code="already_reviewed")
        kept, removed = (
            (locked.memory_a_id, locked.memory_b_id) if keep == "a" else (locked.memory_b_id, locked.memory_a_id)
        )
        gone = Memory.objects.filter(pk=removed).values("content", "created_at", "hint_tags", "attributed_to").first()
        locked.status, locked.reviewed_at = DuplicateStatus.MERGED, timezone.now()
        locked.save(update_fields=["status", "reviewed_at"])
        memories_absorb(mapping={removed: kept}, actor=actor)
        audit_record(
            actor=actor,
            action="duplicate.merge",
            tenant=Tenant(pk=locked.tenant_id),
            object_type="memory",
            object_ids=[kept, removed],
            details={
                "candidate_id": locked.pk,
                "bucket_id": str(locked.bucket_id),
                "similarity": round(locked.similarity, 4),
                "kept_id": str(kept),
                "removed_id": str(removed),
                "removed": {**(gone or {}), "content": (gone or {}).get("content", "")[:2000]},
            },
        )
    return DuplicateMergeResult(candidate_id=locked.pk, kept_id=kept, removed_id=removed)


def duplicate_keep_both(*, candidate: DuplicateCandidate, actor: Actor) -> bool:
    """Mark a pair as not duplicates. The scans insert pairs with ON CONFLICT DO NOTHING
    on the pair's unique index, so this pair is never suggested again."""
    return duplicates_keep_both(candidates=DuplicateCandidate.objects.filter(pk=candidate.pk), actor=actor).done == 1


def duplicates_keep_both(*, candidates, actor: Actor) -> BulkReviewResult:
    """Keep both memories of every pending pair in ``candidates`` (one audit event per tenant)."""
    result = BulkReviewResult()
    with transaction.atomic():
        rows = list(candidates.select_for_update().order_by("pk"))
        pending = [c for c in rows if c.status == DuplicateStatus.PENDING]
        result.skipped = len(rows) - len(pending)
        DuplicateCandidate.objects.filter(pk__in=[c.pk for c in pending]).update(
            status=DuplicateStatus.KEPT_BOTH, reviewed_at=timezone.now()
        )
        result.done = len(pending)
        by_tenant: dict = {}
        for c in pending:
            by_tenant.setdefault(c.tenant_id, []).append(c)
        for tenant_id, group in by_tenant.items():
            audit_record(
                actor=actor,
                action="duplicate.keep_both",
                tenant=Tenant(pk=tenant_id),
                object_type="duplicate_candidate",
                object_ids=[c.pk for c in group],
                details={"pairs": [[str(c.memory_a_id), str(c.memory_b_id)] for c in group[:50]]},
            )
    return result


def duplicates_merge(*, candidates, keep: str, actor: Actor) -> BulkReviewResult:
    """Merge every pending pair in ``candidates``, keeping "a", "b", the "older" or the
    "newer" memory of each. Each pair is its own transaction (and audit event); pairs an
    earlier merge of the batch removed or re-pointed are skipped."""
    if keep not in BULK_KEEP_CHOICES:
        raise DomainError(f"keep must be one of {list(BULK_KEEP_CHOICES)}.")
    result = BulkReviewResult()
    for candidate_id in list(candidates.order_by("-similarity", "pk").values_list("pk", flat=True)):
        candidate = DuplicateCandidate.objects.filter(pk=candidate_id, status=DuplicateStatus.PENDING).first()
        if candidate is None:
            result.skipped += 1
            continue
        side = keep
        if keep in ("older", "newer"):
            times = dict(
                Memory.objects.filter(pk__in=[candidate.memory_a_id, candidate.memory_b_id]).values_list(
                    "id", "created_at"
                )
            )
            a_older = (times.get(candidate.memory_a_id), str(candidate.memory_a_id)) <= (
                times.get(candidate.memory_b_id),
                str(candidate.memory_b_id),
            )
            side = "a" if a_older == (keep == "older") else "b"
        try:
            duplicate_merge(candidate=candidate, keep=side, actor=actor)
        except (NotFound, Conflict):
            result.skipped += 1
            continue
        result.done += 1
    return result


# --- bucket merges: candidates and scan cursors follow (memories.services.buckets.bucket_merge) ---------------


def maintenance_bucket_merge(*, source: Bucket, target: Bucket, oldest_moved: datetime | None) -> dict:
    """Move ``source``'s review candidates (near-duplicates, contradictions) to ``target`` and
    drop its scan cursors.

    The target's cursors are moved back to ``oldest_moved`` (the oldest memory that
    moved), so the hourly near-duplicate, contradiction and link scans compare the moved memories
    with the target's own: the database stays the queue of record, nothing depends
    on a hint.
    """
    candidates = DuplicateCandidate.objects.for_bucket(source).update(bucket_id=target.pk)
    conflicts = ConflictCandidate.objects.for_bucket(source).update(bucket_id=target.pk)
    ScanCursor.objects.filter(tenant_id=source.tenant_id, bucket_id=source.pk).delete()
    rewound = 0
    if oldest_moved is not None:
        # (oldest_moved, nil uuid): the next scan starts with the oldest moved memory.
        rewound = ScanCursor.objects.filter(
            tenant_id=target.tenant_id, bucket_id=target.pk, position_at__gte=oldest_moved
        ).update(position_at=oldest_moved, position_id=uuid.UUID(int=0))
    return {"duplicate_candidates": candidates, "conflict_candidates": conflicts, "cursors_rewound": rewound}


# --- topics: re-run classification for a selection (the console's topic page) -------------------------

RECLASSIFY_MAX = 5000


def topics_reclassify(
    *,
    bucket: Bucket,
    actor: Actor,
    memory_ids: Iterable | None = None,
    topics: Iterable[str | None] | None = None,
    classifier=None,
) -> dict:
    """Classify again the memories of ``bucket`` given by id and/or by topic (``None``:
    the unlabelled ones), overwriting labels a classifier or an operator set (labels
    a client set are kept; rows without an embedding wait for the enrichment sweep).
    At most :data:`RECLASSIFY_MAX` memories per call; ``manage.py classify --bucket``
    does whole buckets."""
    selection = Q(pk__in=[])
    if memory_ids is not None:
        selection |= Q(pk__in=list(memory_ids))
    for topic in topics or []:
        selection |= Q(classified_topic__isnull=True) if topic is None else Q(classified_topic=topic)
    ids = list(Memory.objects.for_bucket(bucket).filter(selection).values_list("id", flat=True)[: RECLASSIFY_MAX + 1])
    if len(ids) > RECLASSIFY_MAX:
        raise DomainError(
            f"More than {RECLASSIFY_MAX} memories selected; use `manage.py classify --bucket {bucket.pk} --force`."
        )
    counts = memories_classify(memory_ids=ids, bucket=bucket, force=True, classifier=classifier) if ids else {}
    audit_record(
        actor=actor,
        action="topic.reclassify",
        tenant=bucket.tenant,
        object_type="memory",
        object_ids=ids,
        details={"bucket_id": str(bucket.pk), "topics": list(topics or []), "counts": counts},
    )
    return {"selected": len(ids), **counts}
