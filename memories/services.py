"""Writes to the memories table. Every write goes through these functions.

Write path (seed 000): normalise → hash → insert, with ``ON CONFLICT DO NOTHING``
against the partial unique index, so dedup is a database invariant and two
clients writing the same text at once end with one row; texts the bucket already
holds are looked up first and skip the model. Lemmas and token counts
are computed before the insert, in batches; embeddings chunk by chunk, each chunk
while the previous one is inserted. If the embedding model or the lemmatizer is
down the row is stored anyway with the derived column NULL, and
:func:`memories_enrich_pending` fills it in later.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import numpy as np
from django.db import IntegrityError, OperationalError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from engram_site.db import binding_cursor
from engram_site.exceptions import Conflict, NotFound, rolled_back_by_concurrency
from memories import embedding, lemmatizer, signals
from memories.models import PENDING_ENRICHMENT, Memory
from memories.text import embedding_text, hash_key, text_hash
from tenants.models import Bucket

logger = logging.getLogger(__name__)

CONTEXT_PREDECESSORS = 2  # how many preceding memories make a memory's context
# Batches are embedded and inserted in chunks of at most this many rows, the next chunk's
# embeddings computed in a helper thread while this one is inserted (see _EmbeddingAhead).
EMBED_CHUNK_ROWS = 256
# The last chunks halve in size down to this many rows (see _chunks): nothing is left to
# embed while the last chunk is inserted, so the shorter it is, the less the model waits.
SMALLEST_CHUNK_ROWS = 4
_embed_executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="engram-embed")


@dataclass
class MemoryInput:
    content: str
    attributed_to: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    source_actor_id: str | None = None
    hint_root: str | None = None
    hint_tags: list[str] | None = None
    metadata: dict | None = None
    created_at: datetime | None = None


@dataclass(frozen=True)
class IngestResult:
    id: uuid.UUID
    deduplicated: bool


@dataclass
class _Row:
    item: MemoryInput
    id: uuid.UUID
    text_hash: str
    created_at: datetime
    hashed_chars: int = 0  # the length of the text the hash is taken of (the insert order's first key)
    context_text: str | None = None
    text_lemmatized: str | None = None
    context_lemmatized: str | None = None
    token_count: int | None = None
    embedding: np.ndarray | None = None
    context_embedding: np.ndarray | None = None
    sequence_id: uuid.UUID | None = None
    sequence_index: int | None = None
    extra: dict = field(default_factory=dict)


def join_context(context_text: str, content: str) -> str:
    """The text embedded as a memory's context vector: predecessors, then the memory."""
    return f"{context_text}\n{content}"


# --- derived columns ------------------------------------------------------------------


def _lemmatize_rows(rows: list[_Row]) -> None:
    contexts = [r for r in rows if r.context_text]
    try:
        lemmas = lemmatizer.lemmatize_many([r.item.content for r in rows] + [r.context_text for r in contexts])
    except lemmatizer.LemmatizerUnavailable as exc:
        logger.warning("lemmatizer unavailable, storing rows without lemmas: %s", exc)
        return
    for row, lemma in zip(rows, lemmas[: len(rows)], strict=True):
        row.text_lemmatized = document_lemmas(lemma, row.created_at)
    for row, lemma in zip(contexts, lemmas[len(rows) :], strict=True):
        row.context_lemmatized = lemma


def document_lemmas(content_lemmas: str, created_at: datetime | None) -> str:
    """The BM25 document: the content's lemmas plus its date words ("2024 may
    tuesday"), so questions about a month or year can match the memory."""
    return " ".join(filter(None, [content_lemmas, " ".join(lemmatizer.date_terms(created_at))]))


