"""Retrieval ranking: the one documented place for fusion methods, weights and boosts.

A search runs several *signals*, each returning a bounded candidate list:

==================  =====================================================
``vector``          cosine similarity of the memory's embedding (HNSW)
``vector_context``  cosine similarity of the memory+context embedding
``keyword``         BM25 over the lemmatised memory (plus its date words)
``keyword_context`` BM25 over the lemmatised memory + its context
``keyword_key``     BM25 over the memory's key document (memories.keys: its statements,
                    entities, relations, key phrases and resolved dates)
``vector_key``      cosine similarity of the key document's embedding (HNSW)
``graph``           knowledge-graph proximity (1/depth), when the graph app is on
==================  =====================================================

The lists are fused (``score``: min-max normalised score fusion, or ``rrf``:
reciprocal rank fusion), lifted by their sequence neighbours' scores, then
multiplied by boosts: recency (exponential decay with a half-life), scope,
people named in the query and their own transcript lines, time expressions for
"when" questions, the user's own lines for questions in the first person, the newer
hits for questions about what holds now, the hits holding the kind of value a question asks for
("how old…", "how much…"), trusted writers, a demotion for superseded memories, and what agents said
of memories for questions like this one (feedback: a lift for useful, a demotion for irrelevant).

Defaults live in :data:`DEFAULTS`. What a bucket's feedback taught it
(memories.services.ranking_learning) comes next, then a tenant's overrides in
``Tenant.settings["retrieval"]`` and a request's in its ``ranking`` object, which
win over what was learned; all are validated here. docs/RETRIEVAL.md explains each knob and the measurements
behind the defaults (bench/results/).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace

SIGNALS = ("vector", "vector_context", "keyword", "keyword_context", "keyword_key", "vector_key", "graph")
# The signals answered from the query's embedding, and from its lemmas.
VECTOR_SIGNALS = ("vector", "vector_context", "vector_key")
KEYWORD_SIGNALS = ("keyword", "keyword_context", "keyword_key")
FUSION_METHODS = ("rrf", "score")
DIVERSITY_QUESTIONS = ("several", "all")
EXPANSION_QUESTIONS = ("several", "all")
GRAPH_CANDIDATES = ("walk", "entities")
PASSAGE_MODES = ("off", "max")
# Signals under which a memory outside a short list scores 0 (no path in the graph), so the
# list's floor is 0. Not BM25: with 0 as the floor of short keyword lists, weak one-word matches
# kept more of their score and our evaluation set fell from 0.900 to 0.865 (LoCoMo unchanged).
ZERO_FLOOR_SIGNALS = ("graph",)


@dataclass(frozen=True)
class RankingConfig:
    # Chosen on two evaluation sets at once, our conversational set (bench/eval, with
    # distractors) and the public LoCoMo benchmark's development half, by the smallest worst
    # regret (bench/eval_three.py, docs/RETRIEVAL.md): score fusion keeps how far a list's best
    # candidates lead (a rare word shared with one memory); BM25 at the vectors' weight serves
    # questions asked in the words of what was said, the vectors paraphrases.
    fusion: str = "score"
    rrf_k: float = 5.0
    weights: Mapping[str, float] = field(
        default_factory=lambda: {
            "vector": 1.0,
            "vector_context": 0.5,
            "keyword": 1.0,
            "keyword_context": 0.5,
            # Key documents (docs/RETRIEVAL.md, "Keys that carry facts"): both at 0.5 raised hybrid
            # recall@10 on all three sets (ours 0.896 -> 0.901, LoCoMo 0.805 -> 0.808, long 0.838 ->
            # 0.846; the smallest worst regret of the weights tried, with bm25_b 0.3; with bm25_b 0.5
            # too: 0.907, 0.809, 0.851, docs/RETRIEVAL.md "The defaults together"). A bucket without
            # keys runs neither. 1 each since round three (with user_boost, self_boost 1 and
            # rule_boost): the smallest worst regret among the candidates that lost no set against
            # the defaults (ours 0.924, LoCoMo 0.817, long 0.909 against 0.924, 0.815, 0.900 at 0.5),
            # at a cost in MRR on ours (0.711 -> 0.704) and LoCoMo (0.639 -> 0.630).
            "keyword_key": 1.0,
            "vector_key": 1.0,
            # The graph list changed recall@10 by 0.000 on our set and 0.001 on LoCoMo (0.25
            # against 0) while it costs ~8-10 ms of a 100k-bucket search: off by default,
            # weighted in per tenant or request (graph mode runs it alone).
            "graph": 0.0,
        }
    )
    # What the graph signal of a hybrid search reads (graph/retrieval.py): "walk", a three-hop
    # walk from the entities the question names, each memory reached at depth d scoring 1/d; or
    # "entities", the memories that name those entities or state their facts, and those naming
    # their one-hop neighbours. Graph mode always walks.
    graph_candidates: str = "walk"
    # Candidates each signal contributes before fusion (bounded: latency must not grow with the bucket).
    candidates: int = 100
    # Score fusion normalises a list by its own best and worst score (min-max). Over a handful of
    # candidates the worst is no "irrelevant" baseline: two memories that both match one name
    # would score 1 and 0 for a few letters of length. A list shorter than ``short_list``
    # normalises against a floor drawn towards an absolute one (BM25 0, a memory that matches
    # nothing; cosine ``vector_floor``), all the way for one candidate, not at all from
    # ``short_list`` on. 0 turns it off (plain min-max at any length).
    short_list: int = 10
    # The cosine similarity of a question and an unrelated memory under the default model: the
    # median over 300 generated questions x 2,000 memories of the benchmark corpus (0.138; 90th
    # percentile 0.26), all about other people's lives, so unrelated but alike in kind.
    vector_floor: float = 0.14
    # BM25. b 0.5 since 2026-11-28: on the three sets (bench/results/eval-three-2026-11-28-passages.md)
    # 0.3 left the long working sessions 0.014 of recall@10 below the best candidate, 0.5 none of
    # them more than 0.008 (ours -0.005, LoCoMo -0.001, long +0.006 against 0.3); 0.75 cost ours 0.013.
    bm25_k1: float = 0.9
    bm25_b: float = 0.5
    # Length normalisation of documents longer than the bucket's average (b for those shorter):
    # a long assistant reply holds more of a question's words than the short message it answers.
    # None: bm25_b for every length.
    bm25_b_long: float | None = None
    # Query terms also match their other number form where the lemmatizer left a word as it is
    # (proper nouns and unknown words: "Fridays" finds "Friday", "standup" finds "standups"),
    # one term with the lexeme's IDF (retrieval.keyword.plural_variants). Off: on the three sets
    # it changed no recall and cost MRR 0.002 on ours and on the long sessions
    # (bench/results/eval-three-2026-11-28-first-minutes.md).
    keyword_plurals: bool = False
    # A short BM25 list (below short_list) is normalised towards the query's IDF mass as its top,
    # as its floor is drawn towards 0 (short_list_ceiling): a memory matching part of the
    # question counts that part. False: its own best score is its top (counts 1). Off: it cost our
    # set recall@10 0.907 -> 0.898 (LoCoMo and long unchanged; same report).
    keyword_short_ceiling: bool = False
    # Recency: score *= (1 - w) + w * 0.5 ** (age_days / half_life).
    recency_half_life_days: float = 365.0
    recency_weight: float = 0.3
    # Scope-aware weighting (seed 000): specific facts answer "which/what do I have" questions,
    # general ones (preferences, tendencies) answer "do I like" questions.
    scope_match_boost: float = 0.1
    # Memories by or about a person the query names.
    person_boost: float = 0.1
    # Memories whose speaker the query names: a memory written without ``attributed_to`` whose
    # text opens with "Name: " (a transcript line) was said by Name.
    speaker_boost: float = 0.6
    # Questions asking when ("when did…", "what year…", "how long ago…") favour memories that
    # carry a time expression ("yesterday", "last May", "in 2019", "two weeks ago").
    date_cue_boost: float = 0.6
    # The neighbour lift: a memory gains this share of the best fused score among its sequence
    # neighbours (up to neighbour_reach places before or after it in its run or write batch,
    # halved per place beyond the first), and the neighbours of the best candidates join the
    # candidates: an answer often follows its question and shares none of its words.
    neighbour_weight: float = 0.5
    neighbour_reach: int = 2
    # True: the lift is a share of how far the neighbour scores *above* the memory (nothing from a
    # neighbour below it), so it never passes the memory it flows from. Off: measured on the three
    # sets against the share of the neighbour's own score, it cost the long working sessions 0.018
    # of recall@10 and our set 0.024 of MRR (neighbour_turns_only already keeps notes apart).
    neighbour_gap: bool = False
    # The lift flows only between conversation turns: memories said by someone (an
    # ``attributed_to``, or a transcript line's "Name: "). Notes written together in one batch or
    # run ("Maya is allergic to peanuts.", "The standup is at 9:30.") are not an exchange: the one
    # that answers the question says nothing about the next. False: between any neighbours.
    neighbour_turns_only: bool = True
    # Query-adaptive keyword weight: both BM25 signals count ``floor + (1 - floor) x coverage``
    # of their weight, where coverage is the share of the query's IDF mass the best lexical
    # match holds (retrieval.keyword.bm25). 1 keeps the weights fixed.
    keyword_coverage_floor: float = 1.0
    # Session match: a candidate gains this share of the best fused score among the other
    # candidates of its sequence (its run or write batch), whatever their distance.
    session_weight: float = 0.0
    # Session context (memories/retrieval/sessions.py): the memories of the sequences of the
    # session_sources best candidates, found by a signal or not, gain session_context x the
    # source's fused score x their similarity to the question (as a share of the best). 0: off.
    # 0.2 since 2026-11-28 (docs/RETRIEVAL.md, "Questions that need several memories"): with the
    # two cues below, recall@10 rose on all three sets; alone it raised LoCoMo 0.804 -> 0.808 and
    # the long sessions' MRR 0.562 -> 0.587 (0.4 cost our set 0.024).
    session_context: float = 0.2
    session_sources: int = 3
    # Coverage over redundancy (memories/retrieval/diversity.py): the best diversity_pool hits
    # re-ordered so that each is discounted by up to this share for repeating a better one
    # (maximal marginal relevance over the memories' vectors); for the questions that ask for
    # several things ("which…", "how many…", "compare…"), or for all ("all"). 0 turns it off.
    diversity: float = 0.0
    diversity_pool: int = 40
    diversity_questions: str = "several"
    # Sessions over one session (memories/retrieval/diversity.py spread_sessions): for the same
    # questions as diversity, the best diversity_pool hits re-ordered so that a hit of a sequence
    # (a run, a write batch: a conversation's session) already holding better hits keeps
    # 1 - session_spread x min(1, n / 2) of its score, n the better hits of its sequence: the
    # evidence of a question about several sessions is not crowded out by one session's turns.
    # 0: off.
    session_spread: float = 0.0
    # Pseudo-relevance feedback (memories/retrieval/expansion.py): a second vector query, the
    # question's unit vector plus prf_beta x the unit mean of the prf_sources best fused
    # candidates' vectors (Rocchio), walks the memories' vectors again; its list (``vector_prf``
    # in explain) joins the fusion with weight prf. For the questions that ask for several things
    # (as diversity_questions), or for all. 0: off (no second walk).
    prf: float = 0.0
    # The lexical side: the prf_terms words the sources share that the question does not say, a
    # BM25 query of their own (``keyword_prf``) weighted prf_keyword. 0: off.
    prf_keyword: float = 0.0
    prf_terms: int = 8
    prf_sources: int = 3
    prf_beta: float = 0.75
    prf_questions: str = "several"
    # Questions about what holds now ("…now?", "currently", "these days", "still"): each of the
    # current_pool best hits gains up to current_boost by how recent it is among them (linearly
    # in time, the oldest nothing, the newest all of it), so a changed fact's newer statement
    # passes the older one (memories/retrieval/current.py). 0: off.
    # 1 since 2026-11-28: our set's changed facts 0.778 -> 0.833 of recall@10 (MRR 0.334 -> 0.501),
    # the long sessions' updates 0.721 -> 0.767, LoCoMo unchanged (0.5: less, 1.5: the same).
    current_boost: float = 1.0
    current_pool: int = 20
    # Questions that open by asking for a kind of value ("how old…", "how many…", "how much…",
    # "how long…", "how often…", "what time…"): each of the answer_type_pool best hits whose text
    # holds a value of that kind (an age or a count, an amount, a duration, a frequency, a time of
    # day) gains answer_type_boost (memories/retrieval/answers.py). 0: off. 0.3 since 2026-11-28
    # (bench/results/eval-three-2026-11-28-answer-type.md): LoCoMo 0.816 -> 0.820 of recall@10 (MRR
    # 0.630 -> 0.634), the long sessions' MRR 0.690 -> 0.692, ours unchanged (0.924 / 0.706); 0.6
    # the same but for two LoCoMo questions a place lower.
    answer_type_boost: float = 0.3
    answer_type_pool: int = 20
    # Questions in the first person singular ("can I mock the database?", "where do I work now?")
    # favour what the user said: memories attributed to "user", or transcript lines of a speaker
    # named "User" (memories/retrieval/query.py asks_about_self). 0: off.
    # 0.5 since 2026-11-28: our set 0.896 -> 0.912 of recall@10 (MRR 0.598 -> 0.673), the long
    # sessions 0.854 -> 0.871 (MRR 0.562 -> 0.593), LoCoMo (asked in the third person) unchanged.
    # 1 with user_boost and rule_boost (round three, docs/RETRIEVAL.md): see below.
    self_boost: float = 1.0
    # Every other question (not in the first person singular, and not asking what the assistant
    # said: "what did you suggest…") favours what the user said by this share: in a conversation
    # with an assistant the user's own lines state the facts, plans and rules asked about later,
    # the assistant's longer replies share more of a question's words. 0: off. 0.3 since round
    # three (docs/RETRIEVAL.md): with self_boost 1 and rule_boost 1 the long working sessions rose
    # 0.865 -> 0.90 of recall@10 (MRR 0.609 -> 0.69), ours 0.917 -> 0.92, LoCoMo (no "User"
    # speaker) unchanged; 0.5 broke a first-five-minutes case (the customer's own line above the
    # agent's answer to "what was done about the delivery").
    user_boost: float = 0.3
    # A request or a question of what may or should be done ("Can we take the bus up?", "Write a
    # reminder SMS", "Should I apply?") favours the user's lines that lay down a rule or a
    # preference ("never", "always", "don't", "must", "avoid"…): a standing instruction, stated
    # long before, governs the answer. 0: off. 1 since round three: the long sessions'
    # instruction questions 0.638 -> 0.787 of recall@10 (MRR 0.379 -> 0.532); the other two sets
    # hold almost no requests.
    rule_boost: float = 1.0
    # Memories written by trusted source actors (source_actor_id in trusted_actors).
    trust_boost: float = 0.0
    trusted_actors: tuple[str, ...] = ()
    # Importance a client or an operator gave a memory (0 to 1): score *= 1 + importance_boost x
    # importance. A memory without importance is not touched, so rankings of buckets that never
    # set it are exactly what they were (docs/RETRIEVAL.md).
    importance_boost: float = 0.5
    # A memory that is a question (its text ends with "?": "Any concerts coming up?") keeps this
    # share of its score: it shares the words of a question about its answer, the turn after it.
    # 1 (off): at 0.75 LoCoMo gained recall@10 (+0.012) and the long sessions lost it (-0.020),
    # where users' questions are evidence (same report).
    question_weight: float = 1.0
    # Superseded (historical) memories are demoted, not hidden.
    superseded_weight: float = 0.5
    # A question about the present (memories/retrieval/updates.py, ``wanted``: not about an earlier
    # state, not in the past tense) that finds a superseded memory and the memory that superseded
    # it: the successor scores at least what the superseded one would have without its demotion
    # (fusion.successors_take_place). "What phone do I have?" matches "My phone is an iPhone 12."
    # in every word and "I switched to a Pixel 8 last month." in none; once the graph has closed
    # the older fact, the newer one takes its place instead of a third memory ("My phone plan is
    # 20 GB a month."). False: the successor keeps its own score. On since 2026-11-29: the long
    # sessions' recall@10 0.910 -> 0.915 (MRR 0.694 -> 0.696), ours and LoCoMo unchanged
    # (bench/results/eval-three-2026-11-29-first-minutes-enriched.md).
    successor_takes_place: bool = True
    # The vector_key list scores a memory whose own vector is nearer the question than its key's
    # by its key's similarity plus this share of the difference (1: the better of the two; a key
    # is one more way to find a memory, not a second, noisier vote against it): a short memory's
    # key is its text plus a few names and its date, whose vector can sit a little further from
    # the question than the text's and flip a close vector preference in a small bucket ("what
    # computer do I have": the laptop 0.466 against the monitor 0.395 by their own vectors, 0.267
    # against 0.312 by their keys'). 0: the key's similarity alone. An option, 0: 0.5 cost our set
    # recall@10 0.931 -> 0.924, 0.25 0.931 -> 0.927 and the long sessions 0.915 -> 0.913 (same report).
    key_vector_own: float = 0.0
    # Facts that changed (memories/retrieval/updates.py), before enrichment has linked a changed
    # fact to the one it replaced: among the best newer_fact_pool hits, a memory that states a
    # change ("moved", "new", "since"…), written at least newer_fact_days after the pool's memory
    # most like it, with a cosine of at least newer_fact_similarity to it, updates that one. A
    # question about the present puts the newer of the pair just above the older, one about the
    # earlier state ("before", "used to"…) the older above the newer, if the one moved is at
    # least newer_fact_ratio x as near the question (cosine) as the other. Only the order inside
    # the pool changes. newer_fact_ratio 0 turns it off.
    newer_fact_ratio: float = 0.55
    newer_fact_similarity: float = 0.38
    newer_fact_pool: int = 3
    newer_fact_days: float = 1.0
    # Whether conversation turns (an attributed_to, a transcript line's speaker) take part too;
    # False: notes only. On the three evaluation sets, where every memory is a turn, turns
    # taking part left recall unchanged and moved MRR ours +0.004, LoCoMo -0.004, long -0.004.
    newer_fact_turns: bool = False
    # Feedback (memories/retrieval/feedback.py): a rating counts for a query as alike as its own
    # beyond feedback_similarity (cosine of the two questions), by how far beyond, halved every
    # feedback_half_life_days. A memory rated useful gains feedback_weight x that weight x the
    # best fused score (and joins the candidates); one rated irrelevant keeps
    # 1 - feedback_demotion x that weight of its score. Both 0: feedback is not read.
    # feedback_weight 1 rather than 0.5 (bench/results/feedback-eval-2026-11-28-paraphrases.md):
    # the rated half's paraphrases gained recall@10 +0.207 on LoCoMo and +0.054 on ours (0.5:
    # +0.128, +0.037), the untouched half +0.004 and +0.000 (0.5: +0.001, +0.000).
    feedback_weight: float = 1.0
    feedback_demotion: float = 0.8
    feedback_similarity: float = 0.8
    feedback_half_life_days: float = 90.0
    # Long memories (memories/retrieval/passages.py): "max" scores a memory in the vector list by
    # the best of its own vector (its first ~1,000 characters: the model's window) and its
    # passages', and finds it by a passage too; "off", by its own vector alone. passage_second
    # draws the best towards the second best ((1 - w) x best + w x second).
    passages: str = "off"
    passage_second: float = 0.0
    # Taken off a passage's similarity before it competes with the memory's own vector: a long
    # memory has many windows, so more chances to be near any question than a short memory.
    passage_discount: float = 0.0
    # pgvector HNSW search breadth (recall vs. latency; see bench/results/).
    ef_search: int = 100
    # A memory without a context vector (the first of its sequence, or written with
    # "sequence": false) enters the vector_context list with its own vector's similarity:
    # its context is itself. Without this, its successor, whose context holds it, gets a
    # second list to rank in that it does not (docs/RETRIEVAL.md).
    context_stand_in: bool = True
    # The same in the keyword_context list: a memory without context stands in its own text,
    # scored with the context documents' statistics (retrieval.keyword). Without it, the first
    # note of a batch ranks in one BM25 list while the next, whose context holds its words, ranks
    # in two ("where is Ravi from" found "Ravi works at a bank." before "Ravi is my cousin from
    # Toronto.", which opened the batch).
    keyword_context_stand_in: bool = True

    def weight(self, signal: str) -> float:
        return float(self.weights.get(signal, 0.0))


DEFAULTS = RankingConfig()

EF_SEARCH_MAX = 1000  # pgvector's own bound for hnsw.ef_search

_NUMERIC_BOUNDS = {
    "rrf_k": (0.0, 1000.0),
    "candidates": (10, 1000),
    "short_list": (0, 1000),
    "vector_floor": (-1.0, 1.0),
    "bm25_k1": (0.0, 10.0),
    "bm25_b": (0.0, 1.0),
    "bm25_b_long": (0.0, 1.0),
    "recency_half_life_days": (1.0, 36500.0),
    "recency_weight": (0.0, 1.0),
    "scope_match_boost": (0.0, 2.0),
    "person_boost": (0.0, 2.0),
    "speaker_boost": (0.0, 2.0),
    "date_cue_boost": (0.0, 2.0),
    "neighbour_weight": (0.0, 1.0),
    "neighbour_reach": (1, 3),
    "session_weight": (0.0, 1.0),
    "session_context": (0.0, 1.0),
    "session_sources": (1, 20),
    "diversity": (0.0, 1.0),
    "diversity_pool": (10, 100),
    "session_spread": (0.0, 1.0),
    "prf": (0.0, 2.0),
    "prf_keyword": (0.0, 2.0),
    "prf_terms": (1, 30),
    "prf_sources": (1, 10),
    "prf_beta": (0.0, 2.0),
    "current_boost": (0.0, 2.0),
    "self_boost": (0.0, 2.0),
    "user_boost": (0.0, 2.0),
    "rule_boost": (0.0, 2.0),
    "current_pool": (2, 100),
    "answer_type_boost": (0.0, 2.0),
    "answer_type_pool": (2, 100),
    "keyword_coverage_floor": (0.0, 1.0),
    "trust_boost": (0.0, 2.0),
    "importance_boost": (0.0, 2.0),
    "superseded_weight": (0.0, 1.0),
    "question_weight": (0.0, 1.0),
    "newer_fact_ratio": (0.0, 2.0),
    "newer_fact_similarity": (-1.0, 1.0),
    "newer_fact_pool": (1, 20),
    "newer_fact_days": (0.0, 36500.0),
    "feedback_weight": (0.0, 2.0),
    "feedback_demotion": (0.0, 1.0),
    "feedback_similarity": (0.0, 0.99),
    "feedback_half_life_days": (1.0, 36500.0),
    "passage_second": (0.0, 1.0),
    "passage_discount": (0.0, 1.0),
    "key_vector_own": (0.0, 1.0),
    "ef_search": (10, EF_SEARCH_MAX),
}


class RankingConfigError(ValueError):
    pass


def _coerce(name: str, value):
    if name == "fusion":
        if value not in FUSION_METHODS:
            raise RankingConfigError(f"fusion must be one of {list(FUSION_METHODS)}")
        return value
    if name == "weights":
        if not isinstance(value, Mapping):
            raise RankingConfigError("weights must be an object of signal → weight")
        unknown = set(value) - set(SIGNALS)
        if unknown:
            raise RankingConfigError(f"unknown signals in weights: {sorted(unknown)}; known: {list(SIGNALS)}")
        out = {}
        for key, weight in value.items():
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 <= weight <= 100:
                raise RankingConfigError(f"weights.{key} must be a number between 0 and 100")
            out[key] = float(weight)
        return out
    if name == "graph_candidates":
        if value not in GRAPH_CANDIDATES:
            raise RankingConfigError(f"graph_candidates must be one of {list(GRAPH_CANDIDATES)}")
        return value
    if name == "passages":
        if value not in PASSAGE_MODES:
            raise RankingConfigError(f"passages must be one of {list(PASSAGE_MODES)}")
        return value
    if name == "diversity_questions":
        if value not in DIVERSITY_QUESTIONS:
            raise RankingConfigError(f"diversity_questions must be one of {list(DIVERSITY_QUESTIONS)}")
        return value
    if name == "prf_questions":
        if value not in EXPANSION_QUESTIONS:
            raise RankingConfigError(f"prf_questions must be one of {list(EXPANSION_QUESTIONS)}")
        return value
    if name in (
        "context_stand_in", "keyword_context_stand_in", "neighbour_gap", "neighbour_turns_only", "keyword_plurals",
        "keyword_short_ceiling", "newer_fact_turns", "successor_takes_place",
    ):  # fmt: skip
        if not isinstance(value, bool):
            raise RankingConfigError(f"{name} must be true or false")
        return value
    if name == "trusted_actors":
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise RankingConfigError("trusted_actors must be a list of strings")
        return tuple(value)
    if name == "bm25_b_long" and value is None:
        return None
    low, high = _NUMERIC_BOUNDS[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise RankingConfigError(f"{name} must be a number")
    if not low <= value <= high:
        raise RankingConfigError(f"{name} must be between {low} and {high}")
    return int(value) if isinstance(low, int) and isinstance(high, int) else float(value)


def merge(base: RankingConfig, overrides: Mapping | None) -> RankingConfig:
    """``base`` with ``overrides`` applied; weights merge key by key."""
    if not overrides:
        return base
    if not isinstance(overrides, Mapping):
        raise RankingConfigError("ranking must be an object")
    known = {f.name for f in fields(RankingConfig)}
    unknown = set(overrides) - known
    if unknown:
        raise RankingConfigError(f"unknown ranking options: {sorted(unknown)}; known: {sorted(known)}")
    changes = {name: _coerce(name, value) for name, value in overrides.items()}
    if "weights" in changes:
        changes["weights"] = {**base.weights, **changes["weights"]}
    return replace(base, **changes)


def resolve(
    tenant_settings: Mapping | None, request_overrides: Mapping | None, learned: Mapping | None = None
) -> RankingConfig:
    """Defaults ← the bucket's learned settings ← tenant settings ("retrieval", the operator's) ←
    request ("ranking"). What an operator or a request sets wins over what was learned (key by
    key; weights signal by signal): learning only moves what nobody chose."""
    tenant_overrides = (tenant_settings or {}).get("retrieval") or {}
    return merge(merge(merge(DEFAULTS, learned), tenant_overrides), request_overrides)


# --- fusion -------------------------------------------------------------------------------


def fuse(
    lists: Mapping[str, list[tuple[object, float]]],
    config: RankingConfig,
    ceilings: Mapping[str, float] | None = None,
) -> dict[object, float]:
    """Fuse ranked lists ``signal → [(id, raw score), ...]`` (best first) into one score per id.
    ``ceilings``: per BM25 signal, the query's IDF mass over its documents, which a short list's
    scores are normalised towards with ``keyword_short_ceiling`` (:func:`short_list_ceiling`)."""
    fused: dict[object, float] = {}
    if config.fusion == "rrf":
        for signal, ranked in lists.items():
            weight = config.weight(signal)
            if weight <= 0:
                continue
            for item, rank in tied_ranks(ranked).items():
                fused[item] = fused.get(item, 0.0) + weight / (config.rrf_k + rank)
        return fused
    total_weight = sum(config.weight(s) for s, ranked in lists.items() if ranked) or 1.0
    for signal, ranked in lists.items():
        weight = config.weight(signal)
        if weight <= 0 or not ranked:
            continue
        scores = [score for _item, score in ranked]
        high, low = max(scores), min(scores)
        if signal in ZERO_FLOOR_SIGNALS and len(ranked) < config.candidates:
            # The list holds every memory the graph reaches; all others score 0. Its own minimum
            # would send its last entry to 0 too (of two hits, the second would count nothing).
            low = min(low, 0.0)
        else:
            low = short_list_floor(signal, low, len(ranked), config)
            if config.keyword_short_ceiling and ceilings and signal in ceilings:
                high = short_list_ceiling(high, ceilings[signal], len(ranked), config)
        spread = high - low
        for item, score in ranked:
            # A single candidate, or a list of ties, counts as fully relevant.
            normalised = (score - low) / spread if spread > 0 else 1.0
            fused[item] = fused.get(item, 0.0) + weight * normalised / total_weight
    return fused


def short_list_floor(signal: str, low: float, length: int, config: RankingConfig) -> float:
    """The floor a list of ``length`` candidates whose lowest score is ``low`` is normalised
    against: ``low`` from ``short_list`` candidates on; below, drawn linearly towards the
    signal's absolute floor (BM25 0, cosine ``vector_floor``), reached at one candidate. Never
    above ``low``: a list whose worst candidate is below the absolute floor keeps its own."""
    if length >= config.short_list:
        return low
    absolute = config.vector_floor if signal.startswith("vector") else 0.0
    if low <= absolute:
        return low
    share = (length - 1) / (config.short_list - 1)  # 0 for one candidate, towards 1 at short_list
    return low - (1.0 - share) * (low - absolute)


def short_list_ceiling(high: float, mass: float, length: int, config: RankingConfig) -> float:
    """The top a BM25 list of ``length`` candidates whose best score is ``high`` is normalised
    against: ``high`` from ``short_list`` candidates on; below, drawn linearly towards the query's
    IDF mass (``mass``: what a document of average length holding each query term once scores),
    reached at one candidate. Never below ``high``. With the floor drawn to 0, one candidate then
    counts the share of the question's IDF mass it matches, not 1: a memory holding the one
    question word that no other memory holds ("drive" of "What car do I drive?") no longer takes
    the list's whole weight against the vectors' preference."""
    if length >= config.short_list or mass <= high:
        return high
    share = (length - 1) / (config.short_list - 1)
    return high + (1.0 - share) * (mass - high)


def with_weight(config: RankingConfig, signal: str, weight: float) -> RankingConfig:
    """``config`` with one signal's weight replaced."""
    return replace(config, weights={**config.weights, signal: weight})


