"""Graph-augmented retrieval: entities named in the query, then a BFS over valid edges.

Seeds are the bucket's entities whose names or aliases appear in the query
(spaCy's parse resolves "my sister" to the user's sister when we know her; plain
word n-grams catch names the tagger misses). The BFS walks at most three hops
over edges valid at the query time (or ``as_of``). A memory reached at depth d
scores 1/d: the edge's source memory, or a memory that mentions an entity
reached at that depth. The list joins the hybrid fusion as the ``graph`` signal.
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime

from django.db import connection

from graph import extract as extraction
from graph import nlp
from memories import lemmatizer

MAX_DEPTH = 3
MAX_EDGES_PER_HOP = 2000
_WORD = re.compile(r"[\w'-]+")


def query_entity_keys(query: str) -> list[str]:
    keys: list[str] = []
    try:
        doc = nlp.get_pipeline()(query)
    except nlp.PipelineUnavailable:
        doc = None
    if doc is not None:
        resolver = extraction._Resolver(doc, extraction.speaker_ref("user"), [])
        for token in doc:
            if token.pos_ in {"PROPN", "NOUN"}:
                ref = resolver.ref(token)
                if ref is not None and ref.type != "SPEAKER":
                    keys.append(ref.key)
                    if ref.alias:
                        keys.append(ref.alias)
    words = [w.casefold() for w in _WORD.findall(query)]
    stops = lemmatizer.stop_words()
    for size in (3, 2, 1):
        for start in range(len(words) - size + 1):
            gram = words[start : start + size]
            if size == 1 and (gram[0] in stops or len(gram[0]) < 3):
                continue
            keys.append(extraction.normalize_name(" ".join(gram)))
    return [k for k in dict.fromkeys(keys) if k]


def _seeds(bucket, query: str) -> dict[uuid.UUID, str]:
    keys = query_entity_keys(query)
    if not keys:
        return {}
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT id, name FROM graph_entities
            WHERE tenant_id = %s AND bucket_id = %s AND type <> 'SPEAKER'
              AND (normalized_name = ANY(%s) OR aliases && %s::text[])
            """,
            [bucket.tenant_id, bucket.pk, keys, keys],
        )
        return dict(cur.fetchall())


def _names(ids: set[uuid.UUID]) -> dict[uuid.UUID, str]:
    if not ids:
        return {}
    with connection.cursor() as cur:
        cur.execute("SELECT id, name FROM graph_entities WHERE id = ANY(%s)", [list(ids)])
        return dict(cur.fetchall())


def graph_signal(*, bucket, query: str, filters, config, now: datetime):
    """``([(memory_id, 1/depth), ...] best first, {memory_id: path})`` for the query."""
    moment = filters.as_of or now
    seeds = _seeds(bucket, query)
    if not seeds:
        return [], {}
    paths: dict[uuid.UUID, str] = dict(seeds)  # entity -> how we got there
    frontier = set(seeds)
    visited = set(seeds)
    reached: dict[uuid.UUID, tuple[int, str]] = {}
    with connection.cursor() as cur:
        for depth in range(1, MAX_DEPTH + 1):
            if not frontier:
                break
            cur.execute(
                """
                SELECT memory_id, entity_id FROM graph_mentions
                WHERE tenant_id = %s AND bucket_id = %s AND entity_id = ANY(%s) LIMIT %s
                """,
                [bucket.tenant_id, bucket.pk, list(frontier), MAX_EDGES_PER_HOP],
            )
            for memory_id, entity_id in cur.fetchall():
                reached.setdefault(memory_id, (depth, f"{paths[entity_id]} (mentioned)"))
            cur.execute(
                """
                SELECT subject_id, predicate, object_entity_id, object_literal, source_memory_id
                FROM graph_edges
                WHERE tenant_id = %s AND bucket_id = %s
                  AND (subject_id = ANY(%s) OR object_entity_id = ANY(%s))
                  AND valid_from <= %s AND (valid_to IS NULL OR valid_to > %s)
                ORDER BY confidence DESC, valid_from DESC
                LIMIT %s
                """,
                [bucket.tenant_id, bucket.pk, list(frontier), list(frontier), moment, moment, MAX_EDGES_PER_HOP],
            )
            edges = cur.fetchall()
            next_frontier: set[uuid.UUID] = set()
            names = _names({e[0] for e in edges} | {e[2] for e in edges if e[2]} - set(paths))
            names.update({k: v.split(" —")[-1] for k, v in paths.items()})
            for subject_id, predicate, object_id, literal, memory_id in edges:
                forward = subject_id in frontier
                near, far = (subject_id, object_id) if forward else (object_id, subject_id)
                far_name = names.get(far, literal or "?") if far else literal
                step = f" —{predicate}→ {far_name}" if forward else f" ←{predicate}— {far_name}"
                reached.setdefault(memory_id, (depth, paths[near] + step))
                if far is not None and far not in visited:
                    visited.add(far)
                    next_frontier.add(far)
                    paths[far] = paths[near] + step
            frontier = next_frontier
    if not reached:
        return [], {}
    where, params = filters.sql(bucket)
    with connection.cursor() as cur:
        cur.execute(f"SELECT m.id FROM memories m WHERE {where} AND m.id = ANY(%s)", [*params, list(reached)])
        allowed = {row[0] for row in cur.fetchall()}
    ranked = sorted(
        ((memory_id, 1.0 / depth) for memory_id, (depth, _path) in reached.items() if memory_id in allowed),
        key=lambda item: (-item[1], str(item[0])),
    )[: config.candidates]
    return ranked, {memory_id: reached[memory_id][1] for memory_id, _score in ranked}