def _embed_rows(rows: list[_Row]) -> None:
    contexts = [r for r in rows if r.context_text]
    try:
        # Memories and their (about three times longer) context texts in separate calls: a
        # model batch mixing both pads the short ones to the long ones' length. Two calls
        # measured faster for any number of rows, one memory and its context included
        # (bench/context_batching.py). Without contexts the second call does nothing.
        vectors = embedding.embed_texts([embedding_text(r.item.content, r.item.attributed_to) for r in rows])
        context_vectors = embedding.embed_texts([join_context(r.context_text, r.item.content) for r in contexts])
    except embedding.EmbeddingUnavailable as exc:
        logger.warning("embedding model unavailable, storing rows without embeddings: %s", exc)
        return
    # A vector the model got wrong (NaN, zeros) is left NULL like a missing one: the row
    # is stored, and the sweep tries again.
    for row, vector in zip(rows, vectors, strict=True):
        row.embedding = vector if embedding.usable(vector) else None
    for row, vector in zip(contexts, context_vectors, strict=True):
        row.context_embedding = vector if embedding.usable(vector) else None
    unusable = sum(r.embedding is None for r in rows) + sum(r.context_embedding is None for r in contexts)
    if unusable:
        logger.warning("embedding model returned %d unusable vector(s); storing those rows without them", unusable)


class _EmbeddingAhead:
    """The embeddings of a batch, chunk by chunk, one chunk ahead of the inserts.

    ``ready(i)`` waits until chunk ``i``'s rows carry their vectors, then starts the
    embedding of chunk ``i + 1`` in a helper thread and returns chunk ``i``: the model
    (which releases the GIL) runs while the database inserts chunk ``i``, one chunk at a
    time (two at once would only split the same cores between them). Embedding failures
    are handled by :func:`_embed_rows` per chunk: such rows are stored without vectors.
    """

    def __init__(self, chunks: list[list[_Row]]):
        self.chunks = chunks
        self._futures: dict[int, Future] = {}

    def start(self, index: int) -> None:
        """Start embedding chunk ``index`` (if it exists and has not been started)."""
        if index < len(self.chunks) and index not in self._futures:
            self._futures[index] = _embed_executor.submit(_embed_rows, self.chunks[index])

    def ready(self, index: int) -> list[_Row]:
        self.start(index)
        self._futures[index].result()
        self.start(index + 1)
        return self.chunks[index]


def _insert_order(row: _Row) -> tuple[int, str]:
    """The order a batch's rows are embedded and inserted in, across chunks too.

    One total order of texts for every writer (shortest first, then by hash; texts with
    the same hash have the same length): two batches sharing texts take the unique index's
    entries in the same order, so one waits for the other instead of both deadlocking. By
    length, so each chunk holds texts of similar lengths and the model pads little: on 1000
    memory texts, chunks in hash order took ~4.5% more model CPU than one call over them all,
    chunks in this order ~2% (bench/README.md).
    """
    return row.hashed_chars, row.text_hash


