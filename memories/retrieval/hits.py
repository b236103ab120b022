"""A search's hits, its result, and the token budget that cuts the hits."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from engram_site import tracing
from engram_site.providers.embedding import count_tokens, rough_token_count
from memories.passages import excerpt_span

# How a long hit's text is returned (the search's ``excerpt`` option): "auto", its matched passage
# with a little context when the whole memory does not fit what is left of the token budget;
# "passage", always that excerpt; "whole", always the whole memory.
EXCERPT_MODES = ("auto", "passage", "whole")


@dataclass
class Hit:
    id: uuid.UUID
    row: dict
    score: float
    explain: dict = field(default_factory=dict)
    # A long memory's passage nearest the question (memories.retrieval.passages.PassageMatch).
    passage: object | None = None
    # Set when the hit returns part of the memory (the budget's excerpt): its span and text.
    excerpt: tuple[int, int] | None = None
    excerpt_text: str | None = None
    excerpt_tokens: int | None = None

    @property
    def content(self) -> str:
        """What the hit returns: the memory's content, or its excerpt."""
        return self.excerpt_text if self.excerpt_text is not None else self.row["content"]

    @property
    def token_count(self) -> int:
        """What the hit costs of a token budget."""
        if self.excerpt_tokens is not None:
            return self.excerpt_tokens
        return self.row["token_count"] or rough_token_count(self.row["content"])

    def cut_to_passage(self) -> None:
        """Return the matched passage with a little context instead of the whole memory."""
        if self.passage is None or self.excerpt is not None:
            return
        span = excerpt_span(self.row["content"], self.passage.start, self.passage.end)
        self.excerpt = (span.start, span.end)
        self.excerpt_text = self.row["content"][span.start : span.end]
        self.excerpt_tokens = count_tokens([self.excerpt_text])[0]


@dataclass
class SearchResult:
    mode_used: str
    hits: list[Hit]
    warnings: list[str] = field(default_factory=list)
    # The model the vector signals compared by (the bucket's); None when none ran.
    embedding_model: str | None = None


@tracing.traced("engram.search.budget")
def apply_budget(hits: list[Hit], limit: int, token_budget: int | None, excerpt: str = "auto") -> list[Hit]:
    """The hits, best first, up to ``limit`` and within ``token_budget`` (the sum of what they
    return). A long hit with a matched passage is returned as that passage with a little context
    (``excerpt``): "passage", always; "auto", when the whole memory does not fit what is left of
    the budget (it then takes the place the whole would have had, if the excerpt fits)."""
    if token_budget is None:
        chosen = hits[:limit]
        if excerpt == "passage":
            for hit in chosen:
                hit.cut_to_passage()
        return chosen
    chosen, used = [], 0
    for hit in hits:
        if excerpt == "passage":
            hit.cut_to_passage()
        if used + hit.token_count > token_budget and excerpt == "auto" and hit.passage is not None:
            hit.cut_to_passage()
        if used + hit.token_count <= token_budget:
            chosen.append(hit)
            used += hit.token_count
            if len(chosen) == limit:
                break
    return chosen
