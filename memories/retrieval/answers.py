"""The kind of value a question asks for, and the best hits that carry one.

"How old is Tom?" is answered by "Our son Tom is 7 and loves dinosaurs.", which the vectors may
place below "Tom is allergic to cats." (both are about Tom; "old" is in neither). What the answer
must hold is plain from the question's opening words: an age or a count for "how old" / "how
many", an amount for "how much", a length of time for "how long", a frequency for "how often", a
clock time for "what time" (:func:`wanted`). Each of the ``answer_type_pool`` best hits whose
text holds a value of that kind gains ``answer_type_boost`` (:func:`favour_values`), the others
keep their score: the prior re-orders what relevance already found, it finds nothing new.

"When…" is the time cue's (``date_cue_boost``, :mod:`memories.retrieval.fusion`), which every
candidate carrying a date or a time expression gains; "what time" asks for the clock, which
only a time of day answers ("9:30", "5pm", "noon").

Regular expressions over the pool's texts, no model: a few hundred microseconds a search.
"""

from __future__ import annotations

import re

from engram_site import tracing
from memories import ranking
from memories.retrieval.hits import Hit

# The question's kind of answer, by its opening words ("How old…", "Roughly how many…", "At what
# time…"), as the time cue reads "When…": a question whose value is asked in a later clause
# ("Which café buys my mugs, and how many did they order?") wants first what the opening asks.
_OPENING = r"^\W*(?:(?:so|and|but|ok|okay|then|roughly|approximately|about|exactly|for|at|after|by|in|until)\s+)*"
_KINDS = (
    # "How long ago…" asks when (the time cue's); "how long" alone a duration.
    ("duration", re.compile(rf"{_OPENING}how long\b(?! ago\b)", re.IGNORECASE)),
    ("frequency", re.compile(rf"{_OPENING}how (?:often|frequently)\b", re.IGNORECASE)),
    ("count", re.compile(rf"{_OPENING}(?:how (?:old|many)\b|what age\b)", re.IGNORECASE)),
    ("amount", re.compile(rf"{_OPENING}(?:how much\b|how expensive\b|what (?:is the )?price\b)", re.IGNORECASE)),
    ("clock", re.compile(rf"{_OPENING}(?:(?:what|which) time\b(?! ?zones?\b)|what hour\b)", re.IGNORECASE)),
)

_MONTH = r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?"
# A day of a date ("June 14", "14th of May") is no count: taken out before counting.
_DAY_OF_DATE = re.compile(
    rf"\b{_MONTH} \d{{1,2}}(?:st|nd|rd|th)?\b|\b\d{{1,2}}(?:st|nd|rd|th)? (?:of )?{_MONTH}(?!\w)", re.IGNORECASE
)
_NUMBER_WORDS = (
    "one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen|"
    "seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred|thousand|"
    "million|billion|dozen|dozens|couple|twins|triplets|twice|thrice"
)
# A number that counts: digits (not a year, not a time of day, not inside a date like
# 2024-05-01) or a number word; "a few" and "several" answer no "how many".
_COUNT = re.compile(
    r"(?<![\w:/.-])(?!(?:19|20)\d\d(?!\d))\d+(?:[.,]\d+)*(?![\d:/-]|\s?(?:am|pm|a\.m\.|p\.m\.)(?!\w))"
    rf"|\b(?:{_NUMBER_WORDS})\b|\byears? old\b",
    re.IGNORECASE,
)
# An amount: a currency, or a unit of money, weight, volume or share; any count too.
_AMOUNT = re.compile(
    r"[$€£¥₹]|\b(?:dollars?|bucks|euros?|pounds?|cents?|quid|usd|eur|gbp|kg|kilos?|grams?|lbs?|litres?|liters?|"
    r"ml|percent|per cent)\b|%",
    re.IGNORECASE,
)
_UNITS = r"(?:second|sec|minute|min|hour|hr|day|night|week|weekend|month|year|yr|decade|semester)s?"
# A length of time: a number (or "a", "an", "half an") with a unit of time, "since…", "all day";
# "how long is the kitchen island?" asks a length too: a number with a unit of length or of text.
_DURATION = re.compile(
    rf"\b(?:\d+(?:[.,]\d+)?|a|an|half an?|a couple of|a few|several|{_NUMBER_WORDS})[ -]{_UNITS}\b"
    r"|\bsince\b|\ball (?:day|night|week|month|year)\b|\bages\b|\bforever\b"
    r"|\b\d+(?:[.,]\d+)* ?(?:mm|cm|m|km|metres?|meters?|ft|feet|foot|inch|inches|miles?|words|pages|lines)\b",
    re.IGNORECASE,
)
# How often: every…, daily, once, twice, N times a…, "a day", "per week", on Mondays.
_FREQUENCY = re.compile(
    r"\b(?:every|each|daily|nightly|weekly|fortnightly|monthly|yearly|annually|hourly|once|twice|thrice|"
    r"always|never|usually|rarely|sometimes|occasionally)\b|\btimes? (?:a|an|per|each|every)\b"
    r"|\b(?:a|an|per) (?:day|night|week|month|year|hour)\b"
    r"|\b(?:mondays|tuesdays|wednesdays|thursdays|fridays|saturdays|sundays|weekdays|weekends|mornings|"
    r"evenings|nights)\b",
    re.IGNORECASE,
)
# A time of day: 9:30, 5pm, 10 a.m., noon, midnight, o'clock.
_CLOCK = re.compile(
    r"\b[0-2]?\d[:h][0-5]\d\b|\b1?\d ?(?:am|pm|a\.m\.|p\.m\.)(?!\w)|\b(?:noon|midday|midnight|o'clock|o’clock)\b",
    re.IGNORECASE,
)
_PATTERNS: dict[str, tuple[re.Pattern, ...]] = {
    "count": (_COUNT,),
    "amount": (_AMOUNT, _COUNT),
    "duration": (_DURATION,),
    "frequency": (_FREQUENCY,),
    "clock": (_CLOCK,),
}


def kind_of_answer(query: str) -> str | None:
    """The kind of value the question asks for (``count``, ``amount``, ``duration``,
    ``frequency``, ``clock``), or None."""
    for kind, pattern in _KINDS:
        if pattern.search(query):
            return kind
    return None


def carries(content: str, kind: str) -> bool:
    """Whether ``content`` holds a value of ``kind``."""
    if kind in ("count", "amount"):
        content = _DAY_OF_DATE.sub(" ", content)
    return any(pattern.search(content) for pattern in _PATTERNS[kind])


def wanted(query: str, config: ranking.RankingConfig) -> str | None:
    """The kind of answer to favour for ``query`` under ``config``: None when the option is off."""
    return kind_of_answer(query) if config.answer_type_boost > 0 else None


@tracing.traced("engram.search.answer_type")
def favour_values(hits: list[Hit], kind: str, config: ranking.RankingConfig) -> list[Hit]:
    """``hits`` (best first) with those of the ``answer_type_pool`` best that carry a value of
    ``kind`` raised by ``answer_type_boost``, and re-ordered; ``explain`` shows the factor as the
    ``answer_type`` boost."""
    size = config.answer_type_pool
    factor = 1.0 + config.answer_type_boost
    raised = False
    for hit in hits[:size]:
        if carries(hit.row["content"], kind):
            hit.score *= factor
            raised = True
            if hit.explain:
                hit.explain["boosts"]["answer_type"] = round(factor, 4)
                hit.explain["answer_type"] = kind
    if not raised:
        return hits
    return sorted(hits[:size], key=lambda h: (-h.score, h.id)) + hits[size:]
