"""Facts that hold one value at a time, stated with two values.

``one_value``: a name, an age ("I'm 34" / "I just turned 35"), a birthday, a birth date, year or
place, a blood type, a favourite *something*, a spouse or an *only* relative, a relationship status
("I'm single" / "I got married in June", "my husband"), working or not ("I'm retired" / "I work
full-time"), a preference ("tea over coffee" / "coffee over tea"). The ``quantity`` and
``schedule`` cues read their facts in quantities.py and schedules.py; all three are compared here.

A fact is read only from a present, unhedged clause: "I was 25 when…", "I'll be 35 next month",
"last year I had two cats", "in 2019 the bakery was closed on Mondays" state no current value.
"""

from __future__ import annotations

import re

from maintenance.conflict_detector import quantities, schedules
from maintenance.conflict_detector.finding import Fact, Finding
from maintenance.conflict_detector.lexicon import MONTHS, NUM, STOPWORDS, lemma, number
from maintenance.conflict_detector.subjects import Subject
from maintenance.conflict_detector.text import Clause, Statement

# --- the relations of a speaker, by pattern -------------------------------------------------------------------

_VALUE = r"([a-z0-9][a-z0-9' .-]{0,40}?)"
_END = r"(?=[,.;!]|\s+(?:and|but|who|which|since|because|from|at|in)\b|$)"
_FAMILY = r"(sister|brother|daughter|son|child|kid|wife|husband|partner|spouse|boss|manager|dog|cat|pet|car)"
_FAVOURITE = r"(colou?r|food|dish|movie|film|book|band|song|singer|sport|team|season|drink|city|animal|game|author)"
_RELATIONS = [
    (re.compile(r"\bmy name is " + _VALUE + _END), "name"),
    (re.compile(r"\bmy birthday is (?:on |in )?" + _VALUE + _END), "birthday"),
    (re.compile(r"\b(?:i was|user was) born (?:on|in the year) " + _VALUE + _END), "birth_date"),
    (re.compile(r"\b(?:i was|user was) born in ((?:19|20)\d\d)\b"), "birth_year"),
    (re.compile(r"\b(?:i was|user was) born in ([a-z][a-z .-]{1,30}?)" + _END), "birthplace"),
    (re.compile(r"\bmy (?:blood type|blood group) is " + _VALUE + _END), "blood_type"),
    (re.compile(r"\bmy (?:all[- ]time |absolute )?favou?rite " + _FAVOURITE + r" (?:is|was) (?:the )?" + _VALUE + _END),
     "favourite"),
    (re.compile(r"\bmy (only )?" + _FAMILY + r"(?:'s name)?(?: is| was|,)? (?:called |named )?([a-z][a-z-]{1,20})\b"),
     "family"),
]  # fmt: skip
_ONE_VALUED_FAMILY = {"wife", "husband", "spouse"}
# Values that are not names: "my sister is visiting", "my dog is sick".
_NOT_A_VALUE = {
    "visiting", "coming", "going", "sick", "ill", "happy", "sad", "here", "there", "home", "away", "older", "younger",
    "tall", "short", "great", "fine", "busy", "late", "early", "moving", "getting", "also", "too", "still", "a", "an",
    "the", "my", "very", "so", "not", "really", "doing", "in", "at", "on", "and", "who", "just", "always", "never",
    "retired", "pregnant", "married", "staying", "living", "working", "studying", "graduating", "turning", "back",
    "loves", "likes", "hates", "lives", "works", "starts", "has", "had", "died", "was", "will", "would", "can",
    "does", "did", "gets", "got", "makes", "takes", "plays", "called", "named", "with", "single", "divorced",
    "engaged", "of",
}  # fmt: skip


