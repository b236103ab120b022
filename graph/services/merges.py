"""Merges: memories absorbed into others, buckets merged (the graph's rows follow)."""

from __future__ import annotations

import uuid

from django.db import connection, transaction

from graph.models import Correction, CorrectionKind, Entity
from graph.services.entities import mention_counts_refresh
from graph.services.locks import bucket_lock
from graph.services.timelines import graph_recompute
from tenants.models import Bucket


def _unnest(pairs: dict) -> list:
    return [list(pairs), list(pairs.values())]


def graph_absorb_memories(*, mapping: dict[uuid.UUID, uuid.UUID]) -> dict:
    """Move the graph rows of absorbed memories onto their survivors (``memories.merge``).

    A mention the survivor already has is dropped; an edge stating a fact the survivor
    already states (same subject, predicate and object) is dropped, the others now come
    from the survivor. Then the timelines those edges are on, and the supersession of
    the memories on them, are recomputed in the survivors' buckets. The operator's corrections
    keyed by an absorbed memory follow it to its survivor (:func:`_corrections_follow`).
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
    corrections = _corrections_follow(mapping, bucket_ids)
    for bucket in Bucket.objects.filter(pk__in=bucket_ids).order_by("pk"):
        graph_recompute(bucket=bucket, memory_ids=survivors)
    return {"mentions": mentions, "edges": edges, "corrections": corrections}


# The corrections that name memories by id: a split's memories, an edge's source memory.
_BY_MEMORY = (CorrectionKind.SPLIT, CorrectionKind.EDGE_DELETE, CorrectionKind.EDGE_FIX)


def _corrections_follow(mapping: dict[uuid.UUID, uuid.UUID], bucket_ids: list) -> int:
    """The operator's corrections keyed by an absorbed memory now name its survivor, as its
    mentions and edges do: the split's moved mentions and the deleted or fixed edges are the
    survivor's from now on (a rebuild, or the survivor read again with new content, follows
    them). The absorbed id stays in the payload (``merged_from``). Returns how many changed."""
    absorbed = {str(k): str(v) for k, v in mapping.items()}
    changed = []
    # graph_corrections_bucket: the buckets' corrections (an operator's few), filtered here.
    for correction in Correction.objects.filter(bucket_id__in=bucket_ids, kind__in=_BY_MEMORY).order_by("id"):
        payload = correction.payload
        if correction.kind == CorrectionKind.SPLIT:
            ids = [str(m) for m in payload.get("memory_ids", [])]
            moved = sorted(m for m in ids if m in absorbed)
            if not moved:
                continue
            payload["memory_ids"] = sorted({absorbed.get(m, m) for m in ids})
            payload["merged_from"] = sorted({*payload.get("merged_from", []), *moved})
        else:
            edge = payload.get("edge", {})
            memory_id = str(edge.get("memory_id"))
            if memory_id not in absorbed:
                continue
            edge["memory_id"] = absorbed[memory_id]
            edge["merged_from"] = sorted({*edge.get("merged_from", []), memory_id})
        changed.append(correction)
    Correction.objects.bulk_update(changed, ["payload"])
    return len(changed)


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
            bucket_lock(bucket)
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
                # entity_merge, set-based: edges and mentions first, then aliases, then the rows.
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
        mention_counts_refresh(bucket=target, entity_ids=[b for _, b in pairs])
    return {"entities_merged": len(pairs), "entities_moved": moved, "mentions": mentions, "edges": edges}
