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
# Bounds that keep the walk's cost independent of the bucket's size (see _walk).
EDGES_PER_SEED = 100
EDGES_PER_ENTITY = 10
MAX_FRONTIER = 50
# Memories counted per reached entity (a seed, or one reached through edges): an entity
# half the bucket mentions says little, and counting all of it would cost as much.
MENTIONS_PER_SEED = 100
MENTIONS_PER_ENTITY = 10
_WORD = re.compile(r"[\w'’-]+")


# Words whose referent only the parse can resolve ("my sister" is the user's sister, known
# by the alias "user sister"). Without them, names in the query are found by the word
# n-grams alone, and the spaCy parse (a few milliseconds of CPU per query) is skipped.
_NEEDS_PARSE = re.compile(r"\b(i|me|my|mine|we|us|our|ours|you|your|he|him|his|she|her|they|them|their)\b", re.I)


def query_entity_keys(query: str) -> list[str]:
    keys: list[str] = []
    doc = None
    if _NEEDS_PARSE.search(query):
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
    # Possessives name the owner: "Linnea's" is Linnea.
    words = [re.sub(r"['’]s$", "", w.casefold()) for w in _WORD.findall(query)]
    stops = lemmatizer.stop_words()
    for size in (3, 2, 1):
        for start in range(len(words) - size + 1):
            gram = words[start : start + size]
            if size == 1 and (gram[0] in stops or len(gram[0]) < 3):
                continue
            keys.append(extraction.normalize_name(" ".join(gram)))
    return [k for k in dict.fromkeys(keys) if k]


# Ids stay text inside the signal (the walk handles thousands of them: text hashes and
# compares faster than uuid.UUID), and arrays go to PostgreSQL as one literal each
# ("{a,b}"::uuid[]) instead of being adapted element by element.
def _array(values) -> str:
    return "{" + ",".join(map(str, values)) + "}"


