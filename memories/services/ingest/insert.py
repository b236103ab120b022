"""New memories: the insert path of the write gateway.

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

import contextvars
import logging
import uuid
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, OperationalError, connection, transaction
from django.utils import timezone

from audit.services import Actor, audit_record
from engram_site import db_priority, metrics, tracing
from engram_site.db import binding_cursor
from engram_site.exceptions import Conflict, NotFound, rolled_back_by_concurrency
from engram_site.providers import embedding
from memories import quotas as memory_quotas
from memories import signals
from memories.models import EventKind
from memories.services.feed_writer import events_record
from memories.services.ingest.context import assign_context
from memories.services.ingest.derived import count_tokens, embed_rows, lemmatize_rows
from memories.services.ingest.locks import hold_bucket
from memories.services.ingest.rows import Carried, IngestResult, MemoryInput, Row
from memories.services.signalling import send_safely
from memories.services.stats_cache import note_writes
from memories.text import hash_key
from tenants import usage
from tenants.models import AgentRestriction, Bucket

logger = logging.getLogger(__name__)

# Batches are embedded and inserted in chunks of at most this many rows, the next chunk's
# embeddings computed in a helper thread while this one is inserted (see _EmbeddingAhead).
EMBED_CHUNK_ROWS = 256
# The last chunks halve in size down to this many rows (see _chunks): nothing is left to
# embed while the last chunk is inserted, so the shorter it is, the less the model waits.
SMALLEST_CHUNK_ROWS = 4


def _lower_embedding_thread() -> None:
    # A write's vectors are made below the searches' priority (ENGRAM_WRITE_NICE): on a busy
    # machine a stream of writes takes the cores searches leave (embedding is most of a short
    # write's CPU). Searches embed their question in their own thread, at the process's priority.
    db_priority.lower_this_thread(settings.ENGRAM_WRITE_NICE)


_embed_executor = ThreadPoolExecutor(
    max_workers=2, thread_name_prefix="engram-embed", initializer=_lower_embedding_thread
)


def warm_up_write_embedding() -> None:
    """A process's start-up warm-up (engram_site.warmup): the model's warm-up run once more in one
    of the lowered threads, which makes their own session (embedding.embed_texts), so that the
    first write does not pay for it. Returns at once."""
    if settings.ENGRAM_PRELOAD_MODELS and settings.ENGRAM_EMBEDDINGS_ENABLED and settings.ENGRAM_WRITE_NICE > 0:
        _embed_executor.submit(embedding.warm_up)


class _EmbeddingAhead:
    """The embeddings of a batch, chunk by chunk, one chunk ahead of the inserts.

    ``ready(i)`` waits until chunk ``i``'s rows carry their vectors, then starts the
    embedding of chunk ``i + 1`` in a helper thread and returns chunk ``i``: the model
    (which releases the GIL) runs while the database inserts chunk ``i``, one chunk at a
    time (two at once would only split the same cores between them). Embedding failures
    are handled by :func:`embed_rows` per chunk: such rows are stored without vectors.
    """

    def __init__(self, chunks: list[list[Row]], model: str):
        self.chunks = chunks
        self.model = model
        self._futures: dict[int, Future] = {}

    def start(self, index: int) -> None:
        """Start embedding chunk ``index`` (if it exists and has not been started): its rows
        that need vectors."""
        if index < len(self.chunks) and index not in self._futures:
            rows = [r for r in self.chunks[index] if r.needs_vectors()]
            # In the caller's context, so the embedding's span joins the write's trace.
            self._futures[index] = _embed_executor.submit(
                contextvars.copy_context().run, embed_rows, rows, model=self.model
            )

    def ready(self, index: int) -> list[Row]:
        self.start(index)
        self._futures[index].result()
        self.start(index + 1)
        return self.chunks[index]


def _insert_order(row: Row) -> tuple[int, str]:
    """The order a batch's rows are embedded and inserted in, across chunks too.

    One total order of texts for every writer (shortest first, then by hash; texts with
    the same hash have the same length): two batches sharing texts take the unique index's
    entries in the same order, so one waits for the other instead of both deadlocking. By
    length, so each chunk holds texts of similar lengths and the model pads little: on 1000
    memory texts, chunks in hash order took ~4.5% more model CPU than one call over them all,
    chunks in this order ~2% (bench/README.md).
    """
    return row.hashed_chars, row.text_hash


def _chunks(rows: list[Row]) -> list[list[Row]]:
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


def _prepare(rows: list[Row], model: str) -> _EmbeddingAhead:
    """Put ``rows`` in the insert order, give them lemmas and token counts, and embed them
    by ``model`` chunk by chunk; returns once the first chunk is ready (the transaction
    starts once there is something to insert)."""
    rows = sorted(rows, key=_insert_order)
    embedded = _EmbeddingAhead(_chunks(rows), model)
    if rows:
        # The model (which releases the GIL) embeds the first chunk while this thread
        # lemmatises and counts tokens (embedding needs neither).
        embedded.start(0)
        lemmatize_rows(rows)
        count_tokens(rows)
        embedded.ready(0)
    return embedded


_INSERT_COLUMNS = [
    "id", "tenant_id", "bucket_id", "content", "embedding", "metadata", "token_count", "hint_root", "hint_tags",
    "created_at", "text_lemmatized", "text_hash", "attributed_to", "agent_id", "run_id", "source_actor_id",
    "context_text", "context_lemmatized", "context_embedding", "sequence_id", "sequence_index", "importance",
    "expires_at", "classified_scope", "classified_topic", "embedding_model",
]  # fmt: skip
# Every placeholder is cast: the parameters are bound on the server (binding_cursor), where a
# column of a multi-row VALUES list that is NULL in every row would otherwise be typed text.
_PLACEHOLDERS = (
    "(%s::uuid, %s::uuid, %s::uuid, %s::text, %s::vector, %s::jsonb, %s::integer, %s::text, %s::text[], "
    "%s::timestamptz, %s::text, %s::text, %s::text, %s::text, %s::text, %s::text, %s::text, %s::text, %s::vector, "
    "%s::uuid, %s::integer, %s::double precision, %s::timestamptz, %s::text, %s::text, %s::text)"
)


@tracing.traced("engram.write.insert")
def _insert(bucket: Bucket, rows: list[Row], model: str) -> dict[str, uuid.UUID]:
    """Insert rows (their vectors made by ``model``, the bucket's), skipping those whose hash
    already exists. Returns hash → id of inserted rows."""
    from psycopg.types.json import Jsonb

    params: list = []
    for r in rows:
        params += [
            r.id, bucket.tenant_id, bucket.pk, r.item.content, r.embedding, Jsonb(r.item.metadata or {}),
            r.token_count, r.item.hint_root, r.item.hint_tags, r.created_at, r.text_lemmatized, r.text_hash,
            r.item.attributed_to, r.item.agent_id, r.item.run_id, r.item.source_actor_id,
            r.context_text, r.context_lemmatized, r.context_embedding, r.sequence_id, r.sequence_index,
            r.item.importance, r.item.expires_at, r.classified_scope, r.classified_topic, model,
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


# Declared by migration memories 0001 (ON DELETE CASCADE).
_BUCKET_FOREIGN_KEYS = {"memories_bucket_id_fk", "memories_tenant_id_fk"}


class _RowVanished(Exception):
    def __init__(self, hashes: set[str]):
        super().__init__(f"{len(hashes)} row(s) deleted during the write")
        self.hashes = hashes


def constraint_name(exc: IntegrityError) -> str | None:
    diag = getattr(exc.__cause__, "diag", None)
    return getattr(diag, "constraint_name", None)


def _results(rows: list[Row], inserted: dict[str, uuid.UUID], existing: dict[str, uuid.UUID]) -> list[IngestResult]:
    results: list[IngestResult] = []
    seen: set[str] = set()
    for row in rows:
        if row.text_hash in inserted and row.text_hash not in seen:
            results.append(IngestResult(id=inserted[row.text_hash], deduplicated=False))
        else:
            results.append(IngestResult(id=inserted.get(row.text_hash) or existing[row.text_hash], deduplicated=True))
        seen.add(row.text_hash)
    return results


@tracing.traced("engram.write")
def memories_ingest(
    *,
    bucket: Bucket,
    items: list[MemoryInput],
    sequence: bool = True,
    now: datetime | None = None,
    actor: Actor | None = None,
    carried: list[Carried | None] | None = None,
    embed: bool = True,
    agents: AgentRestriction | None = None,
) -> list[IngestResult]:
    """Store ``items`` in ``bucket`` (in order) and return one result per item.

    An item whose normalised text already exists in the bucket — or earlier in the
    same batch — returns the existing row's id with ``deduplicated=True``. Nothing
    is written if the transaction fails. Enrichment beyond the synchronous columns
    (classification, graph extraction, links) is queued after commit. With an ``actor``
    the write is audited (``memory.create``) in the same transaction.

    ``carried`` (one entry per item, or None) gives an item the derived columns it brings
    along (an import): its context and sequence place replace the ones ``sequence`` would
    assign, its vectors the model's. ``embed=False`` leaves the vectors no item carries to
    the enrichment sweep instead of computing them now. ``agents``: the restriction of the
    writing token (its items' agent ids are checked by the caller); a run's context is then
    drawn from the memories it may read.
    """
    if not items:
        return []
    base = now or timezone.now()
    rows = []
    for index, item in enumerate(items):
        hashed_chars, digest = hash_key(item.content)
        rows.append(
            Row(
                item=item,
                id=uuid.uuid4(),
                text_hash=digest,
                hashed_chars=hashed_chars,
                # Items of one batch without explicit times keep their order by a microsecond apart.
                created_at=item.created_at or base + timedelta(microseconds=index),
                embed=embed,
            )
        )
    if carried is None:
        assign_context(bucket, rows, sequence=sequence, agents=agents)
    else:
        own = [r for r, c in zip(rows, carried, strict=True) if c is None]
        assign_context(bucket, own, sequence=sequence, agents=agents)
        for row, extra in zip(rows, carried, strict=True):
            if extra is not None:
                row.carry(extra)
    # Compute only for the first occurrence of each hash in the batch.
    first_rows: dict[str, Row] = {}
    for row in rows:
        first_rows.setdefault(row.text_hash, row)
    # Texts the bucket already holds are neither embedded nor inserted: a writer sending
    # again what it wrote before pays one indexed lookup, not the model. Texts that arrive
    # from another writer meanwhile are left to the insert's ON CONFLICT.
    stored = set(_existing_ids(bucket, first_rows))
    embedded = _prepare([row for digest, row in first_rows.items() if digest not in stored], bucket.embedding_model)

    outermost = not connection.in_atomic_block
    for attempt in range(3):
        try:
            with transaction.atomic():
                model = hold_bucket(bucket)
                inserted = {}
                for index in range(len(embedded.chunks)):
                    chunk = embedded.ready(index)
                    if model != embedded.model:
                        # The bucket switched models since its row was read: vectors of the
                        # old model must not join the new one's. The sweep embeds these rows.
                        for row in chunk:
                            row.embedding = row.context_embedding = None
                    inserted.update(_insert(bucket, chunk, model))
                missing = [h for h in first_rows if h not in inserted]
                existing = _existing_ids(bucket, missing) if missing else {}
                if len(existing) < len(missing):
                    raise _RowVanished({h for h in missing if h not in existing})
                results = _results(rows, inserted, existing)
                # The change feed's created events, in insert order (ids follow the batch's order).
                events_record(kind=EventKind.CREATED, payloads={r.id: {} for r in results if not r.deduplicated})
                if actor is not None:
                    audit_record(
                        actor=actor, action="memory.create", tenant=bucket.tenant, object_type="memory",
                        object_ids=[r.id for r in results],
                        details={"bucket_id": str(bucket.pk), "deduplicated": sum(r.deduplicated for r in results)},
                    )  # fmt: skip
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
                embedded = _prepare([row for chunk in embedded.chunks for row in chunk] + unprepared, embedded.model)
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

    new_ids = [r.id for r in results if not r.deduplicated]
    transaction.on_commit(lambda: metrics.count_written(len(new_ids), len(results) - len(new_ids)))
    if new_ids:
        note_writes(bucket.pk, len(new_ids))
        tenant_id = bucket.tenant_id
        transaction.on_commit(lambda: usage.record_writes(tenant_id=tenant_id, count=len(new_ids)))
        transaction.on_commit(lambda: memory_quotas.note_written(tenant_id=tenant_id, count=len(new_ids)))
        # Its receivers queue the enrichment (memories/receivers.py) and the graph's extraction.
        transaction.on_commit(lambda: send_safely(signals.memories_created, bucket_id=bucket.pk, memory_ids=new_ids))
    return results
