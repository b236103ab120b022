"""The lemmatizer provider: the only place that loads spaCy for BM25 text.

``spacy.blank("en")`` with the lookup lemmatizer from ``spacy-lookups-data``:
deterministic lemmas we control (seed 000: Postgres stemming conflates
"universe" and "university"). Text is lowercased first because the lookup
table is case-sensitive. Output is a space-separated string of ``\\w+`` terms,
so it is always valid input for ``to_tsvector('simple', ...)`` and for
tsquery building — emoji, CJK, URLs, code and odd Unicode never produce NULL or
an exception (seed 000's emoji rollback).
"""

from __future__ import annotations

import calendar
import logging
import re
import threading
from datetime import datetime, timedelta

from django.conf import settings

logger = logging.getLogger(__name__)

MAX_TERM_LENGTH = 60  # longer "words" (hashes, base64) are cut, never dropped or fatal
_TERM = re.compile(r"\w+", re.UNICODE)

MONTHS = [m.lower() for m in calendar.month_name[1:]]
WEEKDAYS = [d.lower() for d in calendar.day_name]
_MONTH_ABBREVIATIONS = {m[:3]: m for m in MONTHS} | {"sept": "september"}


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
        lemma = _lemma_table(nlp).get(text, text)
        if not isinstance(lemma, str):  # a list of candidate lemmas: spaCy takes the first
            lemma = lemma[0]
        lemma = lemma or text
        # A stop word stays one whatever its lemma: the lookup table turns "does" into "doe"
        # and "well" into "good" (unless the lemma is a word we keep: "made" → "make").
        if text in stops and lemma not in KEPT_WORDS:
            terms = ()
        else:
            # URLs, paths, code: keep their word pieces ("example", "com", "foo").
            pieces = (piece[:MAX_TERM_LENGTH] for piece in _TERM.findall(lemma))
            terms = tuple(piece for piece in pieces if piece and piece not in stops)
    if len(_TERMS_BY_ORTH) >= _TERMS_CACHE_LIMIT:
        _TERMS_BY_ORTH.clear()
    _TERMS_BY_ORTH[orth] = terms
    return terms


def _lemma_table(nlp):
    return nlp.get_pipe("lemmatizer").lookups.get_table("lemma_lookup", {})


def _terms_from_doc(nlp, doc, stops: frozenset[str]) -> list[str]:
    terms: list[str] = []
    for orth in doc.to_array("ORTH").tolist():
        terms.extend(_token_terms(nlp, orth, stops))
    return terms


def _fallback_terms(text: str, stops: frozenset[str]) -> list[str]:
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
        terms = _terms_from_doc(nlp, doc, stops) if doc is not None else _fallback_terms(text, stops)
        out.append(" ".join(terms + _ambiguous_months(original)))
    return out


_MID_SENTENCE_MAY = re.compile(r"(?<![.!?]\s)(?<!^)(?<![.!?])\bMay\b")


def _ambiguous_months(text: str) -> list[str]:
    """ "May" is a stop word as a verb; capitalised mid-sentence it is the month."""
    return ["may"] if _MID_SENTENCE_MAY.search(text.strip()) else []


def lemmatize(text: str) -> str:
    return lemmatize_many([text])[0]


def date_terms(moment: datetime | None) -> list[str]:
    """The words a date is searched by: year, month name, weekday ("2024 may tuesday")."""
    if moment is None:
        return []
    return [str(moment.year), MONTHS[moment.month - 1], WEEKDAYS[moment.weekday()]]


# Relative expressions in questions, resolved against the query time.
_RELATIVE = re.compile(
    r"\b(yesterday|today|tonight|(?:last|this|next|past|previous) (?:year|month|week|summer|winter|spring|fall|autumn)"
    r"|(\d+|a|an|one|two|three|four|five|six|few) (day|week|month|year)s? ago)\b",
    re.IGNORECASE,
)
_NUMBER_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "few": 3}
_SEASON_MONTHS = {
    "spring": (3, 4, 5),
    "summer": (6, 7, 8),
    "fall": (9, 10, 11),
    "autumn": (9, 10, 11),
    "winter": (12, 1, 2),
}
_CAPITALISED_MONTH = re.compile(
    r"\b(" + "|".join(m.capitalize() for m in MONTHS) + r"|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)\b\.?"
)


def query_date_terms(query: str, now: datetime) -> list[str]:
    """Date words a question implies: "last year" → the year, "in May" → may,
    "3 weeks ago" → that month and year."""
    terms: list[str] = []
    for match in _CAPITALISED_MONTH.finditer(query):
        word = match.group(1).lower()
        terms.append(_MONTH_ABBREVIATIONS.get(word[:4] if word == "sept" else word[:3], word))
    for match in _RELATIVE.finditer(query):
        phrase = match.group(0).lower()
        if phrase == "yesterday":
            terms += date_terms(now - timedelta(days=1))
        elif phrase in ("today", "tonight"):
            terms += date_terms(now)
        elif match.group(2):  # "N units ago"
            n = _NUMBER_WORDS.get(match.group(2).lower()) or int(match.group(2))
            unit = match.group(3).lower()
            days = {"day": 1, "week": 7, "month": 30, "year": 365}[unit] * n
            then = now - timedelta(days=days)
            terms += [str(then.year)] if unit == "year" else [str(then.year), MONTHS[then.month - 1]]
        else:
            which, unit = phrase.split()
            offset = 0 if which == "this" else (1 if which == "next" else -1)
            if unit == "year":
                terms.append(str(now.year + offset))
            elif unit == "month":
                month_index = now.month - 1 + offset
                year = now.year + month_index // 12
                terms += [str(year), MONTHS[month_index % 12]]
            elif unit == "week":
                then = now + timedelta(weeks=offset)
                terms += [str(then.year), MONTHS[then.month - 1]]
            else:  # a season: the most recent one that has ended ("last"), the current or coming one
                months = _SEASON_MONTHS[unit]
                ended_this_year = unit != "winter" and now.month > max(months)
                if which == "this":
                    year = now.year
                elif offset < 0:
                    year = now.year if ended_this_year else now.year - 1
                else:
                    year = now.year + 1 if now.month >= min(months) else now.year
                terms += [str(year)] + [MONTHS[m - 1] for m in months]
    seen: set[str] = set()
    return [t for t in terms if not (t in seen or seen.add(t))]


def query_terms(query: str, now: datetime | None = None) -> list[str]:
    """Distinct BM25 terms of a question: lemmatised like documents, stop words
    removed, plus the date words it implies. Month names survive even where they
    are stop words ("may")."""
    try:
        base = lemmatize(query).split()
    except LemmatizerUnavailable:
        base = _fallback_terms(query, stop_words())
    extra = query_date_terms(query, now) if now is not None else []
    seen: set[str] = set()
    return [t for t in base + extra if not (t in seen or seen.add(t))]
