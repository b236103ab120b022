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


def _by_first_letter(words: list[str]) -> str:
    """``words`` as one alternation grouped by their first letter ("t(?:oday|onight)|y(?:ear|…)"):
    the same words, but the regular expression engine tries one group at a word's start instead
    of every word (with IGNORECASE it cannot skip a word by its first letter on its own)."""
    groups: dict[str, list[str]] = {}
    for word in words:
        groups.setdefault(word[0], []).append(re.escape(word[1:]))
    return "|".join(f"{first}(?:{'|'.join(rests)})" for first, rests in sorted(groups.items()))


# A weekday also in the plural ("on Tuesdays"), and a time of day ("at 9:30", "5pm", "10 a.m.").
# Every candidate of a "when" question is tested (~120 texts a search): the lookahead skips the
# words that start with no letter a time word starts with (a third of the time of the plain list).
_TIME_STARTS = "".join(sorted({word[0] for word in (*_TIME_WORDS.split("|"), "weekday")}))
_TIME_EXPRESSION = re.compile(
    rf"\b(?=[{_TIME_STARTS}\d])(?:(?:{_by_first_letter([*_TIME_WORDS.split('|'), 'weekday'])})s?"
    r"|(?:19|20)\d\d|[0-2]?\d:[0-5]\d|1?\d ?(?:am|pm|a\.m\.|p\.m\.))(?!\w)",
    re.IGNORECASE,
)


# The first person singular: a question about the asker ("am I allowed…", "my salary", "where do I
# live"). "I" only as a capital (a lower-case "i" is more often a typo or a list marker).
_FIRST_PERSON = re.compile(r"\bI\b|\b(?i:me|my|mine|myself)\b")


def asks_about_self(query: str) -> bool:
    return bool(_FIRST_PERSON.search(query))


# A question about what the assistant said or did: "what did you suggest…", "you recommended…".
_ASKS_ASSISTANT = re.compile(
    r"\b(?:did|have|had) you\b|\byou (?:said|suggested|recommended|mentioned|told|proposed|wrote|gave|advised)\b",
    re.IGNORECASE,
)


def asks_about_assistant(query: str) -> bool:
    return bool(_ASKS_ASSISTANT.search(query))


# A request or a question of what may or should be done: "Can we take the bus…", "Should I
# apply?", "Write a reminder…", "Is it OK to…". Its answer is governed by what the user laid down.
_ASKS_FOR_ACTION = re.compile(
    r"^\W*(?:can|could|should|may|shall|would it be|is it (?:ok|okay|fine|alright|safe)|am i allowed|are we allowed|"
    r"write|draft|give me|make|recommend|suggest|plan|explain|rewrite|tidy|create|prepare|compose|translate|"
    r"help me)\b|\b(?:should|can|could|may) (?:i|we)\b",
    re.IGNORECASE,
)
# A statement that lays down a rule or a preference: "never", "always", "don't", "must", "rule",
# "strictly", "not allowed", "can't", "important", "prefer", "rather", "avoid".
_STATES_RULE = re.compile(
    r"\b(?:never|always|don't|don’t|do not|must|mustn't|rules?|strictly|not allowed|forbids?|forbidden|can't|"
    r"can’t|cannot|won't|won’t|important|prefer|rather|avoid)\b",
    re.IGNORECASE,
)


def asks_for_action(query: str) -> bool:
    return bool(_ASKS_FOR_ACTION.search(query))


def states_rule(content: str) -> bool:
    return bool(_STATES_RULE.search(content))


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
