"""Passages of long memories (``memory_passages``): built after the write, kept in step with it.

A memory whose ``token_count`` exceeds the model's window (memories.passages) is cut into
passages, each embedded by the bucket's model, so the ``vector`` signal sees all of it, not its
first ~1,000 characters:

- the bucket's enrichment run builds the passages of new memories right after their columns are
  filled (memories.tasks.enrich_bucket): the write itself never waits for them, nor fails when
  the model does;
- the passage pass of the every-minute enrichment sweep and ``manage.py build_passages`` (the
  backfill for memories written before passages existed, or after the splitter changed) build
  the passages of every long memory whose passages are missing or out of date: none, of an older
  text (the memory's ``text_hash`` changed), of an older splitter (``PASSAGE_VERSION``) or of
  another embedding model than the bucket's. That condition is the cursor (through
  ``idx_memories_long``), so a run that stops leaves the rest for the next, and a model that is
  down leaves them all for the next (a write loses nothing).

An edit of the content deletes the memory's passages in the edit's transaction; a delete (to the
trash), a purge or an erasure takes them with the row (ON DELETE CASCADE); a restored memory has
none, so the next pass builds them; a bucket merge moves them. Searches join a passage to its
memory on ``text_hash`` besides, so a passage is never searched for a text its memory no longer
has.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime

from django.db import connection, transaction

from engram_site.providers import embedding
from memories import passages
from memories.models import LONG_MEMORY_TOKENS, Memory, MemoryPassage
from memories.services import backlog
from memories.text import embedding_text
from tenants.models import Bucket

logger = logging.getLogger(__name__)

BATCH = 32  # memories per batch (a long memory is up to ~90 passages)


@dataclass
class PassagesReport:
    scanned: int = 0
    built: int = 0  # memories whose passages were built
    passages: int = 0  # passages stored
    # Left as they were: the model was unavailable.
    failed: int = 0
    errors: list[str] = field(default_factory=list)

    COUNTERS = ("scanned", "built", "passages", "failed")

    def add(self, other: PassagesReport) -> None:
        for name in self.COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.errors += other.errors

    def counts(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.COUNTERS}


# A long memory whose passages are missing or out of date (the module's docstring). Every
# passage of a memory is written in one statement, so ordinal 0 speaks for them all.
_OUT_OF_DATE = f"""
    m.token_count > {LONG_MEMORY_TOKENS} AND NOT EXISTS (
        SELECT 1 FROM memory_passages p
        WHERE p.memory_id = m.id AND p.ordinal = 0 AND p.version >= %s
          AND p.text_hash IS NOT DISTINCT FROM m.text_hash AND p.embedding_model = b.embedding_model
    )
"""


def _pending(
    *,
    memory_ids: list | None,
    bucket: Bucket | None,
    after: tuple[datetime, uuid.UUID] | None,
    limit: int | None,
    count: bool = False,
):
    return backlog.out_of_date(
        joins="",
        condition=_OUT_OF_DATE,
        condition_params=[passages.PASSAGE_VERSION],
        memory_ids=memory_ids,
        bucket=bucket,
        after=after,
        limit=limit,
        count=count,
    )


def passages_pending_count(*, bucket: Bucket | None = None) -> int:
    """Long memories whose passages are missing or out of date."""
    return _pending(memory_ids=None, bucket=bucket, after=None, limit=None, count=True)


def _text_of(memory: Memory, span: passages.Span) -> str:
    """What a passage's vector is computed from: its span, the first without a transcript line's
    leading "Name: " as the memory's own vector (memories.text.embedding_text)."""
    text = memory.content[span.start : span.end]
    return embedding_text(text, memory.attributed_to) if span.start == 0 else text