def _chunks(rows: list[_Row]) -> list[list[_Row]]:
    """``rows`` in order, in chunks of at most EMBED_CHUNK_ROWS whose last ones halve down to
    SMALLEST_CHUNK_ROWS: 10 rows make chunks of 6 and 4; 100 rows 40, 32, 16, 8 and 4; 1000
    rows 250, 249, 249, 128, 64, 32, 16, 8 and 4; 8 rows or fewer one chunk.

    The model embeds a row in about twice the time the database takes to insert it
    (HNSW upkeep included), so while a chunk is inserted, the model embeds the next one, half
    its size, in about as long; and the one insert nothing overlaps, the last chunk's, is
    short. Smaller calls cost the model a little more per text (bench/README.md).
    """
    tail: list[int] = []
    size, left = SMALLEST_CHUNK_ROWS, len(rows)
    while size < EMBED_CHUNK_ROWS and left > 2 * size:
        tail.append(size)
        left -= size
        size *= 2
    count = -(-left // EMBED_CHUNK_ROWS)  # the rest in chunks of even sizes, larger first
    sizes = [left // count + (i < left % count) for i in range(count)] + tail[::-1]
    chunks, start = [], 0
    for length in sizes:
        chunks.append(rows[start : start + length])
        start += length
    return chunks


def _prepare(rows: list[_Row]) -> _EmbeddingAhead:
    """Put ``rows`` in the insert order, give them lemmas and token counts, and embed them
    chunk by chunk; returns once the first chunk is ready (the transaction starts once there
    is something to insert)."""
    rows = sorted(rows, key=_insert_order)
    embedded = _EmbeddingAhead(_chunks(rows))
    if rows:
        # The model (which releases the GIL) embeds the first chunk while this thread
        # lemmatises and counts tokens (embedding needs neither).
        embedded.start(0)
        _lemmatize_rows(rows)
        _count_tokens(rows)
        embedded.ready(0)
    return embedded


def _count_tokens(rows: list[_Row]) -> None:
    for row, count in zip(rows, embedding.count_tokens([r.item.content for r in rows]), strict=True):
        row.token_count = count


# --- sequence context -------------------------------------------------------------------


def _previous_in_run(bucket: Bucket, run_id: str, before: datetime, limit: int) -> tuple[list[str], int]:
    """The contents of the last ``limit`` memories of a run written before ``before``, oldest
    first, and the position the run's next memory takes."""
    previous = list(
        Memory.objects.for_bucket(bucket)
        .filter(run_id=run_id, created_at__lt=before)
        .order_by("-created_at", "-id")
        .values_list("content", "sequence_index")[:limit]
    )
    next_index = max((index for _content, index in previous if index is not None), default=-1) + 1
    return [content for content, _index in previous[::-1]], next_index


def run_sequence_id(bucket: Bucket, run_id: str) -> uuid.UUID:
    """A run's sequence id: the same for every request of the run, so it continues across them."""
    return uuid.uuid5(bucket.pk, f"run:{run_id}")


def _assign_context(bucket: Bucket, rows: list[_Row], *, sequence: bool) -> None:
    """Give each row the text of its one or two predecessors in its sequence.

    A sequence is a run (same ``run_id``, continuing across requests) or, for rows
    without a run, the request's own batch in order. ``sequence=False`` treats the
    rows as unrelated facts.

    Each row also gets its place in the sequence (``sequence_id``, ``sequence_index``): a
    run's id is derived from it and its positions continue across requests; a batch's rows
    without a run share a new id.
    """
    if not sequence:
        return
    history: dict[str | None, list[str]] = {}
    positions: dict[str | None, tuple[uuid.UUID, int]] = {}
    for row in rows:
        key = row.item.run_id
        if key not in history:
            if key is None:
                history[key], positions[key] = [], (uuid.uuid4(), 0)
            else:
                history[key], first = _previous_in_run(bucket, key, row.created_at, CONTEXT_PREDECESSORS)
                positions[key] = (run_sequence_id(bucket, key), first)
        previous = history[key][-CONTEXT_PREDECESSORS:]
        if previous:
            row.context_text = "\n".join(previous)
        history[key].append(row.item.content)
        row.sequence_id, row.sequence_index = positions[key]
        positions[key] = (row.sequence_id, row.sequence_index + 1)


# --- ingest -------------------------------------------------------------------------------

_INSERT_COLUMNS = [
    "id", "tenant_id", "bucket_id", "content", "embedding", "metadata", "token_count", "hint_root", "hint_tags",
    "created_at", "text_lemmatized", "text_hash", "attributed_to", "agent_id", "run_id", "source_actor_id",
    "context_text", "context_lemmatized", "context_embedding", "sequence_id", "sequence_index",
]  # fmt: skip
# Every placeholder is cast: the parameters are bound on the server (binding_cursor), where a
# column of a multi-row VALUES list that is NULL in every row would otherwise be typed text.
_PLACEHOLDERS = (
    "(%s::uuid, %s::uuid, %s::uuid, %s::text, %s::vector, %s::jsonb, %s::integer, %s::text, %s::text[], "
    "%s::timestamptz, %s::text, %s::text, %s::text, %s::text, %s::text, %s::text, %s::text, %s::text, %s::vector, "
    "%s::uuid, %s::integer)"
)


def _insert(bucket: Bucket, rows: list[_Row]) -> dict[str, uuid.UUID]:
    """Insert rows, skipping those whose hash already exists. Returns hash → id of inserted rows."""
    from psycopg.types.json import Jsonb

    params: list = []
    for r in rows:
        params += [
            r.id, bucket.tenant_id, bucket.pk, r.item.content, r.embedding, Jsonb(r.item.metadata or {}),
            r.token_count, r.item.hint_root, r.item.hint_tags, r.created_at, r.text_lemmatized, r.text_hash,
            r.item.attributed_to, r.item.agent_id, r.item.run_id, r.item.source_actor_id,
            r.context_text, r.context_lemmatized, r.context_embedding, r.sequence_id, r.sequence_index,
        ]  # fmt: skip
    sql = (
        f"INSERT INTO memories ({', '.join(_INSERT_COLUMNS)}) VALUES "
        + ", ".join([_PLACEHOLDERS] * len(rows))
        # The dedup invariant: the partial unique index idx_memories_hash_unique.
        + " ON CONFLICT (tenant_id, bucket_id, text_hash) WHERE text_hash IS NOT NULL DO NOTHING"
        + " RETURNING id, text_hash"
    )
    # Vectors go as binary parameters, not as decimals spelled into megabytes of SQL.
    with binding_cursor(connection) as cur:
        cur.execute(sql, params)
        return {h: i for i, h in cur.fetchall()}


def _existing_ids(bucket: Bucket, hashes: Iterable[str]) -> dict[str, uuid.UUID]:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT text_hash, id FROM memories WHERE tenant_id = %s AND bucket_id = %s AND text_hash = ANY(%s)",
            [bucket.tenant_id, bucket.pk, list(hashes)],
        )
        return dict(cur.fetchall())


def hold_bucket(bucket: Bucket) -> None:
    """Take the bucket's FOR KEY SHARE lock (the one the foreign key check takes) before
    the insert touches the unique index, not after it.

    A bucket merge locks both buckets FOR UPDATE and then moves rows into the target.
    Were the lock taken by the foreign key check at the end of the INSERT, a write
    into the target would already hold an index entry that the merge's move waits
    for while it waits for the merge's bucket lock: a deadlock, and one of the two
    fails. Taken first, a write waits for the merge (or the merge for the write) and
    both succeed. A bucket deleted (or merged away) meanwhile is "not found".
    """
    with connection.cursor() as cur:
        cur.execute(f"SELECT 1 FROM {Bucket._meta.db_table} WHERE id = %s FOR KEY SHARE", [bucket.pk])
        if cur.fetchone() is None:
            raise NotFound("Bucket not found.")


# Declared by migration memories 0001 (ON DELETE CASCADE).
_BUCKET_FOREIGN_KEYS = {"memories_bucket_id_fk", "memories_tenant_id_fk"}


class _RowVanished(Exception):
    def __init__(self, hashes: set[str]):
        super().__init__(f"{len(hashes)} row(s) deleted during the write")
        self.hashes = hashes


def constraint_name(exc: IntegrityError) -> str | None:
    diag = getattr(exc.__cause__, "diag", None)
    return getattr(diag, "constraint_name", None)


def memories_ingest(
    *, bucket: Bucket, items: list[MemoryInput], sequence: bool = True, now: datetime | None = None
) -> list[IngestResult]:
    """Store ``items`` in ``bucket`` (in order) and return one result per item.

    An item whose normalised text already exists in the bucket — or earlier in the
    same batch — returns the existing row's id with ``deduplicated=True``. Nothing
    is written if the transaction fails. Enrichment beyond the synchronous columns
    (classification, graph extraction, links) is queued after commit.
    """
    if not items:
        return []
    base = now or timezone.now()
    rows = []
    for index, item in enumerate(items):
        hashed_chars, digest = hash_key(item.content)
        rows.append(
            _Row(
                item=item,
                id=uuid.uuid4(),
                text_hash=digest,
                hashed_chars=hashed_chars,
                # Items of one batch without explicit times keep their order by a microsecond apart.
                created_at=item.created_at or base + timedelta(microseconds=index),
            )
        )
    _assign_context(bucket, rows, sequence=sequence)
    # Compute only for the first occurrence of each hash in the batch.
    first_rows: dict[str, _Row] = {}
    for row in rows:
        first_rows.setdefault(row.text_hash, row)
    # Texts the bucket already holds are neither embedded nor inserted: a writer sending
    # again what it wrote before pays one indexed lookup, not the model. Texts that arrive
    # from another writer meanwhile are left to the insert's ON CONFLICT.
    stored = set(_existing_ids(bucket, first_rows))
    embedded = _prepare([row for digest, row in first_rows.items() if digest not in stored])

    outermost = not connection.in_atomic_block
    for attempt in range(3):
        try:
            with transaction.atomic():
                hold_bucket(bucket)
                inserted = {}
                for index in range(len(embedded.chunks)):
                    inserted.update(_insert(bucket, embedded.ready(index)))
                missing = [h for h in first_rows if h not in inserted]
                existing = _existing_ids(bucket, missing) if missing else {}
                if len(existing) < len(missing):
                    raise _RowVanished({h for h in missing if h not in existing})
            break
        except _RowVanished as exc:
            # A row this batch did not insert because the bucket held it (at its insert, or
            # when the batch looked before) was deleted before the lookup that was to return
            # it. This attempt is rolled back; the next one inserts the row. One the batch did
            # not prepare (found at the first look) is prepared now, with the rest again: a
            # rare path, kept simple.
            unprepared = [first_rows[h] for h in exc.hashes if h in stored]
            if unprepared:
                stored -= exc.hashes
                embedded = _prepare([row for chunk in embedded.chunks for row in chunk] + unprepared)
        except OperationalError as exc:
            # A deadlock with another writer (a merge, an edit): PostgreSQL rolled this
            # transaction back; when it is ours alone, run it again.
            if not (outermost and rolled_back_by_concurrency(exc) and attempt < 2):
                raise
            logger.info("ingest into bucket %s retried after %s", bucket.pk, type(exc.__cause__).__name__)
        except IntegrityError as exc:
            # The tenant was deleted after the caller looked the bucket up: the insert's
            # foreign key check waited for that transaction and then failed.
            if constraint_name(exc) in _BUCKET_FOREIGN_KEYS:
                raise NotFound("Bucket not found.") from None
            raise
    else:  # pragma: no cover - needs a delete racing the same text three times
        raise Conflict("The memory changed concurrently; retry the request.", code="retry")

    results: list[IngestResult] = []
    seen: set[str] = set()
    for row in rows:
        if row.text_hash in inserted and row.text_hash not in seen:
            results.append(IngestResult(id=inserted[row.text_hash], deduplicated=False))
        else:
            results.append(IngestResult(id=inserted.get(row.text_hash) or existing[row.text_hash], deduplicated=True))
        seen.add(row.text_hash)
    new_ids = [r.id for r in results if not r.deduplicated]
    if new_ids:
        _note_writes(bucket.pk, len(new_ids))
        from memories import hooks

        transaction.on_commit(lambda: hooks.after_ingest(bucket_id=bucket.pk, memory_ids=new_ids))
        transaction.on_commit(lambda: _send_safely(signals.memories_created, bucket_id=bucket.pk, memory_ids=new_ids))
    return results


# --- edits ----------------------------------------------------------------------------------

EDITABLE_FIELDS = (
    "content", "attributed_to", "agent_id", "run_id", "source_actor_id", "hint_root", "hint_tags", "metadata",
    "created_at", "classified_scope", "classified_topic",
)  # fmt: skip


@transaction.atomic
def memory_update(*, memory: Memory, **changes) -> Memory:
    """Change a memory. New content recomputes its hash, lemmas, token count and
    embeddings; content that collides with another memory of the bucket raises
    Conflict (409). The row is locked for the edit so concurrent edits serialise
    instead of overwriting each other's derived columns."""
    unknown = set(changes) - set(EDITABLE_FIELDS)
    if unknown:
        raise ValueError(f"not editable: {sorted(unknown)}")
    locked = Memory.objects.select_for_update().filter(pk=memory.pk).first()
    if locked is None:  # deleted (or absorbed by a merge) since the caller read it
        raise NotFound("Memory not found.")
    memory = locked
    if "metadata" in changes:
        # Keys Engram maintains (links) survive a client replacing its metadata.
        from memories.links import RESERVED_PREFIX

        reserved = {k: v for k, v in (memory.metadata or {}).items() if k.startswith(RESERVED_PREFIX)}
        changes["metadata"] = {**(changes["metadata"] or {}), **reserved} if reserved else changes["metadata"]
    for name, value in changes.items():
        setattr(memory, name, value)
    update_fields = list(changes)
    if "content" in changes or "created_at" in changes:
        row = _Row(
            item=MemoryInput(content=memory.content, attributed_to=memory.attributed_to),
            id=memory.pk,
            text_hash=text_hash(memory.content),
            created_at=memory.created_at,
            context_text=memory.context_text,
        )
        _lemmatize_rows([row])
        memory.text_lemmatized = row.text_lemmatized
        memory.context_lemmatized = row.context_lemmatized if memory.context_text else None
        update_fields += ["text_lemmatized", "context_lemmatized"]
        if "content" in changes:
            _count_tokens([row])
            _embed_rows([row])
            memory.text_hash = row.text_hash
            memory.token_count = row.token_count
            memory.embedding = row.embedding
            memory.context_embedding = row.context_embedding
            update_fields += ["text_hash", "token_count", "embedding", "context_embedding"]
    try:
        with transaction.atomic():
            memory.save(update_fields=sorted(set(update_fields)))
    except IntegrityError:
        other = (
            Memory.objects.for_tenant(memory.tenant)
            .filter(bucket_id=memory.bucket_id, text_hash=memory.text_hash)
            .exclude(pk=memory.pk)
            .values_list("pk", flat=True)
            .first()
        )
        raise Conflict(
            "Another memory in this bucket already has this content.",
            code="duplicate_content",
            extra={"existing_id": str(other) if other else None},
        ) from None
    memory.refresh_from_db()
    _note_writes(memory.bucket_id, 1)
    if "content" in changes or "created_at" in changes:
        bucket_id, memory_id = memory.bucket_id, memory.pk
        transaction.on_commit(lambda: _send_safely(signals.memory_changed, bucket_id=bucket_id, memory_id=memory_id))
    return memory


@transaction.atomic
def memory_delete(*, memory: Memory) -> None:
    """Delete a memory; what hangs off it in the database (graph edges, mentions)
    goes with it, and the graph reopens any fact it had closed."""
    bucket_id, memory_id = memory.bucket_id, memory.pk
    states = [state for _receiver, state in signals.memory_deleting.send(Memory, bucket_id=bucket_id,
                                                                         memory_id=memory_id)]  # fmt: skip
    Memory.objects.filter(pk=memory_id).delete()
    _note_writes(bucket_id, 1)
    transaction.on_commit(
        lambda: _send_safely(signals.memory_deleted, bucket_id=bucket_id, memory_id=memory_id, states=states)
    )


def _send_safely(signal, **kwargs) -> None:
    """Receivers run after commit; their failure must not turn a committed write into an error."""
    for receiver, result in signal.send_robust(Memory, **kwargs):
        if isinstance(result, Exception):
            logger.error("%s receiver %r failed: %s", signal, receiver, result)


def _note_writes(bucket_id, count: int) -> None:
    from memories.retrieval import bucket_stats

    bucket_stats.note_writes(bucket_id, count)


# --- the enrichment sweep ----------------------------------------------------------------

# What a sweep fills: everything, or only one kind of derived column (a backfill after
# a model change re-embeds without re-lemmatizing, and the other way round). Each
# predicate is ANDed with PENDING_ENRICHMENT so the partial index
# idx_memories_enrich_pending always serves it.
_EMBEDDINGS_MISSING = Q(embedding__isnull=True) | Q(context_text__isnull=False, context_embedding__isnull=True)
_LEMMAS_MISSING = Q(text_lemmatized__isnull=True) | Q(context_text__isnull=False, context_lemmatized__isnull=True)
ENRICHMENT_KINDS = {
    "all": PENDING_ENRICHMENT,
    "embeddings": PENDING_ENRICHMENT & _EMBEDDINGS_MISSING,
    "lemmas": PENDING_ENRICHMENT & _LEMMAS_MISSING,
}


@dataclass
class EnrichmentReport:
    scanned: int = 0
    embedded: int = 0
    lemmatized: int = 0
    context_embedded: int = 0
    context_lemmatized: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    # Rows that got their embedding in this sweep (classification, near-duplicate
    # scans and links need it and can follow).
    embedded_ids: list[uuid.UUID] = field(default_factory=list)

    COUNTERS = ("scanned", "embedded", "lemmatized", "context_embedded", "context_lemmatized", "failed")

    def add(self, other: EnrichmentReport) -> None:
        for name in self.COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.errors += other.errors
        self.embedded_ids += other.embedded_ids

    def counts(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.COUNTERS}


def _pending(*, kind: str, bucket: Bucket | None, memory_ids: Iterable | None):
    if kind not in ENRICHMENT_KINDS:
        raise ValueError(f"unknown enrichment kind {kind!r}; expected one of {sorted(ENRICHMENT_KINDS)}")
    queryset = Memory.objects.filter(ENRICHMENT_KINDS[kind])
    if bucket is not None:
        queryset = queryset.for_bucket(bucket)
    if memory_ids is not None:
        queryset = queryset.filter(pk__in=list(memory_ids))
    return queryset


def pending_enrichment_count(*, bucket: Bucket | None = None, kind: str = "all") -> int:
    return _pending(kind=kind, bucket=bucket, memory_ids=None).count()


def memories_enrich_pending(
    *,
    batch_size: int = 256,
    bucket: Bucket | None = None,
    kind: str = "all",
    memory_ids: Iterable | None = None,
) -> EnrichmentReport:
    """Fill NULL embeddings, lemmas and context vectors for one batch of rows.

    ``kind`` limits the work to ``"embeddings"`` or ``"lemmas"``; ``memory_ids``
    to those rows (rows that need nothing are skipped). Rows are claimed with
    ``FOR UPDATE SKIP LOCKED``, so several sweeps can run at once without doing
    the same work twice; each batch commits on its own, so a sweep that dies
    loses at most its current batch and the next sweep resumes where the NULLs
    are. Call repeatedly until ``scanned`` is 0.
    """
    report = EnrichmentReport()
    want_lemmas = kind in ("all", "lemmas")
    want_vectors = kind in ("all", "embeddings")
    with transaction.atomic():
        queryset = _pending(kind=kind, bucket=bucket, memory_ids=memory_ids)
        memories = list(queryset.order_by("created_at").select_for_update(skip_locked=True, of=("self",))[:batch_size])
        report.scanned = len(memories)
        if not memories:
            return report
        rows = [
            _Row(
                item=MemoryInput(content=m.content, attributed_to=m.attributed_to),
                id=m.pk,
                text_hash=m.text_hash,
                created_at=m.created_at,
                context_text=m.context_text,
            )
            for m in memories
        ]
        if want_lemmas:
            _lemmatize_rows(
                [
                    r
                    for r, m in zip(rows, memories, strict=True)
                    if m.text_lemmatized is None or (m.context_text and m.context_lemmatized is None)
                ]
            )
        if want_vectors:
            _embed_rows(
                [
                    r
                    for r, m in zip(rows, memories, strict=True)
                    if m.embedding is None or (m.context_text and m.context_embedding is None)
                ]
            )
        for row, memory in zip(rows, memories, strict=True):
            fields = []
            if memory.text_lemmatized is None and row.text_lemmatized is not None:
                memory.text_lemmatized = row.text_lemmatized
                fields.append("text_lemmatized")
                report.lemmatized += 1
            if memory.context_text and memory.context_lemmatized is None and row.context_lemmatized is not None:
                memory.context_lemmatized = row.context_lemmatized
                fields.append("context_lemmatized")
                report.context_lemmatized += 1
            if memory.embedding is None and row.embedding is not None:
                memory.embedding = row.embedding
                fields.append("embedding")
                report.embedded += 1
                report.embedded_ids.append(memory.pk)
            if memory.context_text and memory.context_embedding is None and row.context_embedding is not None:
                memory.context_embedding = row.context_embedding
                fields.append("context_embedding")
                report.context_embedded += 1
            if fields:
                memory.save(update_fields=fields)
                _note_writes(memory.bucket_id, 1)
            else:
                report.failed += 1
    if report.failed:
        report.errors.append(f"{report.failed} row(s) could not be enriched (model or lemmatizer unavailable)")
    return report


def memories_enrich_all_pending(
    *,
    batch_size: int = 256,
    bucket: Bucket | None = None,
    kind: str = "all",
    memory_ids: Iterable | None = None,
    on_batch: Callable[[EnrichmentReport], None] | None = None,
) -> EnrichmentReport:
    """Run the sweep until nothing is left or a batch makes no progress.

    ``on_batch`` is called with each committed batch's report (progress bars,
    job heartbeats, follow-up work for the rows just embedded).
    """
    if memory_ids is not None:
        memory_ids = list(memory_ids)
    total = EnrichmentReport()
    while True:
        report = memories_enrich_pending(batch_size=batch_size, bucket=bucket, kind=kind, memory_ids=memory_ids)
        total.add(report)
        if report.scanned and on_batch is not None:
            on_batch(report)
        if report.scanned == 0 or report.failed == report.scanned:
            return total