def _relations(text: str) -> dict[tuple, tuple[str, bool]]:
    """{(relation, detail): (value, one-valued)} stated in the normalised ``text``."""
    found: dict[tuple, tuple[str, bool]] = {}
    for pattern, name in _RELATIONS:
        for match in pattern.finditer(text):
            groups = match.groups()
            if name == "family":
                only, kind, value = groups
                value = value.strip()
                if value.split()[0] in _NOT_A_VALUE or re.match(r"\d", value) or lemma(value) in _NUMBER_WORDS:
                    continue
                found[(name, kind)] = (value, bool(only) or kind in _ONE_VALUED_FAMILY)
            elif name == "favourite":
                kind, value = groups
                found[(name, kind.replace("color", "colour"))] = (value.strip(), True)
            else:
                value = groups[-1].strip()
                if value.split()[0] in _NOT_A_VALUE or (name == "birthplace" and value.split()[0] in MONTHS):
                    continue
                found[(name,)] = (value, True)
    return found


_NUMBER_WORDS = {"one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"}


def _same_value(x: str, y: str) -> bool:
    tx, ty = set(x.split()) - STOPWORDS, set(y.split()) - STOPWORDS
    return x == y or x.startswith(y) or y.startswith(x) or bool(tx and ty and (tx <= ty or ty <= tx))


def _relation_conflict(a: Statement, b: Statement) -> Finding | None:
    ra, rb = (s.memo["relations"] if "relations" in s.memo else s.memo.setdefault("relations", _relations(s.text))
              for s in (a, b))  # fmt: skip
    for key in ra.keys() & rb.keys():
        (va, only_a), (vb, only_b) = ra[key], rb[key]
        if not (only_a or only_b) or _same_value(va, vb):
            continue
        what = " ".join(key).replace("_", " ").replace("family ", "").replace("favourite ", "favourite ")
        return Finding("one_value", f"Two values for a one-valued fact ({what}): “{va}” and “{vb}”.", 0.9)
    return None


# --- facts read clause by clause ----------------------------------------------------------------------------


_AGE = [
    re.compile(r"^(?:am|is|are) (?:now |just |already |currently |only )?" + NUM +
               r"(?: years?(?: old)?| yrs?(?: old)?)?(?: now| today| this year)?(?: and\b.*| but\b.*)?$"),
    re.compile(r"^(?:just |recently |finally |only )?turned " + NUM + r"(?: years?(?: old)?)?"
               r"(?: in [a-z]+| last [a-z]+|"
               r" on [a-z0-9 ]+| today| this year| yesterday)?(?: and\b.*| but\b.*)?$"),
    re.compile(r"^(?:am|is) aged " + NUM + r"\b"),
]  # fmt: skip


def _age(clause: Clause) -> Fact | None:
    body = " ".join(clause.body)
    if clause.subject is not None and clause.subject.kind == "speaker":
        # "I'm a 34-year-old nurse", "I celebrated my 50th birthday", "my age is 34"
        match = re.match(r"^(?:am|is) an? (\d{1,3})-years?-old\b", body) or re.search(
            r"^(?:just |recently )?(?:celebrated|had) (?:my|our) (\d{1,3}) ?(?:st|nd|rd|th) birthday\b", body
        )
        if match:
            return Fact(clause.subject, ("age",), int(match.group(1)), f"{match.group(1)} years old")
    if clause.subject is not None and clause.subject.np == ("age",) and clause.subject.owner in ("speaker", "we"):
        match = re.match(r"^is " + NUM + r"\b", body)
        if match and number(match.group(1)) is not None:
            value = int(number(match.group(1)))
            return Fact(Subject("speaker"), ("age",), value, f"{value} years old")
    for pattern in _AGE:
        match = pattern.match(body)
        if match:
            value = number(match.group(1))
            if value is not None and 0 < value < 125 and value == int(value):
                return Fact(clause.subject, ("age",), int(value), f"{int(value)} years old")
    return None


