"""The columns derived from a memory's text before it is stored: lemmas, token counts, vectors.
The write, an edit and the enrichment sweep compute them the same way."""

from __future__ import annotations

import logging
from datetime import datetime

from engram_site import tracing
from engram_site.providers import embedding, lemmatizer
from memories import search_terms
from memories.services.ingest.rows import Row
from memories.text import embedding_text

logger = logging.getLogger(__name__)


def join_context(context_text: str, content: str) -> str:
    """The text embedded as a memory's context vector: predecessors, then the memory."""
    return f"{context_text}\n{content}"


@tracing.traced("engram.write.lemmatize")
def lemmatize_rows(rows: list[Row], *, strict: bool = False) -> None:
    """Set the rows' lemmas; without the lemmatizer they stay None (``strict``: it raises)."""
    contexts = [r for r in rows if r.context_text]
    try:
        lemmas = lemmatizer.lemmatize_many([r.item.content for r in rows] + [r.context_text for r in contexts])
    except lemmatizer.LemmatizerUnavailable as exc:
        if strict:
            raise
        logger.warning("lemmatizer unavailable, storing rows without lemmas: %s", exc)
        return
    for row, lemma in zip(rows, lemmas[: len(rows)], strict=True):
        row.text_lemmatized = document_lemmas(lemma, row.created_at)
    for row, lemma in zip(contexts, lemmas[len(rows) :], strict=True):
        row.context_lemmatized = lemma


def document_lemmas(content_lemmas: str, created_at: datetime | None) -> str:
    """The BM25 document: the content's lemmas plus its date words ("2024 may
    tuesday"), so questions about a month or year can match the memory."""
    return " ".join(filter(None, [content_lemmas, " ".join(search_terms.date_terms(created_at))]))


@tracing.traced("engram.write.embed")
def embed_rows(rows: list[Row], *, model: str, strict: bool = False) -> None:
    """Give ``rows`` their vectors by ``model``; a failed model call leaves them None
    (``strict``: it raises), a vector the model got wrong leaves that one None (the
    enrichment sweep tries again)."""
    contexts = [r for r in rows if r.context_text]
    try:
        # Memories and their (about three times longer) context texts in separate calls: a
        # model batch mixing both pads the short ones to the long ones' length. Two calls
        # measured faster for any number of rows, one memory and its context included
        # (bench/context_batching.py). Without contexts the second call does nothing.
        vectors = embedding.embed_texts(
            [embedding_text(r.item.content, r.item.attributed_to) for r in rows], model=model
        )
        context_vectors = embedding.embed_texts(
            [join_context(r.context_text, r.item.content) for r in contexts], model=model
        )
    except embedding.EmbeddingUnavailable as exc:
        if strict:
            raise
        logger.warning("embedding model unavailable, storing rows without embeddings: %s", exc)
        return
    # A vector the model got wrong (NaN, zeros) is left NULL like a missing one: the row
    # is stored, and the sweep tries again.
    for row, vector in zip(rows, vectors, strict=True):
        row.embedding = vector if embedding.usable(vector) else None
    for row, vector in zip(contexts, context_vectors, strict=True):
        row.context_embedding = vector if embedding.usable(vector) else None
    unusable = sum(r.embedding is None for r in rows) + sum(r.context_embedding is None for r in contexts)
    if unusable:
        logger.warning("embedding model returned %d unusable vector(s); storing those rows without them", unusable)


def count_tokens(rows: list[Row]) -> None:
    for row, count in zip(rows, embedding.count_tokens([r.item.content for r in rows]), strict=True):
        row.token_count = count