def with_keyword_coverage(config: RankingConfig, coverage: float | None) -> RankingConfig:
    """``config`` with both BM25 weights scaled by the query's keyword coverage (see
    ``keyword_coverage_floor``); unchanged when the floor is 1 or no coverage was measured."""
    floor = config.keyword_coverage_floor
    if floor >= 1.0 or coverage is None:
        return config
    factor = floor + (1.0 - floor) * coverage
    weights = {**config.weights}
    for signal in ("keyword", "keyword_context"):
        weights[signal] = weights.get(signal, 0.0) * factor
    return replace(config, weights=weights)


def lift_neighbours(
    fused: Mapping, position: Mapping, at: Mapping, config: RankingConfig, turns: set | frozenset = frozenset()
) -> tuple[dict, dict]:
    """Fused scores plus each memory's neighbour lift, and the lifts.

    ``position``: memory → (sequence, index); ``at``: (sequence, index) → memory. A memory
    gains ``neighbour_weight`` x the best fused score among the memories up to
    ``neighbour_reach`` places from it in its sequence, halved for every place beyond the
    next one. With ``neighbour_gap`` it gains that share of how far the neighbour's score is
    above its own instead (nothing from a neighbour below it): it can reach, never pass, the
    neighbour it gains from. A neighbour no signal found has a fused score of 0 and only receives.
    With ``neighbour_turns_only`` a lift (the session share too) flows only between two
    memories of ``turns``.
    """
    lifted: dict = dict(fused)
    lifts: dict = {}
    # The two best fused scores of each sequence: a memory's session score is the best of the others.
    session_best: dict = {}
    if config.session_weight > 0:
        for item, (sequence, _index) in position.items():
            score = fused.get(item, 0.0)
            top = session_best.setdefault(sequence, [(0.0, None), (0.0, None)])
            if score > top[0][0]:
                top[:] = [(score, item), top[0]]
            elif score > top[1][0]:
                top[1] = (score, item)
    turns_only = config.neighbour_turns_only
    # What each place gives its neighbours: its memory's fused score, or None when no lift flows
    # from it; read once per place, not once for every neighbour that looks at it.
    given = {place: fused.get(other, 0.0) if not turns_only or other in turns else None for place, other in at.items()}
    for item, (sequence, index) in position.items():
        if turns_only and item not in turns:
            continue
        own = fused.get(item, 0.0) if config.neighbour_gap else 0.0
        best = 0.0
        for distance in range(1, config.neighbour_reach + 1):
            share = 0.5 ** (distance - 1)
            for score in (given.get((sequence, index - distance)), given.get((sequence, index + distance))):
                if score is not None:
                    best = max(best, (score - own) * share)
        lift = config.neighbour_weight * best
        if session_best:
            first, second = session_best[sequence]
            lift += config.session_weight * (second[0] if first[1] == item else first[0])
        if lift > 0:
            lifts[item] = lift
            lifted[item] = fused.get(item, 0.0) + lift
    return lifted, lifts


def tied_ranks(ranked: list[tuple[object, float]]) -> dict[object, int]:
    """1-based ranks where equal scores share the better rank ("1, 2, 2, 4"): two
    equally relevant memories must not be split by an arbitrary tie-break, or the
    fused scores would differ by more than any boost applied afterwards."""
    ranks: dict[object, int] = {}
    previous = None
    rank = 0
    for position, (item, score) in enumerate(ranked, start=1):
        if score != previous:
            rank, previous = position, score
        ranks[item] = rank
    return ranks


def recency_factor(age_days: float, config: RankingConfig) -> float:
    decay = 0.5 ** (max(age_days, 0.0) / config.recency_half_life_days)
    return (1.0 - config.recency_weight) + config.recency_weight * decay
