"""Reading a short statement: its clauses, each with its subject, polarity and time, and whether
the statement as a whole is hedged, a question, about the future or dated to a past period.

Plain Python and regular expressions (no model): what the cues of this package compare.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from maintenance.conflict_detector.lexicon import (
    BELIEF,
    DATED,
    GOING_TO,
    HEDGE_PHRASES,
    HEDGES,
    NEGATORS,
    PAST_MARKERS,
    TOKEN,
    is_past_form,
    lemma,
    normalise,
)
from maintenance.conflict_detector.subjects import OTHERS, Subject, capitalised_names, subject_at

# --- clauses ------------------------------------------------------------------------------------------------

# Where a statement divides into clauses. "when", "after", "before", "until" do not divide it: "I
# don't drink coffee after 4 pm" says less than "I don't drink coffee".
_CLAUSE_BREAK = re.compile(
    r"\s*(?:[.;!:]+(?:\s|$)|,\s*|\s+-\s+|\s+\((?=\w)|\)\s*|"
    r"\s+(?=(?:but|because|since|although|though|while|whereas|so that|so|which|who|where)\s)|"
    r"\s+(?=and (?:i|we|my|our|he|she|they|it|the user|then)\s))"
)


@dataclass
class Clause:
    """One clause of a statement: its subject, its tokens after the subject, and how it stands."""

    text: str  # normalised
    subject: Subject | None
    body: list[str]  # tokens after the subject
    negated: bool = False
    change: bool = False  # "quit", "stopped", "no longer", "gave up": not any more
    never: bool = False
    past: bool = False
    started: bool = False
    inherited: bool = False  # no subject of its own: the last clause's ("…, up at five every day")


@dataclass
class Statement:
    raw: str
    text: str  # normalised
    tokens: list[str]
    subject: Subject | None  # of the first clause
    clauses: list[Clause] = field(default_factory=list)
    hedged: bool = False
    future: bool = False
    dated: bool = False
    question: bool = False
    names: set[str] = field(default_factory=set)
    memo: dict = field(default_factory=dict)  # what the cues read from it, once (read() is cached)


_SUBORDINATE = ("because", "since", "although", "though", "while", "whereas", "when", "after", "before", "unless",
                "so", "until", "as", "which", "who", "where")  # fmt: skip


def _clause(text: str, names: set[str], inherited: Subject | None, first: bool) -> Clause:
    tokens = TOKEN.findall(text)
    lead = tokens[0] if tokens else ""
    if lead in _SUBORDINATE:
        tokens = tokens[1:] if lead != "so" or (len(tokens) > 1 and tokens[1] != "that") else tokens[2:]
    elif lead == "and" and len(tokens) > 1:
        tokens = tokens[1:]
    subject, start = subject_at(tokens, names)
    body = tokens[start:]
    inherited_now = False
    has_own = start > 0 and tokens[start - 1] in OTHERS
    if subject is not None and subject.owner == "the" and not first:
        subject, has_own = None, True  # "…, and the battery lasts 5 days": which battery depends on what came before
    if subject is None:
        starts_with_predicate = bool(tokens) and (
            tokens[0] in ("am", "is", "are", "not", "never", "no", "just", "up", "back", "only", "also")
            or lemma(tokens[0]) in _PREDICATE_STARTS
        )
        if (
            not has_own
            and inherited is not None
            and (not first)
            and (starts_with_predicate or not tokens or tokens[0] not in OTHERS)
        ):
            subject, body, inherited_now = inherited, tokens, True
    clause = Clause(text=" ".join(tokens), subject=subject, body=body, inherited=inherited_now)
    joined = " ".join(body)
    clause.never = "never" in body
    clause.change = bool(re.search(r"\bquit\b|\bno longer\b|\bany ?more\b", joined))
    clause.negated = bool(set(body) & NEGATORS) or clause.change
    clause.started = bool(re.search(r"\b(?:started|start|began|begun|starting)\b", joined))
    clause.past = _is_past(body)
    return clause


# Words a subject-less clause can start with and still be about the last subject ("…, up at five").
_PREDICATE_STARTS = {"have", "drink", "eat", "work", "live", "go", "take", "play", "love", "hate", "lik", "prefer",
                     "want", "need", "use", "own", "cook", "run", "swim", "walk", "read", "watch", "smok"}  # fmt: skip


def _is_past(body: list[str]) -> bool:
    joined = " ".join(body)
    if PAST_MARKERS.search(joined):
        return True
    for i, t in enumerate(body[:4]):
        if t in ("have", "has") and i + 1 < len(body):
            return False  # present perfect: "I have never owned", "I've been vegan"
        if t in ("am", "is", "are", "do", "does", "can", "will", "not", "never"):
            return False
        if is_past_form(t):
            return True
    return False


def split_clauses(text: str) -> list[str]:
    parts = [part for part in _CLAUSE_BREAK.split(text) if part and part.strip()]
    merged: list[str] = []
    for part in parts:
        # "my sister | and i went hiking": a subject alone belongs to the next clause.
        if merged and part.startswith("and ") and re.fullmatch(r"(?:my|our|the) [a-z]+|[a-z]+", merged[-1]):
            merged[-1] = merged[-1] + " " + part
        else:
            merged.append(part)
    return merged


@lru_cache(maxsize=4096)
def read(raw: str) -> Statement:
    """The statement ``raw``, read once (cached: the scan compares one memory with many)."""
    text = normalise(raw)
    names = capitalised_names(raw)
    tokens = TOKEN.findall(text)
    statement = Statement(raw=raw, text=text, tokens=tokens, subject=None, names=names)
    token_set = set(tokens)
    statement.question = "?" in raw
    statement.hedged = bool(token_set & HEDGES) and not BELIEF.search(text) or bool(HEDGE_PHRASES.search(text))
    statement.hedged = statement.hedged or statement.question
    statement.future = bool(re.search(r"\bwill\b|" + GOING_TO + r"|\bnext (?:week|month|year)\b|\bturns? \d", text))
    statement.dated = bool(DATED.search(text))
    inherited = None
    for n, part in enumerate(split_clauses(text)):
        clause = _clause(part, names, inherited, n == 0)
        if n == 0:
            statement.subject = clause.subject
        if clause.subject is not None:
            inherited = clause.subject
        statement.clauses.append(clause)
    return statement
