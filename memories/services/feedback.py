"""Feedback on search results: an agent says a memory it was given was useful or irrelevant for
a query (``search_feedback``). The search reads it back (memories.retrieval.feedback).

A rating is not a change of the memory: its row is left alone (no index entry is rewritten),
and its history records a ``rated`` version in the same transaction, so the memory's history
says who rated it, how and for what query. The query's vector is made here, by the bucket's
model, so the search compares questions without embedding the rated ones again; a model that is
down does not refuse the rating, which is kept without a vector until the ``embed_missing`` job
gives it one (:func:`feedback_vectors_fill`); until then it changes no ranking.
"""

from __future__ import annotations

import logging
import uuid

from django.db import connection, transaction

from audit.services import Actor
from engram_site.providers import embedding
from memories.models import FeedbackSignal, LearnedRanking, Memory, MemoryVersion, SearchFeedback, VersionKind
from memories.services.history import version_record

logger = logging.getLogger(__name__)

MAX_QUERY_CHARS = 4_000  # as a search's query


def _query_vector(query: str, model: str) -> list[float] | None:
    try:
        return embedding.embed_query(query, model=model).tolist()
    except embedding.EmbeddingUnavailable as exc:
        logger.warning("feedback stored without its query's vector: %s", exc)
        return None


@transaction.atomic
def feedback_record(
    *,
    memory: Memory,
    signal: FeedbackSignal | str,
    query: str,
    agent_id: str | None = None,
    run_id: str | None = None,
    actor: Actor | None = None,
) -> SearchFeedback:
    """Store ``memory`` rated ``signal`` for ``query`` (by ``agent_id`` / ``run_id``, checked by
    the caller against the token) and record it in the memory's history."""
    signal = FeedbackSignal(str(signal))
    model = memory.bucket.embedding_model
    vector = _query_vector(query, model)
    feedback = SearchFeedback.objects.create(
        memory_id=memory.pk,
        tenant_id=memory.tenant_id,
        bucket_id=memory.bucket_id,
        signal=signal,
        query=query,
        query_embedding=vector,
        embedding_model=model if vector is not None else None,
        agent_id=agent_id,
        run_id=run_id,
    )
    feedback.refresh_from_db(fields=["created_at"])
    version_record(
        memory=memory,
        kind=VersionKind.RATED,
        previous={},
        details={
            "feedback_id": feedback.pk,
            "signal": str(signal),
            "query": query,
            "agent_id": agent_id,
            "run_id": run_id,
        },
        actor=actor,
    )
    return feedback


def feedback_import(
    *,
    memory: Memory,
    signal: FeedbackSignal | str,
    query: str,
    agent_id: str | None = None,
    run_id: str | None = None,
    created_at=None,
    source_id: int | None = None,
    vectors: dict | None = None,
    actor: Actor | None = None,
) -> bool:
    """An import's rating (memories.services.transfer): stored as :func:`feedback_record` stores
    one, at ``created_at`` (when it was given, so that it fades as it did there; now if not said),
    unless the memory already has the same rating (signal, query, agent, run, and time when
    given): then nothing is written and False is returned, so an import sent twice does not count
    a rating twice. The memory's history gets its ``rated`` version; when the history was
    imported with the memory, the version it already holds of this rating (``source_id``: the
    rating's id where it was exported) is pointed at the new rating instead, so an erasure of
    the rater finds it. ``vectors``: query -> vector, kept across an import's ratings."""
    signal = FeedbackSignal(str(signal))
    same = SearchFeedback.objects.filter(
        tenant_id=memory.tenant_id, bucket_id=memory.bucket_id, memory_id=memory.pk, signal=signal, query=query,
        agent_id=agent_id, run_id=run_id, **({"created_at": created_at} if created_at is not None else {}),
    )  # fmt: skip
    # idx_search_feedback_memory finds the memory's ratings.
    if same.exists():
        return False
    model = memory.bucket.embedding_model
    vectors = {} if vectors is None else vectors
    if query not in vectors:
        vectors[query] = _query_vector(query, model)
    vector = vectors[query]
    with transaction.atomic():
        feedback = SearchFeedback.objects.create(
            memory_id=memory.pk, tenant_id=memory.tenant_id, bucket_id=memory.bucket_id, signal=signal, query=query,
            query_embedding=vector, embedding_model=model if vector is not None else None, agent_id=agent_id,
            run_id=run_id, **({"created_at": created_at} if created_at is not None else {}),
        )  # fmt: skip
        imported = MemoryVersion.objects.none()
        if source_id is not None:
            imported = MemoryVersion.objects.filter(
                tenant_id=memory.tenant_id, memory_id=memory.pk, kind=VersionKind.RATED, details__feedback_id=source_id
            )
        moved = 0
        for version in imported:
            version.details = {**version.details, "feedback_id": feedback.pk}
            version.save(update_fields=["details"])
            moved += 1
        if not moved:
            version_record(
                memory=memory, kind=VersionKind.RATED, previous={},
                details={"feedback_id": feedback.pk, "signal": str(signal), "query": query, "agent_id": agent_id,
                         "run_id": run_id, "imported": True},
                actor=actor,
            )  # fmt: skip
    return True


