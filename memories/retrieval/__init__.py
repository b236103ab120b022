"""Hybrid retrieval: vector + BM25 (+ sequence context, + graph), fused, boosted, budgeted.

One job per module:

- :mod:`.search` — ``memories_search``: which signals run and how their lists become hits;
- :mod:`.keyword` — BM25 in SQL; :mod:`.vector` — nearest neighbours in SQL;
- :mod:`.stats` — the per-process bucket statistics cache and its refresh thread;
- :mod:`.concurrency` — the thread pools signals run in;
- :mod:`.neighbours` — the sequence-neighbour lift; :mod:`.rows` — reading candidates' rows;
- :mod:`.sessions` — session context; :mod:`.current` — questions about what holds now;
  :mod:`.answers` — the kind of value a question asks for;
  :mod:`.diversity` — coverage over redundancy; :mod:`.expansion` — pseudo-relevance feedback;
- :mod:`.query` — cues read from the query; :mod:`.fusion` — the boosts;
- :mod:`.passages` — long memories: a memory scored by its best passage, the passage a hit names;
- :mod:`.hits` — hits, the result, the token budget (and a long hit's excerpt).

The weights and options are :mod:`memories.ranking`'s; the filters :mod:`memories.filters`'.
This package re-exports the names other apps import from ``memories.retrieval``. Patch a
name in the module that defines it (e.g. ``memories.retrieval.vector.EXACT_SCAN_BELOW``):
the copies here are not the ones looked up.
"""

from memories.filters import MemoryFilters
from memories.retrieval.concurrency import close_search_connections
from memories.retrieval.hits import EXCERPT_MODES, Hit, SearchResult
from memories.retrieval.query import asks_when, has_time_expression, named_people, preferred_scope
from memories.retrieval.search import (
    BUDGET_DEFAULT_LIMIT,
    MAX_LIMIT,
    MODES,
    GraphSignal,
    memories_search,
    register_graph_signal,
)
from memories.retrieval.stats import bucket_stats
from memories.retrieval.vector import EF_GROWS_FROM, EXACT_SCAN_BELOW, scaled_ef_search

__all__ = [
    "BUDGET_DEFAULT_LIMIT",
    "EF_GROWS_FROM",
    "EXACT_SCAN_BELOW",
    "EXCERPT_MODES",
    "MAX_LIMIT",
    "MODES",
    "GraphSignal",
    "Hit",
    "MemoryFilters",
    "SearchResult",
    "asks_when",
    "bucket_stats",
    "close_search_connections",
    "has_time_expression",
    "memories_search",
    "named_people",
    "preferred_scope",
    "register_graph_signal",
    "scaled_ef_search",
]
