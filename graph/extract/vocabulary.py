"""The extractor's word lists: what counts as a relation, a category of thing, a verb's predicate."""

from __future__ import annotations

import calendar
import functools
import re
from pathlib import Path

from memories.text import TITLES as NAME_TITLES


@functools.cache
def lowercase_words() -> frozenset[str]:
    """Common words written in lower case far more often than capitalised ("things", "good"):
    capitalised at a sentence's start only by their position (make_lowercase_words.py)."""
    return frozenset(Path(__file__).with_name("lowercase_words.txt").read_text().split())


# --- people and animals by relation ----------------------------------------------------------

ANIMALS = {"dog", "cat", "puppy", "kitten", "pet", "parrot", "rabbit", "hamster", "horse", "bird", "turtle"}
RELATIONS = {
    # kin and people
    "sister", "brother", "sibling", "mother", "mom", "mum", "father", "dad", "parent", "son", "daughter", "kid",
    "child", "baby", "grandmother", "grandma", "grandfather", "grandpa", "grandparent", "grandson",
    "granddaughter", "grandchild", "grandkid", "aunt", "uncle", "cousin", "niece", "nephew", "wife", "husband",
    "spouse", "partner", "boyfriend", "girlfriend", "fiance", "fiancee", "friend", "boss", "manager",
    "supervisor", "colleague", "coworker", "roommate", "neighbor", "neighbour", "teacher", "doctor", "dentist",
    "therapist", "coach", "landlord", "mentor", "tutor", "vet", "assistant",
} | ANIMALS  # fmt: skip

# Relation word -> (predicate, person_first, functional). The edge reads as a sentence:
# "Bob manager_of Alice" for "Bob is Alice's manager" (person_first: the related person is
# the subject), "User parent_of Oliver" for "my son Oliver" (the owner is the subject).
# Symmetric relations put the owner first. A relation not listed here is "<words>_of",
# person first: "Mrs. Kowalski piano_teacher_of <daughter>".
_RELATION_GROUPS = [
    ({"sister", "brother", "sibling"}, "sibling_of", False, False),
    ({"wife", "husband", "spouse"}, "spouse_of", False, True),
    ({"partner", "boyfriend", "girlfriend", "fiance", "fiancee"}, "partner_of", False, True),
    ({"mother", "mom", "mum", "father", "dad", "parent"}, "parent_of", True, False),
    ({"son", "daughter", "kid", "child", "baby"}, "parent_of", False, False),
    ({"grandmother", "grandma", "grandfather", "grandpa", "grandparent"}, "grandparent_of", True, False),
    ({"grandson", "granddaughter", "grandchild", "grandkid"}, "grandparent_of", False, False),
    ({"friend"}, "friend_of", False, False),
    ({"boss", "manager", "supervisor"}, "manager_of", True, False),
    ({"colleague", "coworker"}, "colleague_of", False, False),
    ({"roommate"}, "roommate_of", False, False),
    ({"neighbor", "neighbour"}, "neighbour_of", False, False),
    ({"cousin"}, "cousin_of", False, False),
    (ANIMALS, "owns_pet", False, False),
]
RELATION_PREDICATES = {
    word: (p, first, functional) for words, p, first, functional in _RELATION_GROUPS for word in words
}
# Relation predicates whose subject and object are interchangeable.
SYMMETRIC = {"sibling_of", "spouse_of", "partner_of", "friend_of", "colleague_of", "roommate_of", "neighbour_of",
             "cousin_of", "married_to"}  # fmt: skip


def relation_predicate(lemma: str, phrase: str) -> tuple[str, bool, bool]:
    """(predicate, person_first, functional) of a relation noun ("manager" -> manager_of)."""
    if lemma in RELATION_PREDICATES:
        return RELATION_PREDICATES[lemma]
    return f"{phrase.replace(' ', '_')}_of", True, False


# Job titles the small NER model takes for organisations ("the CTO of TechCo").
JOB_TITLES = {
    "ceo", "cto", "cfo", "coo", "cio", "cmo", "vp", "svp", "evp", "founder", "cofounder", "co-founder", "president",
    "chairman", "chair", "director", "head", "owner", "principal", "dean", "chief",
}  # fmt: skip

