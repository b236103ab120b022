"""Key phrases of a memory, without a model: the runs of content words its text is made of,
scored as RAKE does (Rose et al., 2010), the best few kept.

A phrase is a run of up to three words between stop words and punctuation ("support group",
"quarterly planning doc"); a word scores its degree (how many words it co-occurs with in
phrases, itself included) over its frequency, a phrase the sum of its words'. Long texts are
where this pays: a long memory's vector sees only its first 256 word pieces, and its key
phrases are taken from all of it.
"""

from __future__ import annotations

import re
from collections import Counter

from engram_site.providers import lemmatizer

MAX_PHRASE_WORDS = 3
# A phrase per this many words of the text, at most MAX_PHRASES: a short memory is its own
# key phrase and gets none.
MAX_PHRASES = 12
WORDS_PER_PHRASE = 25
_TOKEN = re.compile(r"[A-Za-z][A-Za-z'’-]*[A-Za-z]|[A-Za-z]|\d+|[^\w\s]")


def key_phrases(text: str, *, limit: int | None = None) -> list[str]:
    """The text's best phrases, best first (lowercase, each once): one per full
    :data:`WORDS_PER_PHRASE` words of the text, at most :data:`MAX_PHRASES`."""
    tokens = _TOKEN.findall(text[:20_000])
    words = sum(1 for t in tokens if t[0].isalnum())
    limit = limit if limit is not None else min(MAX_PHRASES, words // WORDS_PER_PHRASE)
    if limit <= 0:
        return []
    # Words BM25 keeps ("last", "first", "two") still end a phrase.
    stops = lemmatizer.stop_words() | lemmatizer.KEPT_WORDS
    phrases: list[tuple[str, ...]] = []
    run: list[str] = []
    for token in tokens:
        lower = token.lower().replace("’", "'")
        if not token[0].isalpha() or lower in stops or len(lower) < 2 or "'" in lower:
            if run:
                phrases.append(tuple(run))
            run = []
            continue
        run.append(lower)
        if len(run) == MAX_PHRASE_WORDS:
            phrases.append(tuple(run))
            run = []
    if run:
        phrases.append(tuple(run))
    if not phrases:
        return []
    frequency: Counter = Counter()
    degree: Counter = Counter()
    for phrase in phrases:
        for word in phrase:
            frequency[word] += 1
            degree[word] += len(phrase)
    counted = Counter(phrases)
    # A phrase said twice counts a little more; ties by first appearance (stable sort).
    scored = sorted(
        dict.fromkeys(phrases),
        key=lambda p: -(sum(degree[w] / frequency[w] for w in p) * (1 + 0.5 * (counted[p] - 1))),
    )
    return [" ".join(p) for p in scored[:limit]]
