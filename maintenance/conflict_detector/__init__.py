"""Does a new memory likely contradict an older one about the same subject?

A pair it raises is a *conflict* (``ConflictCandidate``; the API's ``/conflicts``), for an operator
to resolve (maintenance/services/conflict_review.py).

A local, rule-based detector (no model, no network): it reads two short texts and answers with
the cue it found — or nothing. It aims at precision over recall: a pair it raises goes to an
operator's review queue, and a queue full of compatible facts would be ignored. Each cue needs
the same subject on both sides (the speaker — "I", "my", "the user" —, "my <something>", "the
<something>", or the same leading name) and a present, unhedged statement:

- ``one_value``: a fact that holds one value at a time states two (a name, an age, a birthday, a
  relationship status, working or not, a favourite, a spouse, an *only* relative, a preference) —
  ``facts.py``.
- ``quantity``: the same present habit or possession counted twice ("two cups of coffee a day" /
  "five cups …") — ``quantities.py``.
- ``schedule``: the days or hours a place is open, or when a recurring event or one's routine is,
  stated twice ("open Monday to Friday" / "closed on Mondays") — ``schedules.py``.
- ``diet``: a stated diet or abstinence and eating or drinking what it excludes ("I'm vegetarian"
  / "I had steak again, love it") — ``diet.py``.
- ``negation``: the same statement negated on one side only, including a change of habit ("I
  don't drink coffee at all" / "I drink two cups of coffee every morning now"; "I quit smoking" /
  "I smoke ten a day"; "I've never owned a car" / "I sold my car") — ``polarity.py``.
- ``antonym``: the same statement with one word swapped for its opposite from a curated list
  ("I love jazz" / "I hate jazz") — ``polarity.py``.

How a statement is read — its clauses, their subjects, polarity and time, hedges and dates — is
``text.py`` (with ``subjects.py`` and the word lists of ``lexicon.py``). Changes the knowledge
graph closes on its timelines (where someone lives or works) are left to it. Measured on a
labelled set of pairs (bench/contradictions/, bench/contradiction_accuracy.py).
"""

from __future__ import annotations

from maintenance.conflict_detector import diet as _diet
from maintenance.conflict_detector import facts, polarity
from maintenance.conflict_detector.finding import Finding
from maintenance.conflict_detector.lexicon import normalise, words
from maintenance.conflict_detector.text import read

__all__ = ["CANDIDATE_K", "CANDIDATE_MIN_SIMILARITY", "CUES", "DETECTOR_VERSION", "Finding", "detect",
           "diet_probe", "normalise", "probes", "words"]  # fmt: skip

DETECTOR_VERSION = 2

# Which pairs are shown to the detector (maintenance.services.conflicts.conflicts_scan): each memory and
# its CANDIDATE_K nearest neighbours of the bucket with cosine similarity >= CANDIDATE_MIN_SIMILARITY.
# A contradiction speaks of the same thing, so it sits near; the floor is low on purpose ("I'm
# vegetarian" and "I had steak again" are not close in meaning) and the cues decide.
CANDIDATE_K = 10
CANDIDATE_MIN_SIMILARITY = 0.25

CUES = ("one_value", "quantity", "schedule", "diet", "negation", "antonym")

diet_probe = _diet.diet_probe

# Besides its nearest neighbours, a memory is shown the memories of its bucket that a full-text
# search for these words finds (``probes``): pairs far apart in meaning, or crowded out of the
# nearest ten ("I'm single" among a bucket's many weddings of friends).
PROBE_LIMIT = 10
_CONTENT_WORDS = 6
_STATUS_OPPOSITES = {
    "single": ("married", "marry", "wife", "husband", "spouse", "engaged", "fiance", "fiancee", "girlfriend",
               "boyfriend", "wedding"),
    "not married": ("married", "marry", "wife", "husband", "spouse", "wedding"),
    "never married": ("married", "marry", "wife", "husband", "spouse", "divorced", "divorce", "widow", "widower", "ex"),
    "married": ("single", "divorced", "divorce", "widow", "widower", "widowed", "engaged", "fiance", "fiancee",
                "bachelor", "relationship"),
    "divorced": ("married", "marry", "wife", "husband"),
    "widowed": ("married", "marry", "wife", "husband"),
    "engaged": ("single", "married", "marry", "wife", "husband"),
    "in a relationship": ("single", "bachelor"),
    "formerly married": ("married", "marry"),
}  # fmt: skip


def probes(text: str) -> list[frozenset[str]]:
    """Groups of plain words to look for among a bucket's other memories by full text (each
    group one search, any of its words): the foods a diet excludes or the diets a meal breaks
    (``diet_probe``), the relationship statuses that contradict a stated one, and the content
    words of the statement's clauses (a negation and its affirmation share them)."""
    groups = []
    diet_words = _diet.diet_probe(text)
    if diet_words:
        groups.append(diet_words)
    statement = read(text)
    status = {fact.value for fact in facts.facts(statement) if fact.attribute == ("status",)}
    opposites = {word for value in status for word in _STATUS_OPPOSITES.get(value, ())}
    if opposites:
        groups.append(frozenset(opposites))
    content = polarity.content_words(statement)[:_CONTENT_WORDS]
    if content:
        groups.append(frozenset(content))
    return groups


def detect(a: str, b: str) -> Finding | None:
    """The strongest cue that ``a`` and ``b`` contradict each other, or None.

    Order matters only for which reason is shown: a pair is raised once.
    """
    sa, sb = read(a), read(b)
    finding = facts.one_value(sa, sb)
    if finding:
        return finding
    if sa.hedged or sb.hedged:
        return None
    if sa.subject is not None and sa.subject.same(sb.subject, we_is_speaker=True):
        finding = _diet.diet(sa.text, sb.text)
        if finding:
            return finding
    return polarity.negation(sa, sb) or polarity.antonym(sa, sb)