# Relationship status, and which two cannot both hold now.
_STATUS_CONFLICTS = {
    "single": {"married", "engaged", "in a relationship"},
    "married": {"single", "divorced", "widowed", "not married", "never married", "engaged"},
    "divorced": {"married", "never married"},
    "widowed": {"married", "never married"},
    "engaged": {"single", "married"},
    "in a relationship": {"single"},
    "never married": {"married", "divorced", "widowed", "formerly married"},
    "not married": {"married"},
    "formerly married": {"never married"},
}
_STATUS_WORDS = r"(single|married|divorced|engaged|widowed|separated|a widow|a widower|a bachelor)"
_STATUS = [
    (re.compile(r"^(?:am|are|is) (?:now |happily |still |currently |recently |newly |just |legally )?" + _STATUS_WORDS +
                r"\b"), None),
    (re.compile(r"^(?:am|are|is) not (?:married|engaged)\b"), "not married"),
    (re.compile(r"^(?:just |recently |finally |also )?got (married|divorced|engaged|separated)\b"), None),
    (re.compile(r"^(?:have|has) (?:now |just )?been (married|divorced|engaged|separated|single)\b"), None),
    (re.compile(r"^(?:have |has )?never (?:been |got |gotten )?married\b"), "never married"),
    (re.compile(r"^(?:am|are|is) in a relationship\b"), "in a relationship"),
    (re.compile(r"^(?:have|has) an? (wife|husband|spouse)\b"), "married"),
    (re.compile(r"^(?:have|has) an? (girlfriend|boyfriend)\b"), "in a relationship"),
    (re.compile(r"^married [a-z]+"), "married"),
]  # fmt: skip
_STATUS_NAMES = {"a widow": "widowed", "a widower": "widowed", "separated": "divorced", "a bachelor": "single"}
_POSSESSIVE_STATUS = [
    (re.compile(r"\bmy (?:wife|husband|spouse)\b"), "married"),
    (re.compile(r"\bmy fianc[eé]e?\b"), "engaged"),
    (re.compile(r"\bmy (?:girlfriend|boyfriend)\b"), "in a relationship"),
    (re.compile(r"\bmy ex\b|\bmy ex-(?:wife|husband|partner)\b|\bmy former (?:wife|husband)\b"), "formerly married"),
    (re.compile(r"\bmy late (?:wife|husband)\b|\bmy (?:wife|husband) (?:died|passed away|passed)\b"), "widowed"),
]


def _status(statement: Statement) -> list[Fact]:
    speaker = Subject("speaker")
    found = []
    for clause in statement.clauses:
        if clause.subject is None or clause.subject.kind not in ("speaker", "we") or clause.subject.np:
            continue
        body = " ".join(clause.body)
        for pattern, value in _STATUS:
            match = pattern.match(body)
            if match:
                status = value or _STATUS_NAMES.get(match.group(1), match.group(1))
                found.append(Fact(speaker, ("status",), status, status))
                break
    if not re.search(r"\b(?:died|passed away|late|ex|former|divorced|widowed|separated)\b", statement.text):
        for pattern, status in _POSSESSIVE_STATUS[:3]:
            if pattern.search(statement.text):
                found.append(Fact(speaker, ("status",), status, status))
    for pattern, status in _POSSESSIVE_STATUS[3:]:
        if pattern.search(statement.text):
            found.append(Fact(speaker, ("status",), status, status))
    return found


_WORK = [
    (re.compile(r"^(?:am|is) (?:now |currently |still |officially )?(retired|unemployed|jobless|out of work|between "
                r"jobs)\b"), None),
    (re.compile(r"^(?:am|is) not working\b"), "unemployed"),
    (re.compile(r"^(?:work|works) (?:full-time|\d+ hours a week|[a-z]+ days a week)"), "working full-time"),
    (re.compile(r"^(?:work|works) (?:as an? |at |for |in an? |part-time|from home|remotely|in the office)"), "working"),
    (re.compile(r"^(?:have|has) an? (?:full-time |part-time |new |steady )?job\b"), "working"),
]  # fmt: skip
_WORK_CONFLICTS = {
    "retired": {"working full-time"},
    "unemployed": {"working", "working full-time"},
    "working": {"unemployed"},
    "working full-time": {"unemployed", "retired"},
}


