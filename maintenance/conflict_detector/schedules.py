"""The ``schedule`` cue: the days or hours a place is open, or when a recurring event or one's own
routine is, stated twice ("open Monday to Friday" / "closed on Mondays"; "opens at 9" / "opens at
10 am"; "I go to bed at 10 every night" / "… at midnight every night")."""

from __future__ import annotations

import re

from maintenance.conflict_detector.finding import Fact
from maintenance.conflict_detector.lexicon import DAYS, STOPWORDS, lemma
from maintenance.conflict_detector.text import Clause

_DAY_INDEX = {day: i for i, day in enumerate(DAYS)} | {day[:3]: i for i, day in enumerate(DAYS)}
_DAY = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|mon|tue|tues|wed|thu|thur|thurs|fri|sat|sun)s?"
_ALL = frozenset(range(7))
_WEEKDAYS = frozenset(range(5))
_WEEKEND = frozenset({5, 6})


def _day(word: str) -> int:
    word = word.rstrip("s") if word.endswith("s") and word[:-1] in _DAY_INDEX or word[:-1][:3] in _DAY_INDEX else word
    return _DAY_INDEX.get(word, _DAY_INDEX.get(word[:3], -1))


_EVERY_DAY = re.compile(
    r"\bevery ?day\b|\bdaily\b|\b24 ?/? ?7\b|\baround the clock\b|\b(?:seven|7) days(?: a week)?\b|\ball week\b|"
    r"\bthe whole week\b"
)


def _days(text: str) -> tuple[frozenset[int], bool] | None:
    """The days a text names and whether it names all of them that count ("Monday to Friday",
    "every day", "only on Saturdays", "every day except Sunday"); None if it names none."""
    exhaustive = bool(re.search(r"\bonly\b", text))
    days: set[int] = set()
    everything = _EVERY_DAY.search(text)
    if everything:
        days, exhaustive = set(_ALL), True
    for match in re.finditer(r"\b(" + _DAY + r")\s*(?:to|through|thru|till|until|-)\s*(" + _DAY + r")\b", text):
        start, end = _day(match.group(1)), _day(match.group(2))
        if start >= 0 and end >= 0:
            span = range(start, end + 1) if start <= end else [*range(start, 7), *range(0, end + 1)]
            days |= set(span)
            exhaustive = True
        text = text.replace(match.group(0), " ")
    except_match = re.search(r"\b(?:except|but not|apart from)(?: on)? (.*)", text)
    if except_match:
        excluded = {_day(w) for w in re.findall(_DAY, except_match.group(1))} - {-1}
        if "weekend" in except_match.group(1):
            excluded |= _WEEKEND
        text = text[: except_match.start()]
        if everything:
            days -= excluded
    for word in re.findall(r"\b" + _DAY + r"\b", text):
        if _day(word) >= 0:
            days.add(_day(word))
    if re.search(r"\bweekdays?\b|\bduring the week\b", text):
        days |= _WEEKDAYS
    if re.search(r"\bweekends?\b", text):
        days |= _WEEKEND
    return (frozenset(days), exhaustive) if days else None


_TIME = r"(\d{1,2}(?::\d{2})?(?: ?(?:am|pm|a\.m\.|p\.m\.))?|noon|midnight)"


def _minutes(text: str) -> frozenset[int]:
    """A clock time as minutes after midnight; "9" may be 9:00 or 21:00."""
    if text == "noon":
        return frozenset({720})
    if text == "midnight":
        return frozenset({0})
    match = re.match(r"(\d{1,2})(?::(\d{2}))?\s*(am|pm|a\.m\.|p\.m\.)?", text)
    hour, minute, half = int(match.group(1)), int(match.group(2) or 0), (match.group(3) or "").replace(".", "")
    if half == "pm" and hour < 12:
        return frozenset({(hour + 12) * 60 + minute})
    if half == "am":
        return frozenset({(hour % 12) * 60 + minute})
    if hour <= 12:
        return frozenset({(hour % 12) * 60 + minute, (hour % 12 + 12) * 60 + minute})
    return frozenset({hour * 60 + minute})


def _qualifier(text: str) -> frozenset:
    if re.search(r"\bholidays?\b", text):
        return frozenset({"holidays"})
    days = _days(text)
    return days[0] if days else frozenset()