def feedback_vectors_fill(*, batch_size: int = 200) -> int:
    """Give the ratings stored while the model was down their query's vector, by their bucket's
    model; how many it filled. Batched, one transaction each; resumable (the NULL vector is the
    cursor) and safe beside another run (rows claimed with SKIP LOCKED). Stops, keeping what it
    filled, when the model is still unavailable. Cross-tenant: the caller disables scopes."""
    filled = 0
    while True:
        with transaction.atomic():
            rows = list(
                SearchFeedback.objects.select_for_update(skip_locked=True, of=("self",))
                .filter(query_embedding__isnull=True)
                .order_by("pk")
                .values_list("pk", "query", "bucket__embedding_model")[:batch_size]
            )
            if not rows:
                return filled
            for pk, query, model in rows:
                try:
                    vector = embedding.embed_query(query, model=model).tolist()
                except embedding.EmbeddingUnavailable as exc:
                    logger.warning("ratings left without their query's vector: %s", exc)
                    return filled
                SearchFeedback.objects.filter(pk=pk).update(query_embedding=vector, embedding_model=model)
                filled += 1


def feedback_move(*, mapping: dict[uuid.UUID, uuid.UUID]) -> int:
    """A merge: the ratings of each absorbed memory (``mapping``'s keys) now rate its survivor,
    in the survivor's bucket (idx_search_feedback_memory). Part of merge.memories_absorb."""
    if not mapping:
        return 0
    with connection.cursor() as cur:
        cur.execute(
            """
            UPDATE search_feedback f SET memory_id = s.id, bucket_id = s.bucket_id
            FROM unnest(%s::uuid[], %s::uuid[]) AS pair(absorbed, survivor)
            JOIN memories s ON s.id = pair.survivor
            WHERE f.memory_id = pair.absorbed AND f.tenant_id = s.tenant_id
            """,
            [[str(k) for k in mapping], [str(v) for v in mapping.values()]],
        )
        return cur.rowcount


def feedback_erase(*, tenant_id, bucket_id, memory_ids: list, fields: dict[str, str]) -> tuple[int, int]:
    """An erasure: the ratings of the erased memories, and those given under the erased agent or
    run (when the erasure names only those: its fields are what a rating carries), with the
    ``rated`` versions those left in other memories' histories (they quote the query), and what
    the buckets those ratings were in learned from them (``learned_rankings``). Returns how many
    ratings and how many versions."""
    scope = {"tenant_id": tenant_id, **({"bucket_id": bucket_id} if bucket_id else {})}
    ratings = versions = 0
    # What a bucket learned from these ratings goes with them (ranking_learning): the next
    # learning run learns again from what is left.
    rated_buckets: set = set()
    if memory_ids:
        erased = SearchFeedback.objects.filter(**scope, memory_id__in=memory_ids)
        rated_buckets |= set(erased.values_list("bucket_id", flat=True).distinct())
        ratings += erased.delete()[0]
    if fields and set(fields) <= {"agent_id", "run_id"}:
        given = SearchFeedback.objects.filter(**scope, **fields)
        rated_buckets |= set(given.values_list("bucket_id", flat=True).distinct())
        ids = list(given.values_list("id", flat=True))
        if ids:
            versions = (
                MemoryVersion.objects.filter(tenant_id=tenant_id, kind=VersionKind.RATED)
                .filter(details__feedback_id__in=ids)
                .delete()[0]
            )
            ratings += given.delete()[0]
    LearnedRanking.objects.filter(tenant_id=tenant_id, bucket_id__in=rated_buckets).delete()
    return ratings, versions
