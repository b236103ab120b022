"""Passages: how a memory longer than the embedding model's window is cut into windows that fit.

The model reads at most 256 word pieces ([CLS] and [SEP] included); the rest of a longer text is
cut off, so a memory's own vector says nothing of what it says after its first ~1,000
characters. A memory whose ``token_count`` exceeds :data:`LONG_MEMORY_TOKENS` is therefore also
embedded by passages (``memory_passages``, memories/services/passages.py): windows of at most
:data:`PASSAGE_TOKENS` word pieces made of whole paragraphs, lines and sentences (a sentence
longer than a window is cut between word pieces), each starting with up to
:data:`OVERLAP_TOKENS` of the previous window's last sentences, so a statement that straddles
a boundary is whole in one of them. A passage is a span of the memory's content (character
offsets); nothing of its text is stored twice.

:data:`PASSAGE_VERSION` names the recipe: passages built by an older one are built again
(``build_passages``, and the enrichment sweep's passage pass).
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from engram_site.providers import embedding
from memories.models import LONG_MEMORY_TOKENS  # noqa: F401  (the window: memories longer get passages)

PASSAGE_VERSION = 1
# A passage's word pieces at most: below the window, so that the speaker prefix a passage may
# carry and the tokenizer's differences at a cut never push it past the model's end.
PASSAGE_TOKENS = 240
# The previous passage's last sentences a passage starts with, in word pieces at most.
OVERLAP_TOKENS = 40

# Where a text may be cut: after a blank line or a line break (paragraphs, list items, code
# lines), or after a sentence's end followed by white space.
_BOUNDARY = re.compile(r"\n\s*|(?<=[.!?])[\"')\]]*\s+")


@dataclass(frozen=True)
class Span:
    start: int
    end: int


def _units(text: str) -> list[Span]:
    """The text's sentences, lines and paragraphs, without the white space between them."""
    units, start = [], 0
    for match in _BOUNDARY.finditer(text):
        end = match.start() if match.group(0).startswith("\n") else match.end()
        piece = text[start:end]
        if piece.strip():
            lead = len(piece) - len(piece.lstrip())
            units.append(Span(start + lead, start + len(piece.rstrip())))
        start = match.end()
    piece = text[start:]
    if piece.strip():
        lead = len(piece) - len(piece.lstrip())
        units.append(Span(start + lead, start + len(piece.rstrip())))
    return units


def split(text: str, *, offsets: list[tuple[int, int]] | None = None) -> list[Span]:
    """The passages of ``text``: spans of at most :data:`PASSAGE_TOKENS` word pieces, in order,
    together covering all of it. ``offsets``: the text's word pieces as character spans (the
    model's tokenizer by default). A text that fits one passage is one span."""
    if offsets is None:
        offsets = embedding.token_offsets(text)
    starts = [s for s, _e in offsets]

    def tokens(start: int, end: int) -> int:
        return bisect.bisect_left(starts, end) - bisect.bisect_left(starts, start)

    # Units longer than a passage are cut between word pieces.
    units: list[Span] = []
    for unit in _units(text):
        first, last = bisect.bisect_left(starts, unit.start), bisect.bisect_left(starts, unit.end)
        if last - first <= PASSAGE_TOKENS:
            units.append(unit)
            continue
        for at in range(first, last, PASSAGE_TOKENS):
            piece_end = offsets[min(at + PASSAGE_TOKENS, last) - 1][1]
            units.append(Span(max(unit.start, offsets[at][0]), min(unit.end, piece_end)))
    if not units:
        return [Span(0, len(text))] if text else []
    sizes = [tokens(u.start, u.end) for u in units]
    passages: list[Span] = []
    first = 0
    while True:
        last, used = first, sizes[first]
        while last + 1 < len(units) and used + sizes[last + 1] <= PASSAGE_TOKENS:
            last += 1
            used += sizes[last]
        passages.append(Span(units[first].start, units[last].end))
        if last + 1 >= len(units):
            return passages
        # The next passage starts with the last units of this one that fit the overlap (never
        # with this one's first, so each passage moves on).
        nxt, overlap = last + 1, 0
        while nxt - 1 > first and overlap + sizes[nxt - 1] <= OVERLAP_TOKENS:
            nxt -= 1
            overlap += sizes[nxt]
        first = nxt


# Context an excerpt adds on each side of its passage: the neighbouring sentence, if no longer.
EXCERPT_CONTEXT_CHARS = 300


def excerpt_span(text: str, start: int, end: int) -> Span:
    """A passage (``start``, ``end``) of ``text`` with a little context: the sentence (line,
    paragraph) just before it and the one just after it, each when not longer than
    :data:`EXCERPT_CONTEXT_CHARS`."""
    units = _units(text)
    before = [u for u in units if u.end <= start]
    after = [u for u in units if u.start >= end]
    if before and before[-1].end - before[-1].start <= EXCERPT_CONTEXT_CHARS:
        start = before[-1].start
    if after and after[0].end - after[0].start <= EXCERPT_CONTEXT_CHARS:
        end = after[0].end
    return Span(start, end)
