"""The lemmatizer provider: the only place that loads spaCy for BM25 text.

``spacy.blank("en")`` with the lookup lemmatizer from ``spacy-lookups-data``:
deterministic lemmas we control (seed 000: Postgres stemming conflates
"universe" and "university"). Text is lowercased first because the lookup
table is case-sensitive. Output is a space-separated string of ``\\w+`` terms,
so it is always valid input for ``to_tsvector('simple', ...)`` and for
tsquery building — emoji, CJK, URLs, code and odd Unicode never produce NULL or
an exception (seed 000's emoji rollback).

The date words a memory and a question are searched by besides their lemmas are the
memories app's (``memories/search_terms.py``).
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading

from django.conf import settings

logger = logging.getLogger(__name__)

MAX_TERM_LENGTH = 60  # longer "words" (hashes, base64) are cut, never dropped or fatal
_TERM = re.compile(r"\w+", re.UNICODE)


class LemmatizerUnavailable(RuntimeError):
    pass


_nlp = None
_lock = threading.Lock()


def _load():
    global _nlp
    if _nlp is not None:
        return _nlp
    with _lock:
        if _nlp is None:
            if not getattr(settings, "ENGRAM_LEMMATIZER_ENABLED", True):
                raise LemmatizerUnavailable("lemmatizer disabled by configuration")
            try:
                import spacy

                nlp = spacy.blank("en")
                nlp.add_pipe("lemmatizer", config={"mode": "lookup"})
                nlp.initialize()
            except Exception as exc:  # missing package, broken install
                raise LemmatizerUnavailable(f"spaCy lookup lemmatizer unavailable: {exc}") from exc
            _nlp = nlp
    return _nlp


def preload() -> None:
    """Load the pipeline now rather than on the first text (a web server's master does, before
    it forks its workers: engram_site/wsgi.py). Disabled or unavailable: nothing to load."""
    with contextlib.suppress(LemmatizerUnavailable):
        _load()


_STOPS: frozenset[str] | None = None


# spaCy's English stop list is built for documents about anything; memories are
# about people's lives, where these words carry the fact ("my sister's name",
# "we moved", "two kids", "the first time"). They stay searchable.
KEPT_WORDS = frozenset(
    """
    name call move first last give show side top front back bottom put make see go get say take keep full
    part empty serious one two three four five six seven eight nine ten eleven twelve fifteen twenty forty
    fifty sixty hundred several never nobody alone home third
    """.split()
)


def stop_words() -> frozenset[str]:
    """Stop words dropped from documents and queries alike."""
    global _STOPS
    if _STOPS is None:
        from spacy.lang.en.stop_words import STOP_WORDS

        _STOPS = frozenset(STOP_WORDS) - KEPT_WORDS
    return _STOPS


# The terms one token gives, by the token's text (its ORTH id): the lookup lemma, the
# punctuation and space flags and the stop list depend on the text alone, so each distinct
# text is worked out once per process. Iterating a Doc makes a Python Token object per token;
# reading the ORTH ids as an array and the terms from here lemmatized 1,000 memories in 12
# instead of 37 ms, to the same terms (bench/README.md, "Lemmatizing without Token objects").
_TERMS_BY_ORTH: dict[int, tuple[str, ...]] = {}
_TERMS_CACHE_LIMIT = 500_000  # distinct token texts kept; then the cache starts again


def _token_terms(nlp, orth: int, stops: frozenset[str]) -> tuple[str, ...]:
    terms = _TERMS_BY_ORTH.get(orth)
    if terms is not None:
        return terms
    lexeme = nlp.vocab[orth]
    if lexeme.is_space or lexeme.is_punct:
        terms = ()
    else:
        text = lexeme.orth_
        table = _lemma_table(nlp)
        if text in table or _TERM.fullmatch(text):
            terms = _word_terms(table, text, stops)
        else:
            # A token the tokenizer left glued to symbols it does not split off ("peanuts\",
            # "$$peanuts$$", "example.com/docs"): each word in it is looked up on its own, as it
            # would be standing alone ("peanut"), not the token as a whole ("peanuts").
            terms = tuple(term for word in _TERM.findall(text) for term in _word_terms(table, word, stops))
    if len(_TERMS_BY_ORTH) >= _TERMS_CACHE_LIMIT:
        _TERMS_BY_ORTH.clear()
    _TERMS_BY_ORTH[orth] = terms
    return terms


def _word_terms(table, text: str, stops: frozenset[str]) -> tuple[str, ...]:
    """The terms of one word (or one token the lemma table knows) by the lookup table."""
    lemma = table.get(text, text)
    if not isinstance(lemma, str):  # a list of candidate lemmas: spaCy takes the first
        lemma = lemma[0]
    lemma = lemma or text
    # A stop word stays one whatever its lemma: the lookup table turns "does" into "doe"
    # and "well" into "good" (unless the lemma is a word we keep: "made" → "make").
    if text in stops and lemma not in KEPT_WORDS:
        return ()
    # URLs, paths, code: keep their word pieces ("example", "com", "foo").
    pieces = (piece[:MAX_TERM_LENGTH] for piece in _TERM.findall(lemma))
    return tuple(piece for piece in pieces if piece and piece not in stops)


def _lemma_table(nlp):
    return nlp.get_pipe("lemmatizer").lookups.get_table("lemma_lookup", {})


def _terms_from_doc(nlp, doc, stops: frozenset[str]) -> list[str]:
    terms: list[str] = []
    for orth in doc.to_array("ORTH").tolist():
        terms.extend(_token_terms(nlp, orth, stops))
    return terms


def fallback_terms(text: str, stops: frozenset[str]) -> list[str]:
    """Lowercase word terms without stop words: what a text gives when spaCy cannot."""
    return [t[:MAX_TERM_LENGTH] for t in _TERM.findall(text.lower()) if t not in stops]


def lemmatize_many(texts: list[str]) -> list[str]:
    """Lemmatised BM25 documents for ``texts``. Raises LemmatizerUnavailable only
    when spaCy itself cannot be loaded; a text spaCy chokes on falls back to plain
    lowercase word terms instead of failing the batch.

    Only spaCy's tokenizer runs over the texts; each token's lemma is the lookup lemmatizer's
    (the same table, the same rule: the table's entry for the lowercased text, or the text),
    read through :func:`_token_terms`."""
    nlp = _load()
    stops = stop_words()
    lowered = [t.lower() for t in texts]
    out: list[str] = []
    try:
        docs = list(nlp.tokenizer.pipe(lowered, batch_size=256))
    except Exception:
        logger.exception("spaCy failed on a batch; tokenizing one by one")
        docs = []
        for text in lowered:
            try:
                docs.append(nlp.tokenizer(text))
            except Exception:
                docs.append(None)
    for original, text, doc in zip(texts, lowered, docs, strict=True):
        terms = _terms_from_doc(nlp, doc, stops) if doc is not None else fallback_terms(text, stops)
        out.append(" ".join(terms + _ambiguous_months(original)))
    return out


_MID_SENTENCE_MAY = re.compile(r"(?<![.!?]\s)(?<!^)(?<![.!?])\bMay\b")


def _ambiguous_months(text: str) -> list[str]:
    """ "May" is a stop word as a verb; capitalised mid-sentence it is the month."""
    return ["may"] if _MID_SENTENCE_MAY.search(text.strip()) else []


def lemmatize(text: str) -> str:
    return lemmatize_many([text])[0]
