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
from dataclasses import dataclass, field
from datetime import datetime

from engram_site.providers import lemmatizer, nlp
from engram_site.replica import read_connection
from graph import extract as extraction
from graph.extract.vocabulary import SYMMETRIC, relation_predicate
from graph.selectors import entities_by_first_name

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
# by the alias "user sister"; "Bob's sister" is whoever Bob's sibling_of edges reach).
# Without them, names in the query are found by the word n-grams alone, and the spaCy parse
# (a few milliseconds of CPU per query) is skipped.
_NEEDS_PARSE = re.compile(
    r"\b(i|me|my|mine|we|us|our|ours|you|your|he|him|his|she|her|they|them|their)\b|\w['’]s\b", re.I
)

# Question words -> the predicates they ask about: "who manages Alice?" is about manager_of
# edges, "where does she live?" about lives_in. Edges of these predicates weigh double.
_ASKS = {
    "manager_of": "manage manages managed managing manager managers boss bosses supervise supervises supervisor "
                  "supervisors report reports reporting",
    "lives_in": "live lives lived living home reside resides moved move",
    "works_at": "work works worked working job employer employed employs company",
    "role": "job role profession occupation",
    "sibling_of": "sister sisters brother brothers sibling siblings",
    "parent_of": "mother mom mum father dad parent parents son sons daughter daughters kid kids child children",
    "grandparent_of": "grandmother grandma grandfather grandpa grandparent grandparents grandson granddaughter "
                      "grandchild grandchildren",
    "spouse_of": "wife husband spouse married",
    "married_to": "wife husband spouse married",
    "partner_of": "partner boyfriend girlfriend fiance fiancee",
    "friend_of": "friend friends",
    "owns_pet": "dog dogs cat cats pet pets puppy kitten parrot rabbit hamster horse",
    "born_in": "born birthplace",
    "studies_at": "study studies studied studying school university college",
    "graduated_from": "graduate graduated school university college",
    "visited": "visit visited trip travel travelled traveled went",
    "owns": "own owns drive drives phone car laptop",
}  # fmt: skip
_PREDICATES_OF_WORD: dict[str, set[str]] = {}
for _predicate, _words in _ASKS.items():
    for _word in _words.split():
        _PREDICATES_OF_WORD.setdefault(_word, set()).add(_predicate)
ASKED_WEIGHT = 2.0
# The owner in "Bob's sister" leads to the answer; the answer is the sister.
OWNER_WEIGHT = 0.5
RELATED_PER_OWNER = 20


@dataclass
class Question:
    """What a query names: entity keys, relations to follow ("Bob's sister": (bob, sibling_of,
    person_first=False)), and the predicates its words ask about."""

    keys: list[str] = field(default_factory=list)
    relations: list[tuple[str, str, bool]] = field(default_factory=list)
    predicates: set[str] = field(default_factory=set)
    # "my mom": (user, mom), for a relative without a name, stored as the owner's attributes.
    described: list[tuple[str, str]] = field(default_factory=list)


def parse_question(query: str) -> Question:
    question = Question()
    keys = question.keys
    doc = None
    if _NEEDS_PARSE.search(query):
        try:
            doc = nlp.get_pipeline()(query)
        except nlp.PipelineUnavailable:
            doc = None
    if doc is not None:
        resolver = extraction.Resolver(doc, extraction.speaker_ref("user"), [])
        for token in doc:
            if token.pos_ in {"PROPN", "NOUN"}:
                relation = resolver.relation(token)
                if relation is not None:
                    owner, phrase, _people = relation
                    predicate, person_first, _functional = relation_predicate(token.lemma_.lower(), phrase)
                    question.relations.append((owner.key, predicate, person_first))
                    question.described.append((owner.key, phrase))
                ref = resolver.ref(token)
                if ref is not None and ref.type != "SPEAKER":
                    keys.append(ref.key)
                    if ref.alias:
                        keys.append(ref.alias)
    # Possessives name the owner: "Linnea's" is Linnea.
    words = [re.sub(r"['’]s$", "", w.casefold()) for w in _WORD.findall(query)]
    for word in words:
        question.predicates |= _PREDICATES_OF_WORD.get(word, set())
    stops = lemmatizer.stop_words()
    for size in (3, 2, 1):
        for start in range(len(words) - size + 1):
            gram = words[start : start + size]
            if size == 1 and (gram[0] in stops or len(gram[0]) < 3):
                continue
            keys.append(extraction.normalize_name(" ".join(gram)))
    # "Bob's sister" is the way to the answer, not what is asked: its predicate is walked, not weighed.
    question.predicates -= {predicate for _owner, predicate, _first in question.relations}
    question.keys = [k for k in dict.fromkeys(keys) if k]
    return question


