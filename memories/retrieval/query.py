"""What a query asks for, read from its words: a scope, people, a time."""

from __future__ import annotations

import re

from memories import search_terms

_PREFERENCE_QUERY = re.compile(
    r"\b(like|likes|love|loves|prefer|prefers|preference|favou?rite|enjoy|enjoys|hate|hates|dislike|usually|"
    r"tend|always|never|habit|into)\b",
    re.IGNORECASE,
)
_SPECIFIC_QUERY = re.compile(
    r"\b(which|what|where|when|who|how many|how much|currently|current|now|own|have|has|bought|name|called)\b",
    re.IGNORECASE,
)
_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b([A-Z][a-z]+(?:[-'][A-Z]?[a-z]+)?)\b")
_POSSESSIVE = re.compile(r"['\u2019]s$")
_NOT_NAMES = {m.capitalize() for m in search_terms.MONTHS + search_terms.WEEKDAYS} | {"I", "I'm", "I've", "I'd"}


# "When did…", "what year…", "how long ago…": the answer is a time.
_WHEN_QUERY = re.compile(
    r"^\W*(?:when\b|(?:in |on |during |by )?(?:what|which) (?:year|month|day|date|time|week|season)\b|how long ago\b)",
    re.IGNORECASE,
)
_TIME_WORDS = (
    "yesterday|today|tonight|tomorrow|ago|recently|lately|earlier|later|weekend|morning|afternoon|evening|"
    "week|weeks|month|months|year|years|summer|winter|spring|autumn|fall|christmas|birthday|anniversary|"
    + "|".join(search_terms.MONTHS + search_terms.WEEKDAYS)
)
_TIME_EXPRESSION = re.compile(rf"\b(?:{_TIME_WORDS}|(?:19|20)\d\d)\b", re.IGNORECASE)


def asks_when(query: str) -> bool:
    return bool(_WHEN_QUERY.search(query))


def has_time_expression(content: str) -> bool:
    return bool(_TIME_EXPRESSION.search(content))


def preferred_scope(query: str) -> str | None:
    if _PREFERENCE_QUERY.search(query):
        return "general"
    if _SPECIFIC_QUERY.search(query):
        return "specific"
    return None


def named_people(query: str) -> list[str]:
    """Capitalised words inside the question ("What does Alice like?" → Alice)."""
    names = [_POSSESSIVE.sub("", m.group(1)) for m in _NAME.finditer(query.strip())]
    return [n for n in dict.fromkeys(names) if n not in _NOT_NAMES]