# Things one usually has one of at a time: owning a new one replaces the old.
CATEGORIES = {
    "phone": {"phone", "iphone", "pixel", "galaxy", "smartphone", "android", "oneplus"},
    "car": {"car", "tesla", "toyota", "honda", "bmw", "audi", "subaru", "ford", "vehicle", "suv", "truck", "prius",
            "civic", "corolla", "volvo", "mazda", "kia", "hyundai", "volkswagen", "jeep"},
    "laptop": {"laptop", "macbook", "thinkpad", "notebook", "chromebook", "computer", "pc", "xps"},
    "watch": {"watch", "smartwatch", "garmin", "fitbit"},
    "tablet": {"ipad", "tablet", "kindle"},
    "bike": {"bike", "bicycle", "scooter", "brompton"},
    "headphones": {"headphones", "earbuds", "airpods"},
    "tv": {"tv", "television"},
    "speaker": {"speaker", "sonos", "soundbar"},
    "console": {"console", "playstation", "xbox", "switch"},
}  # fmt: skip

# --- verbs -------------------------------------------------------------------------------------

# (verb lemma, preposition) -> (predicate, functional)
VERB_PREP = {
    ("live", "in"): ("lives_in", True),
    ("reside", "in"): ("lives_in", True),
    ("move", "to"): ("lives_in", True),
    ("relocate", "to"): ("lives_in", True),
    ("move", "into"): ("lives_in", True),
    ("work", "at"): ("works_at", True),
    ("work", "for"): ("works_at", True),
    ("work", "as"): ("role", True),
    ("start", "at"): ("works_at", True),
    ("hire", "by"): ("works_at", True),
    ("employ", "by"): ("works_at", True),
    ("study", "at"): ("studies_at", True),
    ("graduate", "from"): ("graduated_from", False),
    ("bear", "in"): ("born_in", True),
    ("headquarter", "in"): ("located_in", True),
    ("locate", "in"): ("located_in", True),
    ("base", "in"): ("located_in", True),
    ("marry", "to"): ("married_to", True),
    ("switch", "to"): ("owns", True),
    ("upgrade", "to"): ("owns", True),
    ("travel", "to"): ("visited", False),
    ("go", "to"): ("visited", False),
    ("fly", "to"): ("visited", False),
    ("drive", "to"): ("visited", False),
    # "Ken reports to Maya": Maya manager_of Ken (the object is the subject of the fact).
    ("report", "to"): ("manager_of", False),
}
INVERSE_VERB_PREP = {("report", "to")}
# verb lemma -> (predicate, functional)
VERB_OBJECT = {
    "join": ("works_at", True),
    "marry": ("married_to", True),
    "date": ("dating", True),
    "own": ("owns", False),
    "have": ("owns", False),
    "buy": ("owns", False),
    "get": ("owns", False),
    "drive": ("owns", False),
    "ride": ("owns", False),
    "use": ("uses", False),
    "like": ("likes", False),
    "love": ("likes", False),
    "enjoy": ("likes", False),
    "adore": ("likes", False),
    "prefer": ("prefers", False),
    "hate": ("dislikes", False),
    "dislike": ("dislikes", False),
    "visit": ("visited", False),
    "play": ("plays", False),
    "speak": ("speaks", False),
    "learn": ("learning", False),
    "adopt": ("owns_pet", False),
    "study": ("studies", False),
    "teach": ("teaches", False),
    "manage": ("manager_of", False),
    # "Marco hired Priya": Marco hired Priya; an organisation that hires employs (graph.extract._settle).
    "hire": ("hired", False),
    "recruit": ("hired", False),
    "supervise": ("manager_of", False),
    "name": ("named", True),
    "call": ("named", True),
}
# Possessions only count for these verbs when the thing is concrete (a category or a name):
# "I have a meeting" is not ownership.
CONCRETE_ONLY = {"have", "get", "ride"}
# Predicates that need a named object: "joined a gym" is not employment, "manages the budget" no person.
NAMED_OBJECT_ONLY = {"works_at", "manager_of", "owns_pet", "hired"}
# "got a job at Deloitte", "has a position with Globex": employment by the job's preposition.
JOB_NOUNS = {"job", "position", "internship", "role", "post"}
JOB_VERBS = {"get", "land", "have", "take", "accept", "start", "find", "begin"}

HEDGES = {"might", "may", "could", "would", "should", "will", "shall", "'d", "'ll", "wo"}
HEDGING_VERBS = {"plan", "want", "hope", "consider", "think", "wish", "intend", "try", "need", "dream", "like"}
HEDGING_ADVERBS = {"maybe", "perhaps", "probably", "possibly", "supposedly", "allegedly"}

# --- names ------------------------------------------------------------------------------------------

