"""Switching a bucket's embedding model: re-embed in the background, then swap at once.

A bucket's memories hold vectors of one model, its ``embedding_model``, and its searches
embed their questions by that model (:mod:`memories.retrieval.vector`). A switch:

1. :func:`embedding_switch_start` records the target (``buckets.embedding_model_next``).
2. :func:`embedding_switch_run` (the ``switch_embedding_model`` job) embeds every memory of
   the bucket by the target model into ``memory_embeddings_next``, in batches that commit on
   their own, while searches and writes go on with the old model. It is resumable: the
   staged rows are its progress, and a run that stops (killed, redeployed) is followed by one
   that goes on from the highest staged id, then catches up with the rows written or edited
   since (a staged row keeps the hash of the texts it was made from; an edit changes it).
3. The swap, in one transaction holding the bucket FOR UPDATE (which writes, edits and the
   enrichment sweep take FOR KEY SHARE before they embed): the last rows are staged, every
   row takes its staged vectors and the target's name, and so does the bucket. A search's
   statement sees either all before or all after (:data:`memories.retrieval.vector._SAME_MODEL`).

Only models of the vector columns' dimensions (384) can be switched to; a model of other
dimensions is refused (it would need columns and HNSW indexes of its own).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from django.db import connection, transaction

from audit.services import Actor, audit_record
from engram_site.db import binding_cursor
from engram_site.exceptions import DomainError, NotFound
from engram_site.providers import embedding
from memories.models import EMBEDDING_DIMENSIONS, Memory, NextEmbedding
from memories.services.ingest.derived import join_context
from memories.text import embedding_text
from tenants.models import Bucket

logger = logging.getLogger(__name__)

BATCH_SIZE = 64

# The hash of the texts a memory's vectors are made from; the same expression in every
# statement here, so a staged row is fresh exactly when its source_hash equals it.
_SOURCE_HASH = "md5(m.content || chr(31) || coalesce(m.attributed_to, '') || chr(31) || coalesce(m.context_text, ''))"


@dataclass(frozen=True)
class SwitchStatus:
    bucket_id: uuid.UUID
    model: str  # the bucket's model: its vectors and its searches'
    next_model: str  # the model being switched to ("" when no switch is in progress)
    memories: int  # memories in the bucket
    staged: int  # of which have vectors of next_model waiting

    def as_dict(self) -> dict:
        return {
            "bucket_id": str(self.bucket_id),
            "model": self.model,
            "next_model": self.next_model,
            "memories": self.memories,
            "staged": self.staged,
        }


def embedding_switch_status(*, bucket: Bucket) -> SwitchStatus:
    bucket = Bucket.objects.get(pk=bucket.pk)
    staged = (
        NextEmbedding.objects.filter(bucket_id=bucket.pk, model=bucket.embedding_model_next).count()
        if bucket.embedding_model_next
        else 0
    )
    return SwitchStatus(
        bucket_id=bucket.pk,
        model=bucket.embedding_model,
        next_model=bucket.embedding_model_next,
        memories=Memory.objects.for_bucket(bucket).count(),
        staged=staged,
    )


def embedding_switch_start(*, bucket: Bucket, model: str, actor: Actor | None = None) -> SwitchStatus:
    """Start switching ``bucket`` to ``model`` (the job does the work; see the module).

    Starting the switch already in progress changes nothing (its staged vectors are kept);
    another target discards them. Naming the bucket's own model cancels a switch in progress.
    DomainError for an unknown model, one of other dimensions, or the bucket's own model
    with no switch to cancel. Audited as ``bucket.embedding_switch`` with an ``actor``.
    """
    try:
        wanted = embedding.spec(model)
    except embedding.UnknownModel as exc:
        raise DomainError(str(exc), code="unknown_embedding_model") from None
    if wanted.dimensions != EMBEDDING_DIMENSIONS:
        raise DomainError(
            f"{model} makes {wanted.dimensions}-dimensional vectors; a bucket can only switch to a model of "
            f"{EMBEDDING_DIMENSIONS} dimensions (the vector columns' and their indexes').",
            code="embedding_dimensions",
        )
    with transaction.atomic():
        locked = Bucket.objects.select_for_update().filter(pk=bucket.pk).first()
        if locked is None:
            raise NotFound("Bucket not found.")
        if model == locked.embedding_model and not locked.embedding_model_next:
            raise DomainError(f"The bucket already uses {model}.", code="same_embedding_model")
        target = "" if model == locked.embedding_model else model
        if target != locked.embedding_model_next:
            NextEmbedding.objects.filter(bucket_id=locked.pk).delete()
            locked.embedding_model_next = target
            locked.save(update_fields=["embedding_model_next"])
            if actor is not None:
                audit_record(
                    actor=actor, action="bucket.embedding_switch", tenant=locked.tenant, object_type="bucket",
                    object_ids=[locked.pk], details={"from": locked.embedding_model, "to": target or None},
                )  # fmt: skip
    return embedding_switch_status(bucket=locked)


def _unstaged(cur, bucket: Bucket, model: str, *, after: uuid.UUID | None, limit: int) -> list[tuple]:
    """Up to ``limit`` memories of the bucket without fresh staged vectors of ``model``, in id
    order (after ``after``): (id, content, attributed_to, context_text, source hash)."""
    cur.execute(
        f"""
        SELECT m.id, m.content, m.attributed_to, m.context_text, {_SOURCE_HASH}
        FROM memories m LEFT JOIN memory_embeddings_next n ON n.memory_id = m.id AND n.model = %s
        WHERE m.tenant_id = %s AND m.bucket_id = %s AND (%s::uuid IS NULL OR m.id > %s::uuid)
          AND (n.memory_id IS NULL OR n.source_hash <> {_SOURCE_HASH})
        ORDER BY m.id LIMIT %s
        """,
        [model, bucket.tenant_id, bucket.pk, after, after, limit],
    )
    return cur.fetchall()


def _stage(bucket: Bucket, model: str, rows: list[tuple]) -> None:
    """Embed ``rows`` (from :func:`_unstaged`) by ``model`` into memory_embeddings_next.
    EmbeddingUnavailable if the model is: the job fails and the next run goes on."""
    texts = [embedding_text(content, attributed_to) for _, content, attributed_to, _, _ in rows]
    with_context = [i for i, row in enumerate(rows) if row[3]]
    vectors = embedding.embed_texts(texts, model=model)
    context_vectors = embedding.embed_texts([join_context(rows[i][3], rows[i][1]) for i in with_context], model=model)
    contexts = dict(zip(with_context, context_vectors, strict=True))
    params = []
    for i, (memory_id, _, _, _, source_hash) in enumerate(rows):
        vector, context_vector = vectors[i], contexts.get(i)
        # An unusable vector is staged as NULL: after the swap the enrichment sweep tries again.
        params.append(
            (
                memory_id,
                bucket.pk,
                model,
                vector if embedding.usable(vector) else None,
                context_vector if context_vector is not None and embedding.usable(context_vector) else None,
                source_hash,
            )
        )
    with transaction.atomic(), binding_cursor(connection) as cur:
        # Rows deleted since they were read are left out (the foreign key would refuse them).
        cur.execute(
            "SELECT id FROM memories WHERE id = ANY(%s) FOR KEY SHARE", [[memory_id for memory_id, *_ in params]]
        )
        present = {row[0] for row in cur.fetchall()}
        cur.executemany(
            """
            INSERT INTO memory_embeddings_next (memory_id, bucket_id, model, embedding, context_embedding, source_hash)
            VALUES (%s, %s, %s, %s::vector, %s::vector, %s)
            ON CONFLICT (memory_id) DO UPDATE SET bucket_id = EXCLUDED.bucket_id, model = EXCLUDED.model,
                embedding = EXCLUDED.embedding, context_embedding = EXCLUDED.context_embedding,
                source_hash = EXCLUDED.source_hash
            """,
            [p for p in params if p[0] in present],
        )


def _catch_up(bucket: Bucket, model: str, *, batch_size: int, on_batch: Callable[[int], None] | None) -> int:
    """Stage every memory of the bucket that has no fresh staged vectors; how many."""
    done = 0
    while True:
        with connection.cursor() as cur:
            rows = _unstaged(cur, bucket, model, after=None, limit=batch_size)
        if not rows:
            return done
        _stage(bucket, model, rows)
        done += len(rows)
        if on_batch:
            on_batch(len(rows))


def embedding_switch_run(
    *,
    bucket: Bucket,
    batch_size: int = BATCH_SIZE,
    on_batch: Callable[[int], None] | None = None,
    stop_after: int | None = None,
) -> dict:
    """Run the switch of ``bucket`` in progress to its end (see the module); a dict of what
    was done. ``stop_after`` stops after staging that many rows, before the swap (a run
    interrupted on purpose; the next run goes on). Nothing to do without a switch."""
    bucket = Bucket.objects.get(pk=bucket.pk)
    model = bucket.embedding_model_next
    if not model:
        return {"status": "idle", "model": bucket.embedding_model, "staged": 0}
    staged = 0
    # The first pass, in id order from where an earlier run stopped.
    with connection.cursor() as cur:
        cur.execute(
            "SELECT max(memory_id::text)::uuid FROM memory_embeddings_next WHERE bucket_id = %s AND model = %s",
            [bucket.pk, model],
        )
        after = cur.fetchone()[0]
    while stop_after is None or staged < stop_after:
        limit = batch_size if stop_after is None else min(batch_size, stop_after - staged)
        with connection.cursor() as cur:
            rows = _unstaged(cur, bucket, model, after=after, limit=limit)
        if not rows:
            break
        _stage(bucket, model, rows)
        after = rows[-1][0]
        staged += len(rows)
        if on_batch:
            on_batch(len(rows))
    if stop_after is not None and staged >= stop_after:
        return {"status": "stopped", "model": model, "staged": staged}
    # Rows written or edited behind the first pass, outside the swap's lock while there are many.
    staged += _catch_up(bucket, model, batch_size=batch_size, on_batch=on_batch)
    swapped = _swap(bucket, model, batch_size=batch_size)
    if swapped is None:  # cancelled or retargeted meanwhile
        return {"status": "cancelled", "model": model, "staged": staged}
    return {"status": "switched", "model": model, "staged": staged, "swapped": swapped}


def _swap(bucket: Bucket, model: str, *, batch_size: int) -> int | None:
    """Move the staged vectors of ``model`` into the bucket's rows and make it the bucket's
    model, in one transaction; how many rows were updated (None if the switch changed)."""
    with transaction.atomic():
        locked = Bucket.objects.select_for_update().filter(pk=bucket.pk).first()
        if locked is None or locked.embedding_model_next != model:
            return None
        # Writes, edits and the sweep wait for this lock now: what they stored before is staged here.
        _catch_up(locked, model, batch_size=batch_size, on_batch=None)
        with connection.cursor() as cur:
            cur.execute(
                """
                UPDATE memories m SET embedding = n.embedding, context_embedding = n.context_embedding,
                    embedding_model = n.model
                FROM memory_embeddings_next n
                WHERE n.memory_id = m.id AND n.bucket_id = %s AND n.model = %s AND m.tenant_id = %s AND m.bucket_id = %s
                """,
                [locked.pk, model, locked.tenant_id, locked.pk],
            )
            updated = cur.rowcount
            cur.execute("DELETE FROM memory_embeddings_next WHERE bucket_id = %s", [locked.pk])
        locked.embedding_model = model
        locked.embedding_model_next = ""
        locked.save(update_fields=["embedding_model", "embedding_model_next"])
    logger.info("bucket %s switched to embedding model %s (%d rows)", bucket.pk, model, updated)
    return updated