def query_entity_keys(query: str) -> list[str]:
    return parse_question(query).keys


# Ids stay text inside the signal (the walk handles thousands of them: text hashes and
# compares faster than uuid.UUID), and arrays go to PostgreSQL as one literal each
# ("{a,b}"::uuid[]) instead of being adapted element by element.
def _array(values) -> str:
    return "{" + ",".join(map(str, values)) + "}"


def _entities_named(bucket, keys: list[str], *, speaker: bool = False) -> dict[str, str]:
    """{id: name} of the entities with these names or aliases; a lone first name also finds
    the bucket's one person of that first name ("Alice" -> Alice Chen)."""
    if not keys:
        return {}
    with read_connection().cursor() as cur:
        cur.execute(
            f"""
            SELECT id::text, name FROM graph_entities
            WHERE tenant_id = %s AND bucket_id = %s {"" if speaker else "AND type <> 'SPEAKER'"}
              AND (normalized_name = ANY(%s) OR aliases && %s::text[])
            """,
            [bucket.tenant_id, bucket.pk, keys, keys],
        )
        found = dict(cur.fetchall())
    first_names = entities_by_first_name(bucket=bucket, words=[k for k in keys if " " not in k])
    unique = [ids[0] for ids in first_names.values() if len(ids) == 1]
    return found | _names({str(u) for u in unique} - set(found))


def _visible_edges(agents) -> tuple[str, list]:
    """For a search by a token held to ``agents``: the condition (on ``graph_edges``) that an
    edge came from a memory it may read, so the walk never steps through another agent's facts."""
    if agents is None:
        return "", []
    clause, params = agents.sql("vm.agent_id")
    return (
        f" AND EXISTS (SELECT 1 FROM memories vm WHERE vm.id = graph_edges.source_memory_id AND {clause})",
        params,
    )


def _related(bucket, owners: dict[str, str], predicate: str, person_first: bool, moment, agents=None) -> set[str]:
    """The entities ``owners`` are related to by ``predicate``: "Bob's sister" -> whom Bob's
    sibling_of edges reach; "Alice's manager" -> the subjects of manager_of edges onto Alice."""
    if not owners:
        return set()
    symmetric = predicate in SYMMETRIC
    visible, visible_params = _visible_edges(agents)
    visible = visible.replace("%s", "%(agents)s")
    arms = []
    if person_first or symmetric:  # the related person is the subject, the owner the object
        arms.append("SELECT subject_id FROM graph_edges WHERE tenant_id = %(t)s AND bucket_id = %(b)s"
                    " AND object_entity_id = ANY(%(o)s::uuid[]) AND predicate = %(p)s"
                    " AND valid_from <= %(m)s AND (valid_to IS NULL OR valid_to > %(m)s)" + visible
                    + " LIMIT %(n)s")  # fmt: skip
    if not person_first or symmetric:
        arms.append("SELECT object_entity_id FROM graph_edges WHERE tenant_id = %(t)s AND bucket_id = %(b)s"
                    " AND subject_id = ANY(%(o)s::uuid[]) AND predicate = %(p)s AND object_entity_id IS NOT NULL"
                    " AND valid_from <= %(m)s AND (valid_to IS NULL OR valid_to > %(m)s)" + visible
                    + " LIMIT %(n)s")  # fmt: skip
    # The user reached from "my brother's sister" is not an answer (nor a seed: SPEAKER rows
    # are excluded from seeds everywhere).
    query = (
        "SELECT r.id FROM (" + " UNION ".join(f"({arm})" for arm in arms) + ") r(id)"
        " JOIN graph_entities g ON g.id = r.id WHERE g.type <> 'SPEAKER'"
    )
    with read_connection().cursor() as cur:
        cur.execute(
            query,
            {"t": bucket.tenant_id, "b": bucket.pk, "o": _array(owners), "p": predicate, "m": moment,
             "n": RELATED_PER_OWNER * len(owners), "agents": visible_params[0] if visible_params else None},
        )  # fmt: skip
        return {str(row[0]) for row in cur.fetchall()} - set(owners)


