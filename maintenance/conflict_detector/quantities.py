"""The ``quantity`` cue: the same present habit or possession counted twice ("two cups of coffee
a day" / "five cups of coffee a day"; "I have two kids" / "I have three kids"). Durations ("for
nine days"), dates, times, bounds ("at least 3") and past amounts are not counts of the present."""

from __future__ import annotations

import re

from maintenance.conflict_detector.finding import Fact
from maintenance.conflict_detector.lexicon import DAYS, MONTHS, NEGATORS, NUM, STOPWORDS, lemma, number
from maintenance.conflict_detector.text import Clause

_PERIOD = re.compile(r"\b(?:a|per|every|each) (day|night|week|month|year|morning|evening|weekend|weekday|afternoon)\b"
                     r"|\b(daily|weekly|monthly|nightly|yearly)\b")  # fmt: skip
_PERIOD_NAMES = {"daily": "day", "weekly": "week", "monthly": "month", "nightly": "night", "yearly": "year"}
_DURATION = {
    lemma(unit): minutes
    for unit, minutes in (("minute", 1), ("min", 1), ("hour", 60), ("hr", 60), ("day", 1440), ("week", 10080))
}
_NOT_UNITS = {"am", "pm", "years", "year", "old", "o", "clock", "percent", "times", "time"} | set(MONTHS)
_BEFORE_NOT_A_COUNT = {"at", "from", "to", "until", "till", "on", "in", "since", "by", "before", "after", "of",
                       "than", "for", "within", "streak", "series", "number", "no", "room", "gate", "platform",
                       "bus", "line", "route", "chapter", "page", "level", "version", "season"}  # fmt: skip
# A clause without a subject of its own that starts with one of these is a phrase of the last one.
_NOT_A_PREDICATE = {"at", "for", "about", "around", "mainly", "mostly", "with", "in", "on", "from", "to", "as",
                    "by", "and", "or", "including", "especially", "usually", "often", "which", "who"}  # fmt: skip
_APPROXIMATE = {"about", "around", "roughly", "approximately", "nearly", "almost", "maybe", "some", "over", "under",
                "up"}  # fmt: skip


def quantities(clause: Clause) -> list[Fact]:
    body = clause.body
    if not body or clause.negated or clause.past or (clause.inherited and body[0] in _NOT_A_PREDICATE):
        return []
    text = " ".join(body)
    if re.match(r"^(?:am|is|are) " + NUM + r"(?: years?(?: old)?)?(?: and\b.*| but\b.*)?$", text):
        return []  # an age
    period_match = _PERIOD.search(text)
    period = (period_match.group(1) or _PERIOD_NAMES[period_match.group(2)]) if period_match else ""
    period_words = set(period_match.group(0).split()) if period_match else set()
    found = []
    for i, token in enumerate(body):
        unit_at = i + 1
        if token in ("once", "twice"):
            value, unit, unit_at = float(number(token)), "time", i
        else:
            value = number(token, articles=True)
            if value is None or unit_at >= len(body):
                continue
            unit = body[unit_at]
            if token in ("a", "an"):
                if not (
                    lemma(unit) in _DURATION
                    or (period and unit_at + 1 < len(body) and body[unit_at + 1] in ("a", "per", "every", "each"))
                ):
                    continue
                if period_match and period_match.start() <= len(" ".join(body[:i])) + 1:
                    continue  # the "a" of "a day"
            if unit in ("times",):
                unit = "time"
        before = [t for t in body[max(0, i - 3) : i] if t not in _APPROXIMATE]
        if before and before[-1] in _BEFORE_NOT_A_COUNT:
            continue  # a date, a time, a duration ("for 9 days"), a comparison
        if re.search(
            r"\bat least$|\bat most$|\bmore than$|\bless than$|\bfewer than$|\bup to$|\bover$|\bunder$",
            " ".join(body[:i]),
        ):
            continue  # a bound, not an amount
        if unit != "time" and (
            not unit.isalpha()
            or unit in _NOT_UNITS
            or unit in STOPWORDS
            or unit in NEGATORS
            or unit.rstrip("s") in DAYS
        ):
            continue
        unit_lemma = lemma(unit) if unit != "time" else "time"
        if unit_lemma in _DURATION:
            value, unit_lemma = value * _DURATION[unit_lemma], "minute"
        obj = ""
        if unit_at + 2 < len(body) and body[unit_at + 1] == "of":
            obj = lemma(body[unit_at + 2])
        skip = {i, unit_at} | ({unit_at + 1, unit_at + 2} if obj else set())
        key = frozenset(
            lemma(t) for j, t in enumerate(body)
            if j not in skip and t not in STOPWORDS and t not in _APPROXIMATE and t not in period_words
            and t not in ("every", "per", "each", "a", "an") and number(t) is None
        ) | ({obj} if obj else set())  # fmt: skip
        approximate = bool(set(body[max(0, i - 2) : i]) & _APPROXIMATE)
        shown = f"{body[i]} {body[unit_at]}" if unit_at != i else body[i]
        found.append(Fact(clause.subject, ("quantity", key, unit_lemma, period), value, shown, approximate))
    return found


def different_amounts(x: Fact, y: Fact) -> bool:
    a, b = float(x.value), float(y.value)
    if x.approximate or y.approximate:
        return abs(a - b) / max(a, b, 1e-9) > 0.25
    return a != b