TITLES = set(NAME_TITLES)  # memories.text's: a speaker prefix of titles alone names nobody there too
NER_TYPES = {
    "PERSON": "PERSON", "ORG": "ORG", "GPE": "PLACE", "LOC": "PLACE", "FAC": "PLACE", "PRODUCT": "PRODUCT",
    "EVENT": "EVENT", "WORK_OF_ART": "THING", "LANGUAGE": "THING",
}  # fmt: skip
SPEAKER_PRONOUNS = {"i", "me", "my", "mine", "myself", "we", "us", "our", "ours", "ourselves"}
THIRD_PERSON = {"he", "him", "his", "she", "her", "hers", "they", "them", "their"}
RELATIVE_PRONOUNS = {"who", "that", "which", "whom"}
# A first name stands for these formal names too (and back): "Bob" can be "Robert Martinez".
# Nicknames that are also common words ("will", "bill", "rich", "pat", "sue") are left out:
# a query word would otherwise seed the bucket's one William or Richard.
NICKNAMES = {
    "bob": "robert", "rob": "robert", "bobby": "robert", "liz": "elizabeth", "beth": "elizabeth",
    "kate": "katherine", "katie": "katherine", "mike": "michael", "jim": "james", "jimmy": "james",
    "tom": "thomas", "tony": "anthony", "dave": "david", "dan": "daniel", "danny": "daniel", "sam": "samuel",
    "alex": "alexander", "chris": "christopher", "matt": "matthew", "nick": "nicholas", "joe": "joseph",
    "ben": "benjamin", "jen": "jennifer", "jenny": "jennifer", "meg": "margaret", "maggie": "margaret",
    "steve": "steven", "andy": "andrew", "greg": "gregory", "rick": "richard", "abby": "abigail",
}  # fmt: skip


def first_name_variants(word: str) -> set[str]:
    """The first names a one-word name may stand for: itself, and its nickname or formal form."""
    variants = {word}
    if word in NICKNAMES:
        variants.add(NICKNAMES[word])
    variants |= {nick for nick, formal in NICKNAMES.items() if formal == word}
    return variants


# A short form ("Mel") is at least this many letters of the one first name it begins ("Melanie"),
# and that name is at least SHORT_FORM_REST letters longer: a name one or two letters longer is
# more often a name of its own (Jon and Jonas, Ken and Kenji, Ann and Anna: on the labelled set,
# bench/graph_extraction.py's "one bucket" section).
SHORT_FORM_LETTERS = 3
SHORT_FORM_REST = 3


def may_be_short_form(word: str) -> bool:
    """Whether the one-word name ``word`` may be read as the short form of a longer first name
    (``short_forms_of``): three letters or more, and not a common word ("max", "art", "will":
    lowercase_words.txt), which a capitalised sentence opening or a query would make a name."""
    return len(word) >= SHORT_FORM_LETTERS and " " not in word and word.isalpha() and word not in lowercase_words()


def short_forms_of(first_name: str) -> set[str]:
    """The short forms a first name may be written as: each of its beginnings of three letters
    or more that leaves three letters or more out ("mel", "mela" for "melanie"), common words
    left out."""
    ends = range(SHORT_FORM_LETTERS, len(first_name) - SHORT_FORM_REST + 1)
    return {first_name[:n] for n in ends if may_be_short_form(first_name[:n])}


def short_form_people(word: str, people: list[tuple[str, bool, object]]) -> list:
    """Whom the short form ``word`` may stand for among ``people``, each (first word of the
    name, whether the name has two words or more, id), the most mentioned first: the people of
    the one first name that ``word`` begins ("mel": Melanie), if it is three letters or more
    longer ("jon" is not Jonas); its full names before a one-word name of it ("Melanie Chen"
    over "Melanie", as "Melanie" reads). At most two ids: one means unambiguous; Melanie and
    Melissa, or two Melanie somebodies, give two."""
    if not may_be_short_form(word):
        return []
    begun = [(first, full, pk) for first, full, pk in people if first != word and first.startswith(word)]
    firsts = {first for first, _full, _pk in begun}
    if len(firsts) != 1:
        return [pk for _first, _full, pk in begun][:2]
    if len(firsts.pop()) - len(word) < SHORT_FORM_REST:
        return []
    full_names = [pk for _first, full, pk in begun if full]
    return (full_names or [pk for _first, _full, pk in begun])[:2]


def partial_name_of(word: str, full_name: str, *, surname: bool = True) -> bool:
    """Whether the one-word name ``word`` may stand for ``full_name`` (normalized, two words or
    more): as its first name or that name's nickname or formal form ("Bob" for Robert Diaz),
    or, with ``surname``, as its last word ("Natarajan" for Priya Natarajan)."""
    words = full_name.split()
    if len(words) < 2 or " " in word:
        return False
    return words[0] in first_name_variants(word) or surname and words[-1] == word


MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
WEEKDAYS = {name.lower() for name in calendar.day_name}
DATE = re.compile(r"(?:(" + "|".join(MONTHS) + r")\s+)?(?:\d{1,2}(?:st|nd|rd|th)?,?\s+)?((?:19|20)\d{2})\b", re.I)