def _work(statement: Statement) -> list[Fact]:
    found = []
    for clause in statement.clauses:
        if clause.subject is None or clause.subject.kind != "speaker" or clause.negated:
            continue
        body = " ".join(clause.body)
        for pattern, value in _WORK:
            match = pattern.match(body)
            if match:
                work = value or match.group(1).replace("jobless", "unemployed").replace("out of work", "unemployed")
                work = "unemployed" if work == "between jobs" else work
                if re.search(r"\bas an? ", body) and work == "working" and "part-time" not in body:
                    work = "working full-time" if "full-time" in body else "working"
                found.append(Fact(Subject("speaker"), ("work",), work, work))
                break
    return found


_PREFER = re.compile(
    r"\bprefer ([a-z]+(?: [a-z]+)?) (?:over|to|more than|rather than|instead of) ([a-z]+(?: [a-z]+)?)\b"
)


def _preference(statement: Statement) -> list[Fact]:
    found = []
    for clause in statement.clauses:
        if clause.subject is None or clause.negated:
            continue
        match = _PREFER.search(" ".join(clause.body))
        if match:
            x, y = (lemma(w) for w in (match.group(1).split()[-1], match.group(2).split()[0]))
            found.append(Fact(clause.subject, ("prefer", frozenset((x, y))), (x, y),
                              f"{match.group(1)} over {match.group(2)}"))  # fmt: skip
    return found


# --- comparing -----------------------------------------------------------------------------------------------


def facts(statement: Statement) -> list[Fact]:
    if "facts" not in statement.memo:
        statement.memo["facts"] = _facts(statement)
    return statement.memo["facts"]


def _facts(statement: Statement) -> list[Fact]:
    if statement.hedged or statement.future:
        return []
    found: list[Fact] = []
    for clause in statement.clauses:
        if clause.subject is None:
            continue
        if not statement.dated:
            if not clause.negated and (age := _age(clause)):
                found.append(age)
            found += quantities.quantities(clause)
        found += schedules.schedule(clause)
    found += _status(statement) + _work(statement) + _preference(statement)
    return found


def _comparable(x: Fact, y: Fact) -> bool:
    if not x.subject.same(y.subject):
        return False
    if x.attribute[0] in ("open_days", "closed_days", "event_days", "time"):
        return y.attribute[0] in ("open_days", "closed_days", "event_days", "time")
    return x.attribute == y.attribute


def _conflict(x: Fact, y: Fact) -> Finding | None:
    what = x.attribute[0]
    if what in ("open_days", "closed_days", "event_days", "time"):
        if schedules.conflict(x, y):
            return Finding("schedule", f"Two schedules for one thing: “{x.shown}” and “{y.shown}”.", 0.85)
        return None
    if what == "age" and x.value != y.value:
        return Finding("one_value", f"Two ages: {x.shown} and {y.shown}.", 0.85)
    if what == "status" and y.value in _STATUS_CONFLICTS.get(x.value, ()):
        return Finding("one_value", f"Two relationship statuses: “{x.shown}” and “{y.shown}”.", 0.85)
    if what == "work" and y.value in _WORK_CONFLICTS.get(x.value, ()):
        return Finding("one_value", f"Working or not: “{x.shown}” and “{y.shown}”.", 0.8)
    if what == "prefer" and x.value != y.value:
        return Finding("one_value", f"Opposite preferences: “{x.shown}” and “{y.shown}”.", 0.85)
    if what == "quantity" and quantities.different_amounts(x, y):
        return Finding("quantity", f"Two amounts for the same thing: “{x.shown}” and “{y.shown}”.", 0.8)
    return None


def one_value(a: Statement, b: Statement) -> Finding | None:
    """The first fact of ``a`` and ``b`` that two values contradict (any of the three codes)."""
    finding = _relation_conflict(a, b)
    if finding:
        return finding
    fb = facts(b)
    for x in facts(a):
        for y in fb:
            if _comparable(x, y) and (finding := _conflict(x, y)):
                return finding
    return None
