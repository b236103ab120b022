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
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from maintenance import neighbours
from maintenance.jobs import JobRecorder
from maintenance.models import DuplicateStatus, ScanCursor
from memories import lemmatizer
from memories.links import RESERVED_PREFIX, links_add
from memories.models import Memory
from memories.services import (
    ENRICHMENT_KINDS,
    EnrichmentReport,
    memories_enrich_all_pending,
    pending_enrichment_count,
)
from memories.text import text_hash
from tenants.models import Bucket, Tenant

logger = logging.getLogger(__name__)

SCAN_BATCH = 500


def _null_recorder() -> JobRecorder:
    return JobRecorder(None)


# --- enrichment: embeddings, lemmas, context vectors ---------------------------------------------


def enrichment_sweep(*, recorder: JobRecorder, batch_size: int | None = None) -> EnrichmentReport:
    """Fill every missing derived column (the every-minute sweep).

    This is what makes the broker optional: a write whose hint was lost (broker
    down, worker killed) still has NULL columns, and this finds it through the
    partial index idx_memories_enrich_pending. Rows that get their embedding are
    handed on to classification, the near-duplicate scan and the link pass.
    """
    from memories import hooks

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
    from maintenance.classifier import ClassifyInput, get_classifier

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
    recorder.set_total(queryset.count())
    counts = {"classified": 0, "general": 0, "specific": 0}
    last_id = None
    while True:
        page = queryset if last_id is None else queryset.filter(pk__gt=last_id)
        rows = list(page.values_list("id", "content", "embedding")[:batch_size])
        if not rows:
            break
        last_id = rows[-1][0]
        results = classifier.classify([ClassifyInput(content=content, embedding=vector) for _, content, vector in rows])
        guard = "" if force else "AND (m.classified_scope IS NULL OR m.classified_topic IS NULL)"
        scope_sql = "v.scope" if force else "coalesce(m.classified_scope, v.scope)"
        topic_sql = "v.topic" if force else "coalesce(m.classified_topic, v.topic)"
        with connection.cursor() as cur:
            # One statement per batch; the metadata change is a jsonb merge in SQL, so a
            # concurrent edit of other metadata keys is not lost.
            cur.execute(
                f"""
                UPDATE memories m SET classified_scope = {scope_sql}, classified_topic = {topic_sql},
                       metadata = coalesce(m.metadata, '{{}}'::jsonb) || jsonb_build_object('classified_by', v.by)
                FROM unnest(%s::uuid[], %s::text[], %s::text[], %s::text[]) AS v(id, scope, topic, by)
                WHERE m.id = v.id {guard}
                """,
                [[r[0] for r in rows], [c.scope for c in results], [c.topic for c in results], [c.by for c in results]],
            )
            counts["classified"] += cur.rowcount
        for result in results:
            counts[result.scope] += 1
        recorder.advance(len(rows))
    failures = getattr(classifier, "failures", 0)
    if failures:
        counts["llm_fallbacks"] = failures
    counts["classifier"] = classifier.name
    recorder.set(**counts)
    return counts


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
        near = neighbours.nearest(
            tenant_id=tenant_id, bucket_id=bucket_id, memory_id=memory_id, k=NEAR_DUPLICATE_K, min_similarity=minimum
        )
        counts["candidates"] += _store_candidates(
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
    """The graph app's supersession pass for a bucket, if the graph app provides one."""
    if not getattr(settings, "ENGRAM_GRAPH_ENABLED", True):
        return None
    try:
        from graph.services import supersession_pass
    except ImportError:
        return None
    bucket = Bucket.objects.get(pk=bucket_id, tenant_id=tenant_id)
    report = supersession_pass(bucket=bucket)
    return int(getattr(report, "superseded", 0) or 0)


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
        for kind, n in _link_one(memory, exact=None).items():
            totals[kind] += n
        totals["scanned"] += 1
    return totals
