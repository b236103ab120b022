"""Key documents (``memory_keys``): built after the write, kept in step with the memory.

A memory's key (memories.keys) needs what the apps above know of it — the graph's entities and
relations, the distiller's statements — so it is built after them, not in the write:

- the bucket's key run (memories.tasks.build_keys_bucket, asked for by every write) builds the
  keys of its memories that are missing, leaving those a source is still waiting on (the graph
  has not extracted them yet);
- the graph, once it has extracted memories, marks their keys stale (:func:`keys_mark_stale`)
  and asks for the key run (or, for an edited memory, queues its build), so a key is made with
  the graph's facts, and made again when they change (an edit, a rebuild);
- the key pass of the every-minute enrichment sweep and ``manage.py build_keys`` (the backfill
  for memories written before keys existed) build every key missing or out of date: no key
  row, marked stale, built by an older recipe (``KEY_VERSION``), of an older text (the
  memory's ``text_hash`` changed) or of another embedding model than the bucket's. The cursor
  is that condition, so a run that stops leaves the rest for the next.

An edit of a memory's content deletes its key in the edit's transaction; deleting, erasing or
merging a memory away deletes its key with the row (ON DELETE CASCADE); a bucket merge moves
them. Searches join a key to its memory on ``text_hash`` besides, so a key is never searched
for a text its memory no longer has.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime

from django.db import connection, transaction

from engram_site.db import binding_cursor
from engram_site.providers import embedding, lemmatizer
from memories import keys
from memories.keys.document import key_document
from memories.models import Memory
from memories.services import backlog
from tenants.models import Bucket

logger = logging.getLogger(__name__)

BATCH = 128


@dataclass
class KeysReport:
    scanned: int = 0
    built: int = 0
    # Left for later: a source (the graph) has not worked on them yet.
    waiting: int = 0
    # Left as they were: the model or the lemmatizer was unavailable.
    failed: int = 0
    errors: list[str] = field(default_factory=list)

    COUNTERS = ("scanned", "built", "waiting", "failed")

    def add(self, other: KeysReport) -> None:
        for name in self.COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.errors += other.errors

    def counts(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.COUNTERS}


# A memory no key of which is searched: none, or one of another text or model (never NULL when a key
# row is there: the key's model and the bucket's are NOT NULL).
_UNSEARCHED = (
    "(k.memory_id IS NULL OR k.text_hash IS DISTINCT FROM m.text_hash OR k.embedding_model <> b.embedding_model)"
)
# A key to be made again: marked stale, or of an older recipe.
_REDO = "(k.stale OR k.version < %s)"
# A memory whose key is missing or out of date (the module's docstring), and, of those, the ones
# whose key is searched but due to be made again.
_OUT_OF_DATE = f"({_UNSEARCHED} OR {_REDO})"
_DUE = f"(NOT {_UNSEARCHED} AND {_REDO})"


def _pending(
    *,
    memory_ids: list | None,
    bucket: Bucket | None,
    after: tuple[datetime, uuid.UUID] | None,
    limit: int | None,
    count: bool = False,
    condition: str = _OUT_OF_DATE,
):
    return backlog.out_of_date(
        joins="LEFT JOIN memory_keys k ON k.memory_id = m.id",
        condition=condition,
        condition_params=[keys.KEY_VERSION] if "%s" in condition else [],
        memory_ids=memory_ids,
        bucket=bucket,
        after=after,
        limit=limit,
        count=count,
    )


def keys_pending_count(*, bucket: Bucket | None = None) -> int:
    """Memories whose key is missing or out of date."""
    return _pending(memory_ids=None, bucket=bucket, after=None, limit=None, count=True)


def _facts(memories: list[Memory]) -> dict[uuid.UUID, list[keys.KeyFacts]]:
    found: dict[uuid.UUID, list[keys.KeyFacts]] = {m.pk: [] for m in memories}
    for source in keys.key_sources():
        try:
            facts = source.facts(memories)
        except Exception:  # one source's failure leaves the others' facts; logged
            logger.exception("the %s key source failed on %d memories", source.name, len(memories))
            continue
        for memory_id, fact in facts.items():
            if memory_id in found:
                found[memory_id].append(fact)
    return found


def _build(memories: list[Memory], report: KeysReport) -> None:
    """Build and store the keys of ``memories`` (every registered source's facts, then lemmas
    and a vector by each bucket's model). The model or the lemmatizer failing leaves them all."""
    facts = _facts(memories)
    texts = [
        key_document(content=m.content, attributed_to=m.attributed_to, created_at=m.created_at, facts=facts[m.pk])
        for m in memories
    ]
    try:
        lemmas = lemmatizer.lemmatize_many(texts)
    except lemmatizer.LemmatizerUnavailable as exc:
        report.failed += len(memories)
        report.errors.append(f"lemmatizer unavailable: {exc}")
        return
    models: dict[uuid.UUID, str] = dict(
        Bucket.objects.filter(pk__in={m.bucket_id for m in memories}).values_list("pk", "embedding_model")
    )
    vectors: dict[uuid.UUID, object] = {}
    for model in set(models.values()):
        group = [(m, t) for m, t in zip(memories, texts, strict=True) if models.get(m.bucket_id) == model]
        try:
            embedded = embedding.embed_texts([t for _m, t in group], model=model)
        except embedding.EmbeddingUnavailable as exc:
            report.failed += len(group)
            report.errors.append(f"embedding model {model} unavailable: {exc}")
            continue
        for (memory, _text), vector in zip(group, embedded, strict=True):
            vectors[memory.pk] = vector if embedding.usable(vector) else None
    rows = [
        (m, text, lemma)
        for m, text, lemma in zip(memories, texts, lemmas, strict=True)
        if m.pk in vectors  # embedded, or given up on by the model for this text alone
    ]
    if rows:
        report.built += _store(rows, vectors, models)


_COLUMNS = ["memory_id", "tenant_id", "bucket_id", "text", "lemmatized", "embedding", "embedding_model", "text_hash",
            "version"]  # fmt: skip
# Every placeholder is cast: a column NULL in every row would otherwise be typed text.
_PLACEHOLDERS = (
    "(%s::uuid, %s::uuid, %s::uuid, %s::text, %s::text, %s::vector, %s::text, %s::text, %s::integer, false, now())"
)


@transaction.atomic
def _store(rows: list, vectors: dict, models: dict) -> int:
    """Upsert the keys whose memory still has the text, the bucket and the bucket's model they
    were made for. The memories are held (FOR SHARE) until the commit: an edit or a bucket
    merge of one of them waits, and then finds its key to delete or move."""
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT m.id, m.text_hash, m.bucket_id, b.embedding_model FROM memories m
            JOIN buckets b ON b.id = m.bucket_id WHERE m.id = ANY(%s::uuid[]) FOR SHARE OF m
            """,
            [[str(m.pk) for m, _t, _l in rows]],
        )
        now = {row[0]: row[1:] for row in cur.fetchall()}
    keep = []
    for memory, text, lemma in rows:
        current = now.get(memory.pk)
        if current != (memory.text_hash, memory.bucket_id, models.get(memory.bucket_id)):
            continue  # edited, moved, switched or deleted meanwhile: the next pass builds it
        keep.append(
            [memory.pk, memory.tenant_id, memory.bucket_id, text, lemma, vectors[memory.pk],
             models[memory.bucket_id], memory.text_hash, keys.KEY_VERSION]
        )  # fmt: skip
    if not keep:
        return 0
    # One statement, the parameters bound apart and the vectors in binary (engram_site.db): the
    # ORM's bulk_create spent 0.3-0.7 ms of CPU per key compiling its rows, this 0.04 ms.
    # built_at is the transaction's time, as the column's default (TransactionNow).
    with binding_cursor(connection) as cur:
        cur.execute(
            f"""
            INSERT INTO memory_keys ({", ".join(_COLUMNS)}, stale, built_at) VALUES
            {", ".join([_PLACEHOLDERS] * len(keep))}
            ON CONFLICT (memory_id) DO UPDATE SET
            {", ".join(f"{c} = EXCLUDED.{c}" for c in _COLUMNS[1:])}, stale = false, built_at = now()
            """,
            [value for row in keep for value in row],
        )
    return len(keep)


def memory_keys_build(
    *,
    memory_ids: Iterable | None = None,
    bucket: Bucket | None = None,
    wait: bool = True,
    batch_size: int = BATCH,
    limit: int | None = None,
    on_batch: Callable[[KeysReport], None] | None = None,
) -> KeysReport:
    """Build the keys that are missing or out of date, of ``memory_ids`` or ``bucket`` (or every
    bucket), a batch at a time (each commits); each memory is visited once per call, and at most
    ``limit`` of them. ``wait``: leave the memories a source has not worked on yet (the graph
    queues their build once it has).

    The memories no key of theirs is searched for come first, oldest first (none yet, or one of
    another text or model); then the keys that are searched but due to be made again (marked
    stale, an older recipe), oldest first. Under a steady ingest the graph marks stale, batch
    after batch, the keys of every memory that names an entity whose descriptions changed: built
    oldest first regardless, those rebuilds went before every new memory's first key, and the
    memories without any key grew with the writes. The first part stops at a batch whose
    memories all wait for a source (the newest, not extracted yet), so a bounded call still
    reaches the stale keys."""
    ids = None if memory_ids is None else list(memory_ids)
    total = KeysReport()
    for condition, stop_when_waiting in ((_UNSEARCHED, wait), (_DUE, False)):

        def pending(after, size, condition=condition):
            return _pending(memory_ids=ids, bucket=bucket, after=after, limit=size, condition=condition)

        for rows in backlog.batches(pending, batch_size=batch_size, limit=limit, scanned=lambda: total.scanned):
            report = KeysReport(scanned=len(rows))
            batch_ids = [row[0] for row in rows]
            waiting = keys.waiting_for(batch_ids) if wait else set()
            report.waiting = len(waiting)
            memories = backlog.memories_of([i for i in batch_ids if i not in waiting])
            if memories:
                _build(memories, report)
            total.add(report)
            if on_batch is not None:
                on_batch(report)
            if report.failed and report.failed == len(memories):
                return total  # the model or the lemmatizer is down: the next pass tries again
            if stop_when_waiting and report.waiting == report.scanned:
                break  # the rest are newer still: waiting too, as a rule (the next call looks again)
    return total


def keys_mark_stale(*, memory_ids: Iterable | None = None, bucket: Bucket | None = None) -> int:
    """Mark the keys of ``memory_ids`` (or of a whole bucket) to be built again: what they were
    made of changed (the graph extracted them again). They are searched until then."""
    with connection.cursor() as cur:
        if bucket is not None:
            cur.execute(
                "UPDATE memory_keys SET stale = true WHERE tenant_id = %s AND bucket_id = %s AND NOT stale",
                [bucket.tenant_id, bucket.pk],
            )
        else:
            cur.execute(
                "UPDATE memory_keys SET stale = true WHERE memory_id = ANY(%s::uuid[]) AND NOT stale",
                [[str(i) for i in memory_ids or []]],
            )
        return cur.rowcount


def keys_forget(*, memory_ids: Iterable) -> int:
    """Delete the keys of ``memory_ids`` (their text changed: the old key must not be found)."""
    with connection.cursor() as cur:
        cur.execute("DELETE FROM memory_keys WHERE memory_id = ANY(%s::uuid[])", [[str(i) for i in memory_ids]])
        return cur.rowcount