def _seeds(bucket, question: Question, moment, agents=None) -> tuple[dict[str, str], set[str]]:
    """The seeds ({id: name}) and, among them, the owners of the relations the question
    follows ("Bob" of "Bob's sister"), which weigh less than the people they lead to."""
    seeds = _entities_named(bucket, question.keys)
    owners: set[str] = set()
    for owner_key, predicate, person_first in question.relations:
        owner_entities = _entities_named(bucket, [owner_key], speaker=owner_key in {"user", "assistant"})
        related = _related(bucket, owner_entities, predicate, person_first, moment, agents)
        if related:
            owners |= set(owner_entities) - related
            seeds |= _names(related)
    return seeds, owners & set(seeds)


def _described(bucket, question: Question, moment, agents=None) -> tuple[dict[str, tuple], dict[str, str]]:
    """What the bucket says of relatives the question names without a name ("where does my mom
    live?"): the owner's edges that stand for them (``User has mom``, ``User mom_lives_in Ohio``:
    graph/extract/unnamed.py), as walked edges of depth 1 ``{memory_id: (1, owner, predicate,
    object, literal, True)}``, and the owners' names."""
    found: dict[str, tuple] = {}
    owners: dict[str, str] = {}
    visible, visible_params = _visible_edges(agents)
    for owner_key, phrase in question.described:
        owner = _entities_named(bucket, [owner_key], speaker=owner_key in {"user", "assistant"})
        if not owner:
            continue
        owners |= owner
        with read_connection().cursor() as cur:
            # graph_edges_unnamed, then the edges of the same memories (graph_edges_source).
            cur.execute(
                f"""
                SELECT e.subject_id::text, e.predicate, e.object_entity_id::text, e.object_literal,
                       e.source_memory_id::text
                FROM graph_edges h JOIN graph_edges e ON e.source_memory_id = h.source_memory_id
                     AND e.subject_id = h.subject_id
                WHERE h.tenant_id = %s AND h.bucket_id = %s AND h.subject_id = ANY(%s::uuid[]) AND h.predicate = 'has'
                  AND h.object_literal = %s AND h.valid_from <= %s{visible.replace("graph_edges.", "h.")}
                  AND (e.predicate = 'has' OR left(e.predicate, %s) = %s)
                  AND e.valid_from <= %s AND (e.valid_to IS NULL OR e.valid_to > %s)
                ORDER BY h.valid_from DESC, e.predicate = 'has' LIMIT %s
                """,
                [bucket.tenant_id, bucket.pk, _array(owner), phrase, moment, *visible_params,
                 len(phrase) + 1, phrase.replace(" ", "_") + "_", moment, moment, EDGES_PER_SEED],
            )  # fmt: skip
            for subject_id, predicate, object_id, literal, memory_id in cur.fetchall():
                found.setdefault(memory_id, (1, subject_id, predicate, object_id, literal, True))
    return found, owners


def _names(ids: set[str]) -> dict[str, str]:
    if not ids:
        return {}
    with read_connection().cursor() as cur:
        cur.execute("SELECT id::text, name FROM graph_entities WHERE id = ANY(%s::uuid[])", [_array(ids)])
        return dict(cur.fetchall())


