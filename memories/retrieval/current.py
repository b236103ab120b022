"""Questions about what holds now: among the best hits, the newer statement first.

"Where do I live now?", "What is the pool size set to now?", "Who is on call these days?",
"Do I still smoke?": the bucket holds the old fact and the new one, often in the same words
("I live in Boston" — "we moved to Denver last month"), and relevance alone does not tell them
apart; recency's year-long half-life barely does between two memories months apart. For a
question that asks what holds now (:func:`asks_for_current`), each of the ``current_pool`` best
hits gains

    score x (1 + current_boost x (created_at - oldest) / (newest - oldest))

the oldest and newest of those hits' writing times: the scale is the pool's own, whether it
spans a week of working sessions or two years of chat. Hits below the pool are not touched (the
boost only raises the pool). A pool written at one moment gains nothing.
"""

from __future__ import annotations

import re

from engram_site import tracing
from memories import ranking
from memories.retrieval.hits import Hit

_NOW = re.compile(
    r"\b(?:now|nowadays|currently|current|these days|at the moment|at present|still|any ?more|"
    r"latest|most recent|most recently)\b",
    re.IGNORECASE,
)


def asks_for_current(query: str) -> bool:
    return bool(_NOW.search(query))


def applies(query: str, config: ranking.RankingConfig) -> bool:
    return config.current_boost > 0 and asks_for_current(query)


@tracing.traced("engram.search.current")
def favour_newest(hits: list[Hit], config: ranking.RankingConfig) -> list[Hit]:
    """``hits`` (best first) with the ``current_pool`` best raised by their recency among them
    and re-ordered; ``explain`` shows the factor as the ``current`` boost."""
    pool = [hit for hit in hits[: config.current_pool] if hit.row.get("created_at") is not None]
    if len(pool) < 2:
        return hits
    times = [hit.row["created_at"].timestamp() for hit in pool]
    oldest, span = min(times), max(times) - min(times)
    if span <= 0:
        return hits
    for hit, when in zip(pool, times, strict=True):
        factor = 1.0 + config.current_boost * (when - oldest) / span
        if factor > 1.0:
            hit.score *= factor
            if hit.explain:
                hit.explain["boosts"]["current"] = round(factor, 4)
    head = sorted(hits[: config.current_pool], key=lambda h: (-h.score, str(h.id)))
    return head + hits[config.current_pool :]