def _build(memories: list[Memory], report: PassagesReport) -> None:
    """Split and embed ``memories`` by each bucket's model and store their passages. A model
    that fails leaves its memories as they were (``failed``)."""
    spans = {m.pk: passages.split(m.content) for m in memories}
    models: dict[uuid.UUID, str] = dict(
        Bucket.objects.filter(pk__in={m.bucket_id for m in memories}).values_list("pk", "embedding_model")
    )
    vectors: dict[uuid.UUID, list] = {}
    for model in set(models.values()):
        group = [m for m in memories if models.get(m.bucket_id) == model]
        texts = [_text_of(m, span) for m in group for span in spans[m.pk]]
        try:
            embedded = embedding.embed_texts(texts, model=model)
        except embedding.EmbeddingUnavailable as exc:
            report.failed += len(group)
            report.errors.append(f"embedding model {model} unavailable: {exc}")
            continue
        at = 0
        for memory in group:
            count = len(spans[memory.pk])
            vectors[memory.pk] = [v if embedding.usable(v) else None for v in embedded[at : at + count]]
            at += count
    built = [m for m in memories if m.pk in vectors]
    if built:
        report.built, report.passages = _store(built, spans, vectors, models)


@transaction.atomic
def _store(memories: list[Memory], spans: dict, vectors: dict, models: dict) -> tuple[int, int]:
    """Replace the passages of the memories that still have the text, the bucket and the bucket's
    model they were made for. The memories are held (FOR SHARE) until the commit: an edit or a
    bucket merge of one of them waits, and then finds its passages to delete or move."""
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT m.id, m.text_hash, m.bucket_id, b.embedding_model FROM memories m
            JOIN buckets b ON b.id = m.bucket_id WHERE m.id = ANY(%s::uuid[]) FOR SHARE OF m
            """,
            [[str(m.pk) for m in memories]],
        )
        now = {row[0]: row[1:] for row in cur.fetchall()}
        keep = [m for m in memories if now.get(m.pk) == (m.text_hash, m.bucket_id, models.get(m.bucket_id))]
        if not keep:
            return 0, 0  # edited, moved, switched or deleted meanwhile: the next pass builds them
        cur.execute("DELETE FROM memory_passages WHERE memory_id = ANY(%s::uuid[])", [[str(m.pk) for m in keep]])
    rows = [
        MemoryPassage(
            memory_id=m.pk,
            tenant_id=m.tenant_id,
            bucket_id=m.bucket_id,
            ordinal=ordinal,
            char_start=span.start,
            char_end=span.end,
            embedding=vector,
            embedding_model=models[m.bucket_id],
            text_hash=m.text_hash,
            version=passages.PASSAGE_VERSION,
        )
        for m in keep
        for ordinal, (span, vector) in enumerate(zip(spans[m.pk], vectors[m.pk], strict=True))
    ]
    MemoryPassage.objects.bulk_create(rows)
    return len(keep), len(rows)


def memory_passages_build(
    *,
    memory_ids: Iterable | None = None,
    bucket: Bucket | None = None,
    batch_size: int = BATCH,
    limit: int | None = None,
    on_batch: Callable[[PassagesReport], None] | None = None,
) -> PassagesReport:
    """Build the passages that are missing or out of date, of ``memory_ids`` or ``bucket`` (or
    every bucket), oldest memory first, a batch at a time (each commits); each memory is visited
    once per call, and at most ``limit`` of them. Stops at a batch the model failed on entirely
    (the next pass tries again)."""
    ids = None if memory_ids is None else list(memory_ids)
    total = PassagesReport()

    def pending(after, size):
        return _pending(memory_ids=ids, bucket=bucket, after=after, limit=size)

    for rows in backlog.batches(pending, batch_size=batch_size, limit=limit, scanned=lambda: total.scanned):
        report = PassagesReport(scanned=len(rows))
        memories = backlog.memories_of([row[0] for row in rows])
        if memories:
            _build(memories, report)
        total.add(report)
        if on_batch is not None:
            on_batch(report)
        if report.failed and report.failed == len(memories):
            return total
    return total


def passages_forget(*, memory_ids: Iterable) -> int:
    """Delete the passages of ``memory_ids`` (their text changed: the old spans mean nothing)."""
    with connection.cursor() as cur:
        cur.execute("DELETE FROM memory_passages WHERE memory_id = ANY(%s::uuid[])", [[str(i) for i in memory_ids]])
        return cur.rowcount
