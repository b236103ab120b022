"""The same statement with opposite polarity: negated in one memory only ("I don't drink coffee
at all" / "I drink two cups of coffee every morning now"), or one word swapped for its opposite
("I love jazz" / "I hate jazz").

Clause by clause, for clauses about the same subject. A negation contradicts an affirmation when
everything the negated clause says is said by the affirmed one (which may say more: "two cups
… every morning"); a negation that says more ("… after 4 pm") is a narrower claim, left alone. A
change of habit ("I quit", "I stopped", "no longer") contradicts only what is said of the present,
"never" also what is said of the past ("I've never owned a car" / "I sold my car"), and a
statement dated to a past period ("as a child", "in 2019") contradicts nothing current.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from maintenance.conflict_detector.finding import Finding
from maintenance.conflict_detector.lexicon import HEDGES, NEGATORS, STOPWORDS, is_past_form, lemma
from maintenance.conflict_detector.subjects import Subject
from maintenance.conflict_detector.text import Clause, Statement

# When a change happened or how long it has held ("two years ago", "since 2019", "for three years").
_WHEN = re.compile(
    r"\b(?:[a-z0-9-]+ )?(?:years?|months?|weeks?|days?) ago\b|\blast (?:year|month|week|summer|winter|spring|autumn|"
    r"fall|january|february|march|april|may|june|july|august|september|october|november|december)\b|"
    r"\bin (?:19|20)\d\d\b|\bsince (?:19|20)\d\d\b|\bsince (?:last|the) [a-z]+\b|"
    r"\bfor (?:[a-z0-9-]+ )?(?:years?|months?|"
    r"weeks?)\b|\bin (?:january|february|march|april|may|june|july|august|september|october|november|december)\b"
)
_WHEN_WORDS = {lemma(w) for w in (
    "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "week", "weeks", "day", "days",
    "month", "months", "year", "years", "hour", "hours", "minute", "minutes", "time", "times", "morning", "evening",
    "night", "afternoon", "weekend", "today", "tonight", "yesterday", "tomorrow", "monday", "tuesday", "wednesday",
    "thursday", "friday", "saturday", "sunday", "long", "while", "ages", "since", "ago", "last", "next", "every",
)}  # fmt: skip
# Words a clause can hold without changing what it is about.
_IGNORED = STOPWORDS | HEDGES | {"start", "started", "starting", "began", "begin", "quit", "longer", "anymore",
                                 "get", "got", "back", "instead", "well", "fluently", "regularly",
                                 "usually"}  # fmt: skip
# After these, a clause names what it excludes or compares with ("tea instead of coffee").
_EXCLUDING = re.compile(r"\b(?:than|instead of|rather than|except|without|apart from|other than|not|no|never)\b")
# A word right before the shared object that makes it another thing ("decaf coffee").
_OTHER_THING = {"decaf", "decaffeinated", "non-alcoholic", "alcohol-free", "vegan", "veggie", "vegetarian", "fake",
                "faux", "plant-based", "oat", "soy", "almond", "low-fat", "sugar-free", "gluten-free", "toy",
                "virtual", "electric", "imaginary", "mock", "meatless", "dairy-free", "e-"}  # fmt: skip
# ... and words in the other memory that make a specific thing given up another one ("I quit my job" /
# "I started a new job").
_ANOTHER = {"new", "another", "second", "different", "other", "next", "third"}
# Verbs of state: a past state ("I had a car") is not contradicted by a present negation ("I don't
# have a car anymore"), a past action ("I drank coffee last night") is ("I don't drink coffee").
_STATE = {lemma(w) for w in ("have", "own", "be", "live", "know", "like", "love", "hate", "want", "need", "belong",
                             "prefer", "speak", "weigh")}  # fmt: skip
_HAVE, _OWN = lemma("have"), lemma("own")
_MEASURES = {"cup", "cups", "glass", "glasses", "bottle", "bottles", "pint", "pints", "mug", "mugs", "lot", "lots",
             "bit", "piece", "pieces", "slice", "slices", "bowl", "bowls", "plate", "plates", "kind", "kinds", "type",
             "couple", "pack", "packs", "can", "cans", "shot", "shots", "bag", "bags", "box", "pair", "pairs",
             "spoon", "spoonful", "handful", "portion", "serving", "bar", "bars", "pot", "litre", "liter"}  # fmt: skip
_DRINKS = {"coffee", "coffees", "tea", "teas", "beer", "beers", "wine", "cup", "cups", "glass", "juice", "soda",
           "latte",
           "espresso", "cappuccino", "cocktail", "cocktails", "pint", "pints", "smoothie", "drink", "drinks", "whisky",
           "coke", "milk"}  # fmt: skip
_MEALS = {"breakfast", "lunch", "dinner", "snack", "snacks", "meal", "pizza", "burger", "steak", "salad", "sandwich",
          "pasta", "dessert", "sushi", "meat", "fish", "chocolate", "cake", "sugar", "eggs", "egg",
          "bread"}  # fmt: skip
_PRONOUN_OBJECTS = {"it", "them", "that", "this", "him", "her", "those", "these", "one"}
# Kinds of thing: "I don't have any pets" is contradicted by "I have a dog".
_KIND_OF = {
    "pet": ("dog", "cat", "puppy", "kitten", "hamster", "rabbit", "parrot", "budgie", "goldfish", "tortoise",
            "turtle", "horse", "guinea", "ferret", "labrador", "lizard", "snake"),
    "sibling": ("brother", "sister", "twin", "half-brother", "half-sister"),
    "child": ("son", "daughter", "baby", "toddler", "stepson", "stepdaughter"),
    "instrument": ("guitar", "piano", "violin", "drum", "drums", "cello", "flute", "saxophone", "trumpet", "ukulele",
                   "clarinet", "harp", "bass", "keyboard", "accordion", "banjo"),
    "vehicle": ("car", "motorbike", "motorcycle", "van", "truck", "scooter"),
}  # fmt: skip
_KINDS = {lemma(member): lemma(kind) for kind, members in _KIND_OF.items() for member in members}
# Acquiring something: having it now ("I bought a new TV"); losing it: having had it ("I sold my car").
_ACQUIRE = re.compile(r"\b(?:bought|buy|buys|adopted|adopt|inherited|received|got|get|gets|purchased)\b")
_LOSE = re.compile(r"\b(?:sold|sell|lost|stolen|stole|died|die|gave away|crashed|totalled|totaled|scrapped)\b")


@dataclass
class Side:
    """A clause as the polarity cues compare it."""

    subject: Subject
    terms: list[str]  # lemmas in order, without the ignored words
    negated: bool
    never: bool
    change: bool
    past: bool
    dated: bool
    first_time: bool
    pronoun_object: bool
    before_object: dict[str, str]  # lemma -> the two words right before it
    tokens: list[str]
    implied: bool = False  # said by a possessive ("my car"): the speaker has it


def _terms(tokens: list[str]) -> tuple[list[str], dict[str, str]]:
    terms: list[str] = []
    before: dict[str, str] = {}
    for i, t in enumerate(tokens):
        if t in ("have", "has", "had") and _auxiliary(tokens, i):
            continue
        if t in _IGNORED or t in NEGATORS or t == "?" or t in ("a", "an"):
            continue
        lem = lemma(t)
        if lem in _IGNORED:
            continue
        terms.append(lem)
        if i > 0:
            before.setdefault(lem, " ".join(tokens[max(0, i - 2) : i]))
        if lem == _HAVE:  # "I have a coffee every morning": drinks it
            following = [w for w in tokens[i + 1 : i + 4] if w not in ("a", "an", "some", "my", "the", "two", "big")]
            if following and following[0] in _DRINKS:
                terms.append(lemma("drink"))
            elif following and following[0] in _MEALS:
                terms.append(lemma("eat"))
    return terms, before


def _auxiliary(tokens: list[str], i: int) -> bool:
    """Is the "have" at ``i`` an auxiliary ("have never owned", "have to go")?"""
    for t in tokens[i + 1 : i + 4]:
        if t in NEGATORS or t in ("just", "already", "always", "ever", "also", "still", "recently"):
            continue
        return t == "to" or t == "been" or t.endswith("ed") or t in _PARTICIPLE_WORDS
    return False


_PARTICIPLE_WORDS = {"been", "gone", "had", "done", "eaten", "drunk", "sold", "bought", "made", "taken", "driven",
                     "swum", "spoken", "worn", "ridden", "seen", "got", "gotten", "given", "told", "left", "felt",
                     "slept", "met", "kept", "begun", "written", "paid", "lost", "won", "flown", "grown", "known",
                     "brought", "caught", "taught", "spent", "sent", "built", "heard", "found", "held", "broken",
                     "chosen", "forgotten", "stolen", "fallen", "become", "come", "quit"}  # fmt: skip


def _side(statement: Statement, clause: Clause) -> Side | None:
    if clause.subject is None:
        return None
    body = clause.body
    if not clause.negated:
        cut = _EXCLUDING.search(" ".join(body))
        if cut:  # "I drink tea instead of coffee": coffee is not drunk
            body = " ".join(body)[: cut.start()].split()
    if clause.negated:
        # "I quit smoking two years ago": when it changed is not what is negated.
        body = _WHEN.sub(" ", " ".join(body)).split()
    if clause.change:
        # "I gave up tennis after my knee surgery": nor why.
        cut = next((i for i, t in enumerate(body) if t in ("after", "before", "when", "because", "since")), len(body))
        body = body[:cut]
    terms, before = _terms(body)
    if not terms:
        return None
    return Side(
        subject=clause.subject, terms=terms, negated=clause.negated, never=clause.never and not clause.change,
        change=clause.change, past=clause.past, dated=statement.dated,
        first_time="first time" in statement.text, pronoun_object=bool(set(body) & _PRONOUN_OBJECTS),
        before_object=before, tokens=body,
    )  # fmt: skip


def _possessions(statement: Statement) -> list[Side]:
    """What a statement says its speaker has (or had) without saying "have": "my bike", "our house",
    "I bought a TV" — as affirmed clauses "(I) have bike"."""
    found: list[Side] = []
    for clause in statement.clauses:
        if clause.negated:
            continue
        tokens = clause.text.split()
        joined = clause.text
        lost = bool(_LOSE.search(joined)) or statement.dated
        for i, t in enumerate(tokens):
            owner = None
            if t in ("my", "our") and i + 1 < len(tokens):
                owner, start = ("speaker" if t == "my" else "we"), i + 1
            elif (
                (_ACQUIRE.fullmatch(t) or _LOSE.fullmatch(t))
                and clause.subject is not None
                and clause.subject.kind in ("speaker", "we")
                and not clause.subject.np
            ):
                owner, start = clause.subject.kind, i + 1
            if owner is None:
                continue
            head = _head(tokens, start, statement.names)
            if head is None:
                continue
            lem = lemma(head)
            terms = [_HAVE, _OWN, lem] + ([_KINDS[lem]] if lem in _KINDS else [])
            past = lost
            found.append(Side(
                subject=Subject(owner), terms=terms, negated=False, never=False, change=False, past=past,
                dated=statement.dated, first_time=False, pronoun_object=False, before_object={}, tokens=[head],
                implied=True,
            ))  # fmt: skip
    return found


_NOT_POSSESSED = {"own", "way", "best", "life", "mind", "time", "turn", "opinion", "favourite", "favorite", "first",
                  "last", "heart", "self", "whole", "age", "name", "birthday", "day", "week"}  # fmt: skip


def _head(tokens: list[str], start: int, names: set[str]) -> str | None:
    """The head noun of the noun phrase at ``start`` ("a new TV for …" -> "tv"; "dog Rex" -> "dog")."""
    phrase: list[str] = []
    for t in tokens[start : start + 4]:
        if t in ("a", "an", "the", "some", "new", "old", "first", "little", "big", "second", "only"):
            continue
        if t in names or t in STOPWORDS or t in NEGATORS or t in _PHRASE_END or t == "s" or not t.isalpha():
            break
        if phrase and (is_past_form(t) or t in _VERBISH):
            break  # "my wife drove us": a verb
        phrase.append(t)
        if len(phrase) == 2:
            break
    if not phrase:
        return None
    head = phrase[-1] if len(phrase) == 2 and _plausible_compound(phrase) else phrase[0]
    return None if head in _NOT_POSSESSED else head


def _plausible_compound(phrase: list[str]) -> bool:
    """ "old camera", "living room": the second word is the head unless it looks like a verb."""
    second = phrase[1]
    return not (second.endswith(("ed", "s")) or second in _VERBISH)


_PHRASE_END = {"last", "next", "every", "yesterday", "today", "tonight", "tomorrow", "ago", "again", "back", "away",
               "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday", "weekend", "morning",
               "evening", "night", "week", "month", "year", "once", "twice"}  # fmt: skip
_VERBISH = {"is", "was", "die", "run", "live", "lives", "starts", "broke", "barks", "sleeps", "loves", "needs"}


def content_words(statement: Statement) -> list[str]:
    """The words of a statement's clauses that say what it is about (no subject, stop word,
    negation, time or number), in order, once each."""
    out: dict[str, None] = {}
    for clause in statement.clauses:
        if clause.subject is None:
            continue
        for t in clause.body:
            if (
                t.isalpha()
                and len(t) > 2
                and t not in _IGNORED
                and t not in NEGATORS
                and lemma(t) not in _WHEN_WORDS
                and lemma(t) not in _IGNORED
            ):
                out.setdefault(t, None)
    return list(out)


def sides(statement: Statement) -> list[Side]:
    if "sides" not in statement.memo:
        out = [side for clause in statement.clauses if (side := _side(statement, clause)) is not None]
        statement.memo["sides"] = out + _possessions(statement)
    return statement.memo["sides"]


# --- negation ------------------------------------------------------------------------------------------------


def _expanded(side: Side) -> set[str]:
    terms = set(side.terms)
    return terms | {_KINDS[t] for t in terms if t in _KINDS}


def _contradicts(neg: Side, pos: Side) -> bool:
    if pos.negated or not neg.negated or neg.pronoun_object:
        return False
    if not neg.subject.same(pos.subject, we_is_speaker=True):
        return False
    needed = set(neg.terms)
    have = _expanded(pos)
    if _HAVE in have or _OWN in have:  # owning is having
        have |= {_HAVE, _OWN}
    if not needed - _WHEN_WORDS or not needed <= have:
        return False  # nothing negated but a time ("I haven't been in three weeks")
    for term in needed:
        before = pos.before_object.get(term, "").split()
        if before and before[-1] in _OTHER_THING:
            return False
        # "the smell of coffee" is not coffee; "two cups of coffee" is.
        if len(before) == 2 and before[1] == "of" and lemma(before[0]) not in needed and before[0] not in _MEASURES:
            return False
    if pos.first_time:
        return False
    if neg.change and set(pos.tokens) & _ANOTHER:
        return False
    if neg.never:
        return not neg.dated or neg.change
    if neg.dated and not neg.change:
        return False
    if pos.dated:
        return False
    if neg.change:
        return not pos.past
    if neg.past:
        return pos.past
    # A present negation: against the present, or a past action ("drank coffee last night").
    return not pos.past or not (set(pos.terms) & _STATE)


def negation(a: Statement, b: Statement) -> Finding | None:
    for x, y in ((a, b), (b, a)):
        for neg in sides(x):
            if not neg.negated:
                continue
            for pos in sides(y):
                if _contradicts(neg, pos):
                    said = " ".join(dict.fromkeys(t for t in neg.tokens if t not in NEGATORS and t not in STOPWORDS))
                    return Finding("negation", f"One memory says “{said}” is not so, the other that it is.", 0.8)
    return None


# --- antonyms ------------------------------------------------------------------------------------------------

ANTONYMS = [
    ("love", "hate"), ("like", "dislike"), ("enjoy", "hate"), ("love", "dislike"), ("like", "hate"),
    ("married", "divorced"), ("alive", "dead"), ("pass", "fail"), ("passed", "failed"), ("introvert", "extrovert"),
    ("introverted", "extroverted"), ("early", "late"), ("morning", "night"), ("allowed", "forbidden"),
    ("accepted", "rejected"), ("win", "lose"), ("won", "lost"), ("open", "closed"), ("easy", "hard"),
    ("cheap", "expensive"), ("hot", "cold"), ("left-handed", "right-handed"), ("remote", "office"),
    ("employed", "unemployed"), ("healthy", "sick"), ("best", "worst"), ("agree", "disagree"),
    ("support", "oppose"), ("true", "false"), ("safe", "dangerous"), ("boring", "exciting"), ("boring", "interesting"),
    ("boring", "fun"), ("allow", "forbid"), ("adore", "hate"), ("adore", "detest"), ("love", "detest"),
    ("fan", "hater"), ("sober", "drunk"), ("full-time", "part-time"), ("rent", "own"), ("renting", "own"),
    ("older", "younger"), ("tall", "short"), ("tiny", "huge"), ("small", "big"), ("small", "large"), ("tiny", "big"),
    ("quiet", "noisy"), ("quiet", "loud"), ("stressful", "relaxing"), ("stressful", "relaxed"), ("good", "bad"),
    ("fast", "slow"), ("light", "heavy"), ("tidy", "messy"), ("patient", "impatient"),
    ("rich", "poor"), ("strong", "weak"), ("awake", "asleep"),
]  # fmt: skip
_OPPOSITE: dict[str, set[str]] = {}
for _x, _y in ANTONYMS:
    _OPPOSITE.setdefault(lemma(_x), set()).add(lemma(_y))
    _OPPOSITE.setdefault(lemma(_y), set()).add(lemma(_x))
_WORD_OF = {lemma(w): w for pair in ANTONYMS for w in pair}
_DISLIKE = {lemma(w) for w in ("hate", "dislike", "detest")}

# How much of the two clauses' content must be shared, apart from the flipped word.
MIN_OVERLAP = 0.75


def _overlap(x: set[str], y: set[str]) -> float:
    return len(x & y) / len(x | y) if x | y else 0.0


def _opposed(p: Side, q: Side) -> tuple[str, str] | None:
    if p.negated or q.negated or p.implied or q.implied:
        return None  # "I don't hate X" / "I love X": a double flip, not a contradiction
    if not p.subject.same(q.subject) or p.dated or q.dated or p.past != q.past:
        return None
    tp, tq = set(p.terms), set(q.terms)
    for x in tp - tq:
        for y in _OPPOSITE.get(x, ()):
            if y in tq and y not in tp:
                rest_p, rest_q = tp - {x}, tq - {y}
                # The rest is the same, or there is none ("I'm married" / "I'm single").
                if rest_p == rest_q or (rest_p & rest_q and _overlap(rest_p, rest_q) >= MIN_OVERLAP):
                    return _WORD_OF.get(x, x), _WORD_OF.get(y, y)
                # Disliking is a negation: "I can't stand coffee" is contradicted by "I love my morning
                # coffee", "I love Paris" not by "I hate Paris in August" (a narrower dislike).
                if x in _DISLIKE and rest_p and rest_p <= rest_q or y in _DISLIKE and rest_q and rest_q <= rest_p:
                    return _WORD_OF.get(x, x), _WORD_OF.get(y, y)
    return None


def antonym(a: Statement, b: Statement) -> Finding | None:
    for p in sides(a):
        for q in sides(b):
            pair = _opposed(p, q)
            if pair:
                x, y = pair
                return Finding("antonym", f"Opposite words (“{x}” / “{y}”) in otherwise the same statement.", 0.75)
    return None
