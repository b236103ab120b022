"""Relative time expressions in a memory's text, resolved against the time it was written.

"Last Tuesday I ran my first 10k", written on Tuesday 9 May 2023, happened on Tuesday 2 May
2023; "next month" in that memory is June 2023. A memory's key document spells these dates out
beside the expressions (:func:`annotate`), so a question that names the date ("what happened on
2 May 2023?") finds the memory by it, in words and in its vector. The words a *question's*
relative expressions imply are :func:`memories.search_terms.query_date_terms`'.

Only expressions whose meaning the writing time fixes are resolved: yesterday, today,
tomorrow, last/this/next weekday, week, weekend, month, year or season, "N days (weeks,
months, years) ago", "in N days", and a month named without its year ("in May", "on May 2").
A bare weekday ("on Friday") is left alone: past or coming, it cannot be told.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta

MONTHS = list(calendar.month_name)[1:]
WEEKDAYS = list(calendar.day_name)
_WEEKDAY_INDEX = {name.lower(): i for i, name in enumerate(WEEKDAYS)}
_MONTH_INDEX = {name.lower(): i + 1 for i, name in enumerate(MONTHS)}
_MONTH_INDEX |= {name[:3].lower(): i + 1 for i, name in enumerate(MONTHS)} | {"sept": 9}
_SEASONS = {"spring": 3, "summer": 6, "fall": 9, "autumn": 9, "winter": 12}
_NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a few": 3, "few": 3, "a couple of": 2, "a couple": 2,
    "couple of": 2, "several": 3,
}  # fmt: skip
_UNIT_DAYS = {"day": 1, "week": 7, "fortnight": 14, "month": 30, "year": 365}

_COUNT = (
    r"(\d{1,3}|a couple of|a couple|couple of|a few|few|several|an|a|one|two|three|four|five|six|seven|eight|nine"
    r"|ten|eleven|twelve)"
)
_UNIT = r"(day|week|fortnight|month|year)s?"
_WEEKDAY = "|".join(_WEEKDAY_INDEX)
_PERIOD = r"week|weekend|month|year|summer|winter|spring|fall|autumn"
_MONTH_NAME = "|".join(MONTHS) + r"|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec"

_EXPRESSION = re.compile(
    r"\b(?:"
    r"(?P<day_before>the day before yesterday)|(?P<day_after>the day after tomorrow)"
    rf"|(?P<ago>{_COUNT} {_UNIT} ago)"
    rf"|(?P<ahead>in {_COUNT} {_UNIT})\b(?! (?:of|from|before|after|ago))"
    r"|(?P<relday>yesterday|today|tonight|tomorrow|last night|this (?:morning|afternoon|evening))"
    rf"|(?P<relweekday>(?:last|this past|this|next|coming) (?:{_WEEKDAY}))"
    rf"|(?P<relperiod>(?:last|this past|this|next|past|previous|coming) (?:{_PERIOD}))"
    r")\b",
    re.IGNORECASE,
)
# A month named without its year: "in May", "on May 2", "2nd of June" (capitalised: "may" is a verb).
_MONTH = re.compile(
    rf"\b(?:(?P<day1>\d{{1,2}})(?:st|nd|rd|th)? (?:of )?)?(?P<month>{_MONTH_NAME})\b"
    # Not a date that names its year, whichever way round: "June 15, 2022", "June 15th 2022".
    rf"(?!\.? \d{{1,2}}(?:st|nd|rd|th)?,? \d{{4}})"
    rf"(?:\.? (?P<day2>\d{{1,2}})(?:st|nd|rd|th)?\b)?(?!,? \d{{4}})(?!\w)"
)
# "May" opening a sentence is the verb ("May I ask…") unless a day follows.
_SENTENCE_START = re.compile(r"(?:^|[.!?]\s+)$")


@dataclass(frozen=True)
class Resolved:
    """One expression of the text and what it means."""

    start: int
    end: int
    expression: str
    meaning: str  # "Tuesday 2 May 2023", "the week of Monday 1 May 2023", "June 2023", "2022"


def day_text(day: date) -> str:
    return f"{WEEKDAYS[day.weekday()]} {day.day} {MONTHS[day.month - 1]} {day.year}"


def _week_text(day: date) -> str:
    return f"the week of {day_text(day - timedelta(days=day.weekday()))}"


def _weekend_text(saturday: date) -> str:
    return f"the weekend of {day_text(saturday)}"


def _month_text(year: int, month: int) -> str:
    return f"{MONTHS[month - 1]} {year}"


def _add_months(day: date, months: int) -> tuple[int, int]:
    index = day.year * 12 + day.month - 1 + months
    return index // 12, index % 12 + 1


def _count(word: str) -> int:
    word = word.lower()
    return int(word) if word.isdigit() else _NUMBERS[word]


def _shifted(day: date, amount: int, unit: str) -> str:
    """``amount`` units from ``day`` (negative: before), at the precision the unit has."""
    unit = unit.lower()
    if unit == "day":
        return day_text(day + timedelta(days=amount))
    if unit in ("week", "fortnight"):
        return _week_text(day + timedelta(days=amount * _UNIT_DAYS[unit]))
    if unit == "month":
        return _month_text(*_add_months(day, amount))
    return str(day.year + amount)


def _weekday(day: date, which: str, name: str) -> str:
    target = _WEEKDAY_INDEX[name.lower()]
    if which in ("last", "this past"):
        back = (day.weekday() - target) % 7 or 7
        return day_text(day - timedelta(days=back))
    if which in ("next", "coming"):
        ahead = (target - day.weekday()) % 7 or 7
        return day_text(day + timedelta(days=ahead))
    return day_text(day - timedelta(days=day.weekday()) + timedelta(days=target))  # this: of this week


def _period(day: date, which: str, unit: str) -> str:
    offset = {"last": -1, "this past": -1, "past": -1, "previous": -1, "this": 0, "next": 1, "coming": 1}[which]
    if unit == "week":
        return _week_text(day + timedelta(weeks=offset))
    if unit == "weekend":
        monday = day - timedelta(days=day.weekday())
        return _weekend_text(monday + timedelta(days=5 + 7 * offset))
    if unit == "month":
        return _month_text(*_add_months(day, offset))
    if unit == "year":
        return str(day.year + offset)
    season = "fall" if unit == "autumn" else unit
    first = _SEASONS[season]
    # The season's year: winter is named by the year it starts in (December).
    current = day.year if season != "winter" or day.month == 12 else day.year - 1
    started = day.month >= first if season != "winter" else True
    if offset < 0:
        ended = day.month > first + 2 if season != "winter" else day.month in range(3, 12)
        year = current if ended else current - 1
    elif offset == 0:
        year = current
    else:
        year = current + 1 if started else current
    return f"{season} {year}"


def _nearest_month(day: date, month: int, day_of_month: int | None) -> str:
    """A month named without its year: the occurrence nearest the writing time."""
    candidates = [
        (abs((year * 12 + month) - (day.year * 12 + day.month)), year)
        for year in (day.year - 1, day.year, day.year + 1)
    ]
    year = min(candidates)[1]
    if day_of_month is not None:
        try:
            return day_text(date(year, month, day_of_month))
        except ValueError:
            pass
    return _month_text(year, month)


def resolve(text: str, moment: datetime | date | None) -> list[Resolved]:
    """The relative time expressions of ``text`` and what they mean, written at ``moment``."""
    if moment is None or not text:
        return []
    day = moment.date() if isinstance(moment, datetime) else moment
    found: list[Resolved] = []
    for match in _EXPRESSION.finditer(text):
        phrase = match.group(0)
        lower = phrase.lower()
        if match.group("day_before"):
            meaning = day_text(day - timedelta(days=2))
        elif match.group("day_after"):
            meaning = day_text(day + timedelta(days=2))
        elif match.group("ago"):
            amount, unit = re.match(rf"{_COUNT} {_UNIT}", lower).groups()
            meaning = _shifted(day, -_count(amount), unit)
        elif match.group("ahead"):
            amount, unit = re.match(rf"in {_COUNT} {_UNIT}", lower).groups()
            meaning = _shifted(day, _count(amount), unit)
        elif match.group("relday"):
            shift = {"yesterday": -1, "last night": -1, "tomorrow": 1}.get(lower, 0)
            meaning = day_text(day + timedelta(days=shift))
        elif match.group("relweekday"):
            which, name = lower.rsplit(" ", 1)
            meaning = _weekday(day, which, name)
        else:
            which, unit = lower.rsplit(" ", 1)
            meaning = _period(day, which, unit)
        found.append(Resolved(match.start(), match.end(), phrase, meaning))
    taken = [(r.start, r.end) for r in found]
    for match in _MONTH.finditer(text):
        if any(start < match.end() and match.start() < end for start, end in taken):
            continue
        name, day_number = match.group("month"), match.group("day1") or match.group("day2")
        if name == "May" and not day_number and _SENTENCE_START.search(text[: match.start()]):
            continue
        meaning = _nearest_month(day, _MONTH_INDEX[name.lower()], int(day_number) if day_number else None)
        found.append(Resolved(match.start(), match.end(), match.group(0), meaning))
    found.sort(key=lambda r: r.start)
    return found


def annotate(text: str, moment: datetime | date | None) -> tuple[str, list[str]]:
    """``text`` with each relative expression followed by what it means in brackets
    ("last Tuesday (Tuesday 2 May 2023)"), and those meanings in order."""
    resolved = resolve(text, moment)
    if not resolved:
        return text, []
    out, at = [], 0
    for r in resolved:
        out.append(text[at : r.end])
        out.append(f" ({r.meaning})")
        at = r.end
    out.append(text[at:])
    return "".join(out), [r.meaning for r in resolved]
