"""The BM25 terms of memories and questions beyond their lemmas: the words a date is searched
by. A memory's lemmatized text ends with the year, month and weekday it was written
(:func:`date_terms`); a question's terms add the dates it implies ("last summer", "3 weeks ago",
:func:`query_date_terms`). The lemmas themselves come from the platform's lemmatizer
(``engram_site/providers/lemmatizer.py``)."""

from __future__ import annotations

import calendar
import re
from datetime import datetime, timedelta

from engram_site.providers import lemmatizer

MONTHS = [m.lower() for m in calendar.month_name[1:]]
WEEKDAYS = [d.lower() for d in calendar.day_name]
_MONTH_ABBREVIATIONS = {m[:3]: m for m in MONTHS} | {"sept": "september"}


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
        base = lemmatizer.lemmatize(query).split()
    except lemmatizer.LemmatizerUnavailable:
        base = lemmatizer.fallback_terms(query, lemmatizer.stop_words())
    extra = query_date_terms(query, now) if now is not None else []
    seen: set[str] = set()
    return [t for t in base + extra if not (t in seen or seen.add(t))]
