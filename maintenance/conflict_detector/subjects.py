"""Who a clause is about: the speaker, "we", a thing ("the gym", "my sister", "the bakery on Rua
Augusta") or a person by name."""

from __future__ import annotations

import re
from dataclasses import dataclass

from maintenance.conflict_detector.lexicon import NEGATORS, is_past_form, lemma, number

# --- who a statement is about ------------------------------------------------------------------------------

_DETERMINERS = {"the", "a", "an", "this", "that", "these", "those"}
OTHERS = {"he", "she", "they", "it", "you", "there", "his", "her", "their", "its", "your", "everyone", "someone",
           "people", "nobody", "somebody", "everybody", "one"}  # fmt: skip
# Words that end the noun phrase of a subject ("the swimming pool | is open").
_NP_STOP = (
    NEGATORS | {"is", "am", "are", "was", "were", "be", "been", "has", "have", "had", "do", "does", "did", "will",
                "would", "can", "could", "should", "may", "might", "must", "and", "or", "but", "who", "which",
                "that", "on", "in", "at", "for", "with", "by", "from", "to", "of", "across", "near", "next",
                "opposite", "behind", "since", "because", "when", "while", "just", "also", "still", "always",
                "usually", "now", "only", "really", "finally", "recently", "already", "often", "sometimes"}
)  # fmt: skip
# A note that starts with a verb has left out its subject: the speaker's ("Had steak again").
_ELLIPTIC = {"had", "ate", "ordered", "made", "got", "went", "drank", "cooked", "tried", "grabbed", "finished",
             "just", "bought", "visited", "took", "spent", "love", "loved", "hate", "hated", "enjoyed", "sold",
             "started", "quit", "drink", "eat"}  # fmt: skip
_LEADING = {"now", "honestly", "actually", "also", "still", "so", "well", "yes", "yeah", "nowadays", "lately",
            "recently", "today", "tonight", "currently", "generally", "usually", "normally", "luckily", "sadly",
            "unfortunately", "finally", "oh", "ok", "okay", "and", "but", "then", "plus"}  # fmt: skip
_TIME_WORDS = {"morning", "mornings", "evening", "evenings", "night", "nights", "day", "days", "week", "weeks",
               "weekend", "weekends", "afternoon", "afternoons", "monday", "tuesday", "wednesday", "thursday",
               "friday", "saturday", "sunday"}  # fmt: skip


@dataclass(frozen=True)
class Subject:
    """Who a clause is about: ``kind`` is "speaker" (I, the user), "we", "the" (a thing: "the gym",
    "my sister", "our standup" — its noun phrase in ``np``, ``owner`` saying whose), or "name:<first
    name>" (with ``np`` for "Mark's wife")."""

    kind: str
    np: tuple[str, ...] = ()
    owner: str = ""
    detail: tuple[str, ...] = ()  # "the bakery | on Rua Augusta"

    def same(self, other: Subject | None, *, we_is_speaker: bool = False) -> bool:
        if other is None:
            return False
        if self.detail and other.detail and self.detail != other.detail:
            return False  # the bakery on Rua Augusta is not the one on Elm Street
        if self.np or other.np:
            if not (self.np and other.np):
                return False
            if (self.kind.startswith("name:") or other.kind.startswith("name:")) and self.kind != other.kind:
                return False
            # "my gym" / "the gym": one thing, whatever the determiner.
            return lemma(self.np[0]) == lemma(other.np[0]) or lemma(self.np[-1]) == lemma(other.np[-1])
        if self.kind == other.kind:
            return True
        return we_is_speaker and {self.kind, other.kind} == {"speaker", "we"}


def _noun_phrase(tokens: list[str], start: int, names: set[str]) -> tuple[tuple[str, ...], int]:
    np: list[str] = []
    i = start
    while i < len(tokens) and len(np) < 3:
        t = tokens[i]
        if t in _NP_STOP or t == "?" or (np and (t in names or is_past_form(t))):
            break
        if np and t.endswith("s") and not t.endswith("ss") and t != "s" and np[-1] != "s":
            break  # "my brother drives": a verb
        if number(t) is not None and t not in ("a", "an", "one"):
            break
        np.append(t)
        i += 1
    while np and np[0] in ("only", "own", "all-time", "best", "dear", "old", "new", "late", "little", "big"):
        np.pop(0)
    return tuple(t for t in np if t != "s" or len(np) == 1), i