_HABIT = re.compile(
    r"\b(?:every|each|usually|always|normally|daily|nightly|most days|weekdays|weekends|"
    r"(?:on )?(?:mon|tues|wednes|thurs|fri|satur|sun)days)\b"
)
_ROUTINE_IGNORED = {
    "every",
    "each",
    "usually",
    "always",
    "normally",
    "daily",
    "nightly",
    "morning",
    "evening",
    "night",
    "day",
    "afternoon",
    "weekday",
    "weekdays",
    "weekend",
    "weekends",
    "most",
    "on",
    "by",
}


def _routine(clause: Clause) -> list[Fact]:
    """The time of the speaker's own habit: "I go to bed at 10 every night" / "… at midnight every night"."""
    body = " ".join(clause.body)
    if clause.negated or clause.past or not _HABIT.search(body) or re.match(r"(?:am|is|are|was|were)\b", body):
        return []
    match = re.search(r"\bat " + _TIME + r"(?!\S)", body)
    if not match:
        return []
    act = [t for t in body[: match.start()].split() if t not in STOPWORDS and t not in _ROUTINE_IGNORED]
    if not act:
        return []
    key = frozenset(lemma(t) for t in act)
    qualifier = _qualifier(body[: match.start()] + " " + body[match.end() :])
    return [Fact(clause.subject, ("time", "routine", key, qualifier), _minutes(match.group(1)),
                 " ".join(act) + " at " + match.group(1))]  # fmt: skip


def schedule(clause: Clause) -> list[Fact]:
    subject = clause.subject
    if subject is not None and not subject.np and subject.kind in ("speaker", "we"):
        return _routine(clause)
    if subject is None:
        return []
    body = " ".join(clause.body)
    if re.match(r"(?:was|were|used|had|did)\b", body):
        return []
    found = []
    times = [(kind, match) for kind, pattern in (("opens at", r"\bopens? (?:at|from) " + _TIME),
                                                 ("closes at", r"\bcloses? (?:at|by) " + _TIME),
                                                 ("is at", r"^(?:is|are|starts|start|begins) at " + _TIME))
             for match in [re.search(pattern, body)] if match]  # fmt: skip
    for kind, match in times:
        rest = body[: match.start()] + " " + body[match.end() :]
        found.append(Fact(subject, ("time", kind, _qualifier(rest)), _minutes(match.group(1)),
                          f"{kind} {match.group(1)}"))  # fmt: skip
    open_match = re.match(r"^(?:is|are) (?:now |also |only |usually |normally |still )?open\b(.*)|"
                          r"^(?:now |also |only )?opens?\b(?! (?:at|from) \d)(.*)", body)  # fmt: skip
    closed_match = re.match(
        r"^(?:is|are) (?:now |also |always |usually |still )?closed\b(.*)|"
        r"^(?:does|do) not open\b(.*)|^(?:is|are) not open\b(.*)|^never opens?\b(.*)",
        body,
    )
    event_match = re.match(r"^(?:is|are|happens|happen|takes place|meets|meet|runs|run)\b(.*)", body)
    if open_match:
        tail = open_match.group(1) if open_match.group(1) is not None else open_match.group(2)
        days = _days(("only " if body.startswith(("is only", "are only", "only")) else "") + tail)
        if days:
            found.append(Fact(subject, ("open_days",), days[0], "open " + tail.strip(), exhaustive=days[1]))
    elif closed_match:
        tail = next(g for g in closed_match.groups() if g is not None)
        days = _days(tail)
        if days:
            found.append(Fact(subject, ("closed_days",), days[0], "closed " + tail.strip()))
    elif event_match and not times or (event_match and times and times[0][0] == "is at"):
        tail = event_match.group(1)
        if re.search(r"\b(?:every|on)\b", tail):
            days = _days(re.sub(r"^\s*at \S+( ?[ap]m)?", "", tail))
            if days:
                found.append(Fact(subject, ("event_days",), days[0], tail.strip(), exhaustive=True))
    return found


def conflict(x: Fact, y: Fact) -> bool:
    kinds = {x.attribute[0], y.attribute[0]}
    if kinds == {"open_days", "closed_days"}:
        return bool(x.value & y.value)
    if kinds == {"open_days"}:
        return (x.exhaustive and not y.value <= x.value) or (y.exhaustive and not x.value <= y.value)
    if kinds == {"event_days"}:
        return x.value != y.value
    if x.attribute[0] == "time" and x.attribute == y.attribute:
        return not (x.value & y.value)
    return False