def _walk(bucket, seeds: dict[str, str], moment: datetime, agents=None):
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
    visible, visible_params = _visible_edges(agents)
    with read_connection().cursor() as cur:
        for level in range(1, MAX_DEPTH + 1):
            if not frontier:
                break
            quota = EDGES_PER_SEED if level == 1 else EDGES_PER_ENTITY
            # One index probe per entity and direction (graph_edges_subject / _object:
            # tenant, bucket, entity, valid_from), newest first.
            cur.execute(
                f"""
                SELECT e.subject_id::text, e.predicate, e.object_entity_id::text, e.object_literal,
                       e.source_memory_id::text, e.forward, coalesce(g.mention_count, 0)
                FROM unnest(%s::uuid[]) f(id)
                CROSS JOIN LATERAL (
                    (SELECT subject_id, predicate, object_entity_id, object_literal, source_memory_id,
                            true AS forward, object_entity_id AS far
                     FROM graph_edges
                     WHERE tenant_id = %s AND bucket_id = %s AND subject_id = f.id
                       AND valid_from <= %s AND (valid_to IS NULL OR valid_to > %s){visible}
                     ORDER BY valid_from DESC LIMIT %s)
                    UNION ALL
                    (SELECT subject_id, predicate, object_entity_id, object_literal, source_memory_id,
                            false, subject_id
                     FROM graph_edges
                     WHERE tenant_id = %s AND bucket_id = %s AND object_entity_id = f.id
                       AND valid_from <= %s AND (valid_to IS NULL OR valid_to > %s){visible}
                     ORDER BY valid_from DESC LIMIT %s)
                ) e
                LEFT JOIN graph_entities g ON g.id = e.far
                """,
                [
                    _array(frontier),
                    bucket.tenant_id, bucket.pk, moment, moment, *visible_params, quota,
                    bucket.tenant_id, bucket.pk, moment, moment, *visible_params, quota,
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
    """The search's graph signal: :func:`walk_signal`, or :func:`entity_signal` under the
    ranking option ``graph_candidates: "entities"``."""
    if config.graph_candidates == "entities":
        return entity_signal(bucket=bucket, query=query, filters=filters, config=config, now=now)
    return walk_signal(bucket=bucket, query=query, filters=filters, config=config, now=now)


def walk_signal(*, bucket, query: str, filters, config, now: datetime):
    """``([(memory_id, score), ...] best first, {memory_id: path})`` for the query.

    A memory scores the sum of 1/depth over the reached entities it mentions (at most
    :data:`MENTIONS_PER_SEED` memories of a seed, :data:`MENTIONS_PER_ENTITY` of an entity
    reached through edges) and the walked edges it is the source of — so one naming two
    entities of the question outranks one naming either. Paths are built only for the
    memories returned.
    """
    moment = filters.as_of or now
    question = parse_question(query)
    agents = filters.agents  # a token held to agents walks only the edges of memories it may read
    seeds, owners = _seeds(bucket, question, moment, agents)
    described, described_owners = _described(bucket, question, moment, agents)
    if not seeds and not described:
        return [], {}
    depth, parent, edge_memories = _walk(bucket, seeds, moment, agents) if seeds else ({}, {}, {})
    for memory_id, hop in described.items():
        edge_memories.setdefault(memory_id, hop)
    entities = list(depth)

    def entity_weight(entity: str) -> float:
        return OWNER_WEIGHT if entity in owners else 1.0 / depth[entity]

    def edge_weight(memory_id: str) -> float:
        level, near, predicate, _far, _literal, _forward = edge_memories[memory_id]
        weight = OWNER_WEIGHT if level == 1 and near in owners else 1.0 / level
        for _owner, phrase in question.described:  # "mom_lives_in" is asked by "live"
            predicate = predicate.removeprefix(phrase.replace(" ", "_") + "_")
        return weight * (ASKED_WEIGHT if predicate in question.predicates else 1.0)

    where, params = filters.sql(bucket)
    # Mentions and edges are of this bucket already: the memories table is only read when
    # filters narrow the bucket (leaving expired memories out is narrowing it).
    narrowed = where != type(filters)(include_expired=True).sql(bucket)[0]
    join = f"JOIN memories m ON m.id = s.memory_id WHERE {where}" if narrowed else ""
    edge_ids = list(edge_memories)
    with read_connection().cursor() as cur:
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
                _array(entities), _array(entity_weight(e) for e in entities),
                _array(MENTIONS_PER_SEED if depth[e] == 1 else MENTIONS_PER_ENTITY for e in entities),
                _array(edge_ids), _array(edge_weight(m) for m in edge_ids),
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
    names.update({entity: name for entity, name in seeds.items()} | described_owners)
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


# --- the entities named in the question, and their one-hop neighbours ---------------------------

# A seed mentioned by more memories than this is a hub (the main character of a conversation, a
# city half the bucket mentions): that a memory names it says little, so its mentions count only
# with another reached entity in the same memory (read up to HUB_MENTIONS of them), while its
# facts (the memories behind its edges) and its neighbours count as for any seed.
SPECIFIC_MENTIONS = 50
HUB_MENTIONS = 1000
HUB_WEIGHT = 0.5
# The entities one edge away from a seed (newest EDGES_PER_SEED edges each way), the
# MAX_NEIGHBOURS most specific of them, and NEIGHBOUR_MENTIONS memories of each.
NEIGHBOUR_WEIGHT = 0.5
MAX_NEIGHBOURS = 50
NEIGHBOUR_MENTIONS = 10


def entity_signal(*, bucket, query: str, filters, config, now: datetime):
    """``([(memory_id, score), ...] best first, {memory_id: path})``: the graph as a source of
    candidates for hybrid search, in one statement after the seeds are found.

    The entities the question names (:func:`_seeds`: names, aliases, first names, "Bob's
    sister") and those one valid edge away from them reach memories: a memory scores the sum,
    over the reached entities it mentions, of 1 for a seed, :data:`NEIGHBOUR_WEIGHT` for a
    neighbour (:data:`HUB_WEIGHT` for a hub seed, counted only beside another entity), plus, for
    an edge of a seed it is the source of, 1 (:data:`ASKED_WEIGHT` when the question asks about
    its predicate: "where did she move from" and ``lives_in``). A memory naming two of the
    question's entities, or stating a fact about one, outranks one that merely names it.
    """
    moment = filters.as_of or now
    question = parse_question(query)
    agents = filters.agents
    seeds, owners = _seeds(bucket, question, moment, agents)
    if not seeds:
        return [], {}
    visible, visible_params = _visible_edges(agents)
    visible = visible.replace("%s", "%(agents)s")
    where, params = filters.sql(bucket)
    narrowed = where != type(filters)(include_expired=True).sql(bucket)[0]
    join, named = "", {}
    if narrowed:
        pieces = where.split("%s")
        named = {f"f{i}": value for i, value in enumerate(params)}
        where = pieces[0] + "".join(f"%(f{i})s{piece}" for i, piece in enumerate(pieces[1:]))
        join = f"JOIN memories m ON m.id = s.memory_id WHERE {where}"
    edges = """
        SELECT {far} AS far, object_literal, source_memory_id, predicate, {forward} AS forward FROM graph_edges
        WHERE tenant_id = %(t)s AND bucket_id = %(b)s AND {near} = s.entity_id
          AND valid_from <= %(m)s AND (valid_to IS NULL OR valid_to > %(m)s){visible}
        ORDER BY valid_from DESC LIMIT %(edges)s
    """
    forward = edges.format(far="object_entity_id", forward="true", near="subject_id", visible=visible)
    backward = edges.format(far="subject_id", forward="false", near="object_entity_id", visible=visible)
    with read_connection().cursor() as cur:
        cur.execute(
            f"""
            WITH seed(entity_id, weight) AS (SELECT * FROM unnest(%(seeds)s::uuid[], %(weights)s::float8[])),
            hop AS (
                -- graph_edges_subject / _object: (tenant, bucket, entity, valid_from), newest first.
                SELECT s.entity_id AS seed, s.weight, e.far, e.object_literal, e.source_memory_id, e.predicate,
                       e.forward
                FROM seed s CROSS JOIN LATERAL (({forward}) UNION ALL ({backward})) e
            ),
            near AS (
                SELECT h.far AS entity_id, max(h.weight) * %(nw)s AS weight
                FROM hop h JOIN graph_entities g ON g.id = h.far
                WHERE h.far <> ALL(%(seeds)s::uuid[]) AND g.type <> 'SPEAKER'
                GROUP BY h.far, g.mention_count ORDER BY g.mention_count, h.far LIMIT %(max_near)s
            ),
            reached(entity_id, weight, quota, hub) AS (
                SELECT s.entity_id, s.weight * CASE WHEN g.mention_count > %(specific)s THEN %(hw)s ELSE 1 END,
                       CASE WHEN g.mention_count > %(specific)s THEN %(hub_read)s ELSE %(specific)s END,
                       g.mention_count > %(specific)s
                FROM seed s JOIN graph_entities g ON g.id = s.entity_id
                UNION ALL
                SELECT entity_id, weight, %(near_read)s, false FROM near
            ),
            hits(memory_id, entity_id, weight, hub, fact) AS (
                -- graph_mentions_entity (entity, memory): an index-only scan per entity.
                SELECT mn.memory_id, r.entity_id, r.weight, r.hub, NULL::text
                FROM reached r CROSS JOIN LATERAL (
                    SELECT memory_id FROM graph_mentions WHERE entity_id = r.entity_id
                    ORDER BY memory_id LIMIT r.quota
                ) mn
                UNION ALL
                SELECT source_memory_id, seed,
                       weight * CASE WHEN predicate = ANY(%(asked)s::text[]) THEN %(aw)s ELSE 1 END, false,
                       concat_ws(chr(31), seed::text, predicate, coalesce(far::text, ''), coalesce(object_literal, ''),
                                 forward::text)
                FROM hop
            ),
            scored AS (
                SELECT memory_id, sum(weight) AS score,
                       (array_agg(entity_id::text ORDER BY weight DESC, entity_id))[1] AS best,
                       (array_agg(fact ORDER BY weight DESC) FILTER (WHERE fact IS NOT NULL))[1] AS fact
                FROM hits GROUP BY memory_id
                -- A hub's mention alone says nothing: it counts beside another entity, or a fact.
                HAVING bool_or(NOT hub) OR count(DISTINCT entity_id) > 1
            )
            SELECT s.memory_id::text, s.score, s.best, s.fact FROM scored s {join}
            ORDER BY s.score DESC, s.memory_id
            LIMIT %(limit)s
            """,
            {
                "seeds": _array(seeds), "weights": _array(OWNER_WEIGHT if e in owners else 1.0 for e in seeds),
                "t": bucket.tenant_id, "b": bucket.pk, "m": moment, "edges": EDGES_PER_SEED,
                "agents": visible_params[0] if visible_params else None,
                "nw": NEIGHBOUR_WEIGHT, "max_near": MAX_NEIGHBOURS, "near_read": NEIGHBOUR_MENTIONS,
                "specific": SPECIFIC_MENTIONS, "hub_read": HUB_MENTIONS, "hw": HUB_WEIGHT,
                "asked": sorted(question.predicates), "aw": ASKED_WEIGHT, "limit": config.candidates, **named,
            },
        )  # fmt: skip
        rows = cur.fetchall()
    if not rows:
        return [], {}
    facts = {memory_id: fact.split(chr(31)) for memory_id, _s, _b, fact in rows if fact}
    wanted = {best for _m, _s, best, _f in rows} | {fact[2] for fact in facts.values() if fact[2]}
    names = _names(wanted - set(seeds)) | seeds
    paths = {}
    for memory_id, _score, best, _fact in rows:
        if memory_id in facts:
            seed, predicate, far, literal, forward = facts[memory_id]
            far_name = names.get(far, "?") if far else literal
            arrow = f" —{predicate}→ {far_name}" if forward == "true" else f" ←{predicate}— {far_name}"
            paths[uuid.UUID(memory_id)] = names.get(seed, "?") + arrow
        else:
            paths[uuid.UUID(memory_id)] = names.get(best, "?") + " (mentioned)"
    return [(uuid.UUID(memory_id), float(score)) for memory_id, score, _b, _f in rows], paths