def _seeds(bucket, query: str) -> dict[str, str]:
    keys = query_entity_keys(query)
    if not keys:
        return {}
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT id::text, name FROM graph_entities
            WHERE tenant_id = %s AND bucket_id = %s AND type <> 'SPEAKER'
              AND (normalized_name = ANY(%s) OR aliases && %s::text[])
            """,
            [bucket.tenant_id, bucket.pk, keys, keys],
        )
        return dict(cur.fetchall())


def _names(ids: set[str]) -> dict[str, str]:
    if not ids:
        return {}
    with connection.cursor() as cur:
        cur.execute("SELECT id::text, name FROM graph_entities WHERE id = ANY(%s::uuid[])", [_array(ids)])
        return dict(cur.fetchall())


def _walk(bucket, seeds: dict[str, str], moment: datetime):
    """Breadth-first over edges valid at ``moment``, at most :data:`MAX_DEPTH` hops.

    Returns ``(depth, parent, edge_memories)``: each reached entity's depth (seeds: 1) and
    the step that reached it (``(near, predicate, forward)``, None for seeds), and the
    memories behind the edges walked, ``{memory_id: (depth, near, predicate, far, literal,
    forward)}``. Every hop is bounded whatever the bucket's size: each entity contributes
    its newest :data:`EDGES_PER_SEED` (a seed) or :data:`EDGES_PER_ENTITY` edges in each
    direction, and the next frontier keeps the :data:`MAX_FRONTIER` most specific new
    entities (fewest mentions) — a hub such as a city half the bucket mentions is reached,
    but not walked through.
    """
    depth: dict[str, int] = dict.fromkeys(seeds, 1)
    parent: dict[str, tuple | None] = dict.fromkeys(seeds)
    edge_memories: dict[str, tuple] = {}
    frontier = list(seeds)
    with connection.cursor() as cur:
        for level in range(1, MAX_DEPTH + 1):
            if not frontier:
                break
            quota = EDGES_PER_SEED if level == 1 else EDGES_PER_ENTITY
            # One index probe per entity and direction (graph_edges_subject / _object:
            # tenant, bucket, entity, valid_from), newest first.
            cur.execute(
                """
                SELECT e.subject_id::text, e.predicate, e.object_entity_id::text, e.object_literal,
                       e.source_memory_id::text, e.forward, coalesce(g.mention_count, 0)
                FROM unnest(%s::uuid[]) f(id)
                CROSS JOIN LATERAL (
                    (SELECT subject_id, predicate, object_entity_id, object_literal, source_memory_id,
                            true AS forward, object_entity_id AS far
                     FROM graph_edges
                     WHERE tenant_id = %s AND bucket_id = %s AND subject_id = f.id
                       AND valid_from <= %s AND (valid_to IS NULL OR valid_to > %s)
                     ORDER BY valid_from DESC LIMIT %s)
                    UNION ALL
                    (SELECT subject_id, predicate, object_entity_id, object_literal, source_memory_id,
                            false, subject_id
                     FROM graph_edges
                     WHERE tenant_id = %s AND bucket_id = %s AND object_entity_id = f.id
                       AND valid_from <= %s AND (valid_to IS NULL OR valid_to > %s)
                     ORDER BY valid_from DESC LIMIT %s)
                ) e
                LEFT JOIN graph_entities g ON g.id = e.far
                """,
                [
                    _array(frontier),
                    bucket.tenant_id, bucket.pk, moment, moment, quota,
                    bucket.tenant_id, bucket.pk, moment, moment, quota,
                ],
            )  # fmt: skip
            candidates: dict[str, tuple] = {}
            for subject_id, predicate, object_id, literal, memory_id, forward, mentions in cur.fetchall():
                near, far = (subject_id, object_id) if forward else (object_id, subject_id)
                edge_memories.setdefault(memory_id, (level, near, predicate, far, literal, forward))
                if far is not None and far not in depth and far not in candidates:
                    candidates[far] = (mentions, (near, predicate, forward))
            frontier = []
            if level < MAX_DEPTH:
                for far, (_mentions, step) in sorted(candidates.items(), key=lambda c: (c[1][0], c[0]))[:MAX_FRONTIER]:
                    depth[far] = level + 1
                    parent[far] = step
                    frontier.append(far)
    return depth, parent, edge_memories


def _path(entity: str, parent: dict, names: dict) -> str:
    steps = []
    while parent.get(entity) is not None:
        near, predicate, forward = parent[entity]
        far_name = names.get(entity, "?")
        steps.append(f" —{predicate}→ {far_name}" if forward else f" ←{predicate}— {far_name}")
        entity = near
    return names.get(entity, "?") + "".join(reversed(steps))


def graph_signal(*, bucket, query: str, filters, config, now: datetime):
    """``([(memory_id, score), ...] best first, {memory_id: path})`` for the query.

    A memory scores the sum of 1/depth over the reached entities it mentions (at most
    :data:`MENTIONS_PER_SEED` memories of a seed, :data:`MENTIONS_PER_ENTITY` of an entity
    reached through edges) and the walked edges it is the source of — so one naming two
    entities of the question outranks one naming either. Paths are built only for the
    memories returned.
    """
    moment = filters.as_of or now
    seeds = _seeds(bucket, query)
    if not seeds:
        return [], {}
    depth, parent, edge_memories = _walk(bucket, seeds, moment)
    entities = list(depth)
    where, params = filters.sql(bucket)
    # Mentions and edges are of this bucket already: the memories table is only read when
    # filters narrow the bucket.
    narrowed = where != type(filters)().sql(bucket)[0]
    join = f"JOIN memories m ON m.id = s.memory_id WHERE {where}" if narrowed else ""
    edge_ids = list(edge_memories)
    with connection.cursor() as cur:
        cur.execute(
            f"""
            WITH reached(entity_id, weight, quota) AS (SELECT * FROM unnest(%s::uuid[], %s::float8[], %s::int[])),
            via_edges(memory_id, weight) AS (SELECT * FROM unnest(%s::uuid[], %s::float8[])),
            hits AS (
                SELECT mn.memory_id, r.weight, r.entity_id
                FROM reached r
                CROSS JOIN LATERAL (
                    -- The entities are this bucket's (seeds and edges were read with tenant and
                    -- bucket), and so are their mentions: an index-only scan of
                    -- graph_mentions_entity (entity, memory), without the heap.
                    SELECT memory_id FROM graph_mentions
                    WHERE entity_id = r.entity_id
                    ORDER BY memory_id LIMIT r.quota
                ) mn
                UNION ALL
                SELECT memory_id, weight, NULL FROM via_edges
            ),
            scored AS (
                SELECT memory_id, sum(weight) AS score,
                       (array_agg(entity_id ORDER BY weight DESC) FILTER (WHERE entity_id IS NOT NULL))[1] AS best
                FROM hits GROUP BY memory_id
            )
            SELECT s.memory_id::text, s.score, s.best::text FROM scored s {join}
            ORDER BY s.score DESC, s.memory_id
            LIMIT %s
            """,
            [
                _array(entities), _array(1.0 / depth[e] for e in entities),
                _array(MENTIONS_PER_SEED if depth[e] == 1 else MENTIONS_PER_ENTITY for e in entities),
                _array(edge_ids), _array(1.0 / edge_memories[m][0] for m in edge_ids),
                *(params if narrowed else []), config.candidates,
            ],
        )  # fmt: skip
        rows = cur.fetchall()
    if not rows:
        return [], {}
    # Names for the paths of the memories returned only.
    wanted: set[str] = set()
    for memory_id, _score, best in rows:
        node = edge_memories[memory_id][1] if memory_id in edge_memories else best
        hop = edge_memories.get(memory_id)
        if hop is not None and hop[3] is not None:
            wanted.add(hop[3])
        while node is not None:
            wanted.add(node)
            node = parent[node][0] if parent.get(node) else None
    names = _names(wanted)
    names.update({entity: name for entity, name in seeds.items()})
    paths = {}
    for memory_id, _score, best in rows:
        hop = edge_memories.get(memory_id)
        if hop is not None:
            _level, near, predicate, far, literal, forward = hop
            far_name = names.get(far, literal or "?") if far else literal
            step = f" —{predicate}→ {far_name}" if forward else f" ←{predicate}— {far_name}"
            paths[memory_id] = _path(near, parent, names) + step
        else:
            paths[memory_id] = _path(best, parent, names) + " (mentioned)"
    return (
        [(uuid.UUID(memory_id), float(score)) for memory_id, score, _best in rows],
        {uuid.UUID(memory_id): path for memory_id, path in paths.items()},
    )