def subject_at(tokens: list[str], names: set[str]) -> tuple[Subject | None, int]:
    """The subject at the start of a clause's tokens and where its predicate starts."""
    i = 0
    while i < len(tokens) and (
        tokens[i] in _LEADING
        or (tokens[i] in ("every", "each", "on", "in", "at") and i + 1 < len(tokens) and tokens[i + 1] in _TIME_WORDS)
    ):
        i += 2 if tokens[i] in ("every", "each", "on", "in", "at") else 1
    if i >= len(tokens):
        return None, i
    t = tokens[i]
    if t == "i":
        return Subject("speaker"), i + 1
    if t == "user" or (t == "the" and i + 1 < len(tokens) and tokens[i + 1] == "user"):
        return Subject("speaker"), i + (1 if t == "user" else 2)
    if t == "we":
        return Subject("we"), i + 1
    if t in ("my", "our"):
        np, j = _noun_phrase(tokens, i + 1, names)
        owner = "speaker" if t == "my" else "we"
        # "my husband and I": the speaker (with someone).
        if j + 1 < len(tokens) and tokens[j] == "and" and tokens[j + 1] in ("i", "me"):
            return Subject("we"), j + 2
        return (Subject("the", np, owner) if np else None), j
    if t in _DETERMINERS:
        np, j = _noun_phrase(tokens, i + 1, names)
        if not np:
            return None, j
        detail, j = _place_detail(tokens, j)
        return Subject("the", np, "the", detail), j
    if t in names:
        if i + 2 < len(tokens) and tokens[i + 1] == "s":
            np, j = _noun_phrase(tokens, i + 2, names)
            if np and np[0] not in _NP_STOP:
                return Subject("name:" + t, np, t), j
        j = i + 1
        while j < len(tokens) and tokens[j] in names:
            j += 1  # "Marco Rossi"
        if j + 1 < len(tokens) and tokens[j] == "and" and tokens[j + 1] in ("i", "me"):
            return Subject("we"), j + 2
        return Subject("name:" + t), j
    if t in OTHERS:
        return None, i + 1
    if t in _ELLIPTIC or (i == 0 and is_past_form(t)):
        return Subject("speaker"), i
    return None, i


_PLACE_PREPOSITIONS = {"on", "in", "at", "near", "by", "across", "opposite", "behind", "next", "off"}
_PREDICATE_HEADS = {
    "is",
    "are",
    "was",
    "were",
    "has",
    "have",
    "had",
    "does",
    "do",
    "did",
    "opens",
    "closes",
    "open",
    "close",
    "will",
    "can",
    "never",
    "always",
    "only",
    "sells",
    "serves",
    "runs",
    "starts",
    "now",
}


def _place_detail(tokens: list[str], j: int) -> tuple[tuple[str, ...], int]:
    """ "the bakery | on Rua Augusta | is open": the place that tells one bakery from another."""
    if j >= len(tokens) or tokens[j] not in _PLACE_PREPOSITIONS:
        return (), j
    for k in range(j + 1, min(len(tokens), j + 7)):
        if tokens[k] in _PREDICATE_HEADS:
            detail = tuple(t for t in tokens[j + 1 : k] if t not in _DETERMINERS and t not in ("to", "from", "of"))
            return detail, k
    return (), j


def capitalised_names(raw: str) -> set[str]:
    """Words written with a capital that are not the first of a sentence, and a first word that is
    not a common sentence opener: the names of a text, lowercased."""
    found = set()
    for match in re.finditer(r"(^|[.!?]\s+|\s)([A-Z][a-zà-ÿ]+)(?:'s)?\b", raw):
        word = match.group(2)
        at_start = match.group(1) == "" or match.group(1).strip() in (".", "!", "?")
        if at_start and word in _NOT_NAMES:
            continue
        if word.lower() in _DAY_AND_MONTH_NAMES or word == "I":
            continue
        found.add(word.lower())
    return found


_NOT_NAMES = {"The", "A", "An", "My", "I", "We", "It", "This", "That", "There", "Today", "Yesterday", "Last", "Now",
              "Since", "After", "Before", "When", "At", "In", "On", "For", "Every", "Our", "Your", "He", "She", "They",
              "Actually", "Still", "Never", "Again", "Just", "Also", "Tonight", "Lately", "Recently", "Had", "Ate",
              "Ordered", "Made", "Got", "Went", "Drank", "Cooked", "Tried", "Grabbed", "Finished", "Bought",
              "Visited", "Took", "Spent", "Love", "Loved", "Hate", "Hated", "Enjoyed", "Is", "Am", "Are", "Do",
              "Does", "Did", "Can", "Could", "Would", "Should", "Will", "Maybe", "Perhaps", "Honestly", "So",
              "But", "And", "Or", "If", "Yes", "No", "Not", "Each", "Some", "Most", "All", "Both", "Sometimes",
              "Usually", "Always", "Often", "Nowadays", "Currently", "Coffee", "Tea", "Running", "Walking",
              "Cooking", "Reading", "Swimming", "Drinking", "Eating", "Smoking", "Sobriety", "Started", "Quit",
              "Sold", "Drink", "Eat", "Ok", "Okay", "Well", "Oh", "Plus", "Then", "Here", "These", "Those",
              "Their", "His", "Her", "Its", "You", "Everyone", "Nobody", "Someone", "Was", "Were"}  # fmt: skip
_DAY_AND_MONTH_NAMES = {"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday", "mondays",
                        "tuesdays", "wednesdays", "thursdays", "fridays", "saturdays", "sundays", "january",
                        "february", "march", "april", "may", "june", "july", "august", "september", "october",
                        "november", "december", "christmas", "easter"}  # fmt: skip
