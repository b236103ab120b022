"""A memory's key document, put together from its parts.

Facts first, then statements: a long memory's vector sees only the first 256 word pieces of
what it embeds, and the facts are the short part that speaks for all of it.

    Priya Natarajan, Marco Rossi. Marco Rossi manager of Priya Natarajan.
    Priya Natarajan: user colleague, engineer. key phrases…
    Tuesday 2 May 2023.
    <statements, each relative date followed by its meaning in brackets>
    Tuesday 9 May 2023.            (when the memory was written)
"""

from __future__ import annotations

from datetime import datetime

from memories.keys import KeyFacts
from memories.keys.dates import annotate, day_text
from memories.keys.phrases import key_phrases
from memories.text import embedding_text

# Bounds that keep a key small whatever the memory: its statements are cut (at a statement)
# past MAX_STATEMENT_CHARS, each list of facts past MAX_FACT_ITEMS.
MAX_STATEMENT_CHARS = 2_000
MAX_FACT_ITEMS = 20
MAX_FACT_CHARS = 200


def _distinct(items, limit: int = MAX_FACT_ITEMS) -> list[str]:
    seen: dict[str, str] = {}
    for item in items:
        text = " ".join(str(item).split())[:MAX_FACT_CHARS]
        if text and text.casefold() not in seen:
            seen[text.casefold()] = text
    return list(seen.values())[:limit]


def key_document(*, content: str, attributed_to: str | None, created_at: datetime | None, facts: list[KeyFacts]) -> str:
    """The key text of a memory: ``facts`` from the registered sources, the memory's own
    key phrases and dates. Without statements from any source, the memory's text (without a
    transcript's "Name: ") stands in for them."""
    statements = [s for f in facts for s in f.statements] or [embedding_text(content, attributed_to)]
    kept, length = [], 0
    dates: list[str] = []
    for statement in statements:
        statement = " ".join(statement.split())
        if not statement:
            continue
        if kept and length + len(statement) > MAX_STATEMENT_CHARS:
            break
        annotated, meanings = annotate(statement[:MAX_STATEMENT_CHARS], created_at)
        kept.append(annotated)
        dates += meanings
        length += len(statement) + 1
    # Dates of the statements cut off are still facts of the memory.
    dates += [m for s in statements[len(kept) :] for m in annotate(s, created_at)[1]]
    lines = []
    entities = _distinct(e for f in facts for e in f.entities)
    if entities:
        lines.append(", ".join(entities) + ".")
    relations = _distinct(r for f in facts for r in f.relations)
    if relations:
        lines.append(". ".join(relations) + ".")
    descriptions = _distinct(d for f in facts for d in f.descriptions)
    if descriptions:
        lines.append(". ".join(descriptions) + ".")
    phrases = _distinct(key_phrases(content))
    if phrases:
        lines.append(", ".join(phrases) + ".")
    dates = _distinct(dates)
    if dates:
        lines.append(", ".join(dates) + ".")
    lines.append(" ".join(kept))
    if created_at is not None:
        lines.append(day_text(created_at.date()) + ".")
    return "\n".join(line for line in lines if line.strip())
