"""A search's hits, its result, and the token budget that cuts the hits."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from engram_site.providers.embedding import rough_token_count


@dataclass
class Hit:
    id: uuid.UUID
    row: dict
    score: float
    explain: dict = field(default_factory=dict)


@dataclass
class SearchResult:
    mode_used: str
    hits: list[Hit]
    warnings: list[str] = field(default_factory=list)
    # The model the vector signals compared by (the bucket's); None when none ran.
    embedding_model: str | None = None


def apply_budget(hits: list[Hit], limit: int, token_budget: int | None) -> list[Hit]:
    if token_budget is None:
        return hits[:limit]
    chosen, used = [], 0
    for hit in hits:
        cost = hit.row["token_count"] or rough_token_count(hit.row["content"])
        if used + cost <= token_budget:
            chosen.append(hit)
            used += cost
            if len(chosen) == limit:
                break
    return chosen
