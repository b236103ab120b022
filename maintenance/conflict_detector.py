"""Does a new memory likely contradict an older one about the same subject?

A pair it raises is a *conflict* (``ConflictCandidate``; the API's ``/conflicts``), for an operator
to resolve (maintenance/services/conflict_review.py).

A local, rule-based detector (no model, no network): it reads two short texts and
answers with the cue it found — or nothing. It aims at precision over recall: a pair
it raises goes to an operator's review queue, and a queue full of compatible facts
would be ignored. Four cues, each requiring the same subject on both sides (the
speaker — "I", "my", "the user" — or the same leading name):

- ``one_value``: a relation that holds one value at a time states two values
  ("my only sister is Anna" / "my only sister Maria"; "my birthday is 3 May" /
  "my birthday is 9 June"). Family relations count as one-valued only when one side
  says *only* or the relation is a spouse; where the subject lives or works is left to
  the knowledge graph, which closes such facts on its timelines.
- ``diet``: a stated diet or abstinence and eating or drinking what it excludes
  ("I'm vegetarian" / "I had steak again, love it").
- ``negation``: the same statement, negated on one side only ("I drink coffee" /
  "I don't drink coffee").
- ``antonym``: the same statement with one word swapped for its opposite from a
  small curated list ("I love jazz" / "I hate jazz").

Measured on a labelled set of pairs (bench/contradictions/, bench/contradiction_accuracy.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DETECTOR_VERSION = 1

# Which pairs are shown to the detector (maintenance.services.conflicts.conflicts_scan): each memory and
# its CANDIDATE_K nearest neighbours of the bucket with cosine similarity >= CANDIDATE_MIN_SIMILARITY.
# A contradiction speaks of the same thing, so it sits near; the floor is low on purpose ("I'm
# vegetarian" and "I had steak again" are not close in meaning) and the cues decide.
CANDIDATE_K = 10
CANDIDATE_MIN_SIMILARITY = 0.25


@dataclass(frozen=True)
class Finding:
    code: str  # one_value | diet | negation | antonym
    reason: str  # a short sentence for the review queue
    score: float  # 0..1, how sure the cue is


CUES = ("one_value", "diet", "negation", "antonym")

# --- text normalisation -------------------------------------------------------------------------------

_CONTRACTIONS = [
    (r"\bcan't\b", "can not"), (r"\bcannot\b", "can not"), (r"\bwon't\b", "will not"), (r"\bshan't\b", "shall not"),
    (r"\b(\w+)n't\b", r"\1 not"), (r"\bi'm\b", "i am"), (r"\b(\w+)'re\b", r"\1 are"), (r"\b(\w+)'ve\b", r"\1 have"),
    (r"\b(\w+)'ll\b", r"\1 will"), (r"\b(\w+)'d\b", r"\1 would"), (r"\bit's\b", "it is"), (r"\bthat's\b", "that is"),
]  # fmt: skip
_WORD = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
NEGATORS = {"not", "never", "no", "nobody", "nothing", "nowhere", "neither", "nor", "none"}
# Words that carry no content for comparing two statements.
STOPWORDS = {
    "a", "an", "the", "and", "or", "but", "so", "to", "of", "in", "on", "at", "for", "with", "by", "from", "as",
    "is", "am", "are", "was", "were", "be", "been", "being", "do", "does", "did", "have", "has", "had", "will",
    "would", "shall", "should", "can", "could", "may", "might", "must", "i", "me", "my", "mine", "myself", "we",
    "us", "our", "you", "your", "he", "him", "his", "she", "her", "they", "them", "their", "it", "its", "this",
    "that", "these", "those", "there", "here", "very", "really", "just", "also", "too", "still", "again",
    "actually", "now", "then", "all", "any", "some", "much", "many", "more", "most", "quite", "user", "s",
    "lot", "lots", "always", "usually", "anymore", "any more", "longer",
}  # fmt: skip
# Words that mark a statement as hedged, past or about someone else's view: no contradiction.
HEDGES = {
    "maybe", "perhaps", "might", "used", "sometimes", "occasionally", "once", "wish", "if", "whether", "thinks",
    "says", "said", "told", "wants", "hope", "trying", "try", "plan", "planning", "until", "?",
}  # fmt: skip


# Fixed phrases read as one word, before negations are counted ("can't stand" is "hate").
_PHRASES = [(r"\bcan not stand\b", "hate"), (r"\bcould not stand\b", "hated"), (r"\bam not a fan of\b", "dislike")]


def normalise(text: str) -> str:
    text = text.lower().replace("’", "'").replace("‘", "'")
    for pattern, replacement in _CONTRACTIONS:
        text = re.sub(pattern, replacement, text)
    for pattern, replacement in _PHRASES:
        text = re.sub(pattern, replacement, text)
    return text


def _stem(word: str) -> str:
    """A crude stem: enough to match "likes"/"liked"/"like", "drinking"/"drink", "loves"/"love"."""
    stem = word
    for suffix, keep in (("ies", "y"), ("ing", ""), ("ed", ""), ("s", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            stem = word[: -len(suffix)] + keep
            # "running" -> "runn" -> "run"
            if len(stem) >= 4 and stem[-1] == stem[-2] and stem[-1] not in "aeiouls":
                stem = stem[:-1]
            break
    # "love", "loves", "loved" -> "lov"
    return stem[:-1] if len(stem) > 3 and stem.endswith("e") else stem


def words(text: str) -> list[str]:
    return _WORD.findall(normalise(text))


def content_terms(tokens: list[str]) -> set[str]:
    return {_stem(t) for t in tokens if t not in STOPWORDS and t not in NEGATORS}


# --- the subject ----------------------------------------------------------------------------------------

_FIRST_PERSON = {"i", "me", "my", "mine", "myself", "im"}
_SENTENCE_START = re.compile(r"^\W*(?:the user|user)\b", re.IGNORECASE)
_NAME = re.compile(r"^\W*([A-Z][a-z]+)(?:'s)?\b")
_NOT_NAMES = {"The", "A", "An", "My", "I", "We", "It", "This", "That", "There", "Today", "Yesterday", "Last", "Now",
              "Since", "After", "Before", "When", "At", "In", "On", "For", "Every", "Our", "Your", "He", "She", "They",
              "Actually", "Still", "Never", "Again", "Just", "Also", "Tonight", "Lately", "Recently"}  # fmt: skip


# A note that starts with a verb has left out its subject: the speaker's ("Had steak again").
_ELLIPTIC = {"had", "ate", "ordered", "made", "got", "went", "drank", "cooked", "tried", "grabbed", "finished",
             "just", "bought", "visited", "took", "spent", "love", "loved", "hate", "hated", "enjoyed"}  # fmt: skip


_MY = re.compile(r"^\W*my (?:only |all-time |)([a-z]+)", re.IGNORECASE)


def subject(text: str) -> str | None:
    """Who a statement is about: "speaker" (I / the user), "speaker:<what>" for a statement that
    starts with "my <what>" (my husband, my sister, my name: a fact about that, not about what
    the speaker does), a leading name, or None."""
    if _SENTENCE_START.search(text):
        return "speaker"
    mine = _MY.match(text)
    if mine:
        return "speaker:" + mine.group(1).lower().replace("favorite", "favourite")
    match = _NAME.match(text)
    if match and (match.group(1).lower() in _ELLIPTIC or match.group(1).endswith("ed")):
        return "speaker"
    if match and match.group(1) not in _NOT_NAMES:
        return match.group(1).lower()
    tokens = set(words(text)[:6])
    if tokens & _FIRST_PERSON:
        return "speaker"
    return None


def _hedged(tokens: list[str], raw: str) -> bool:
    return bool(set(tokens) & HEDGES) or "?" in raw


# --- one-valued relations ---------------------------------------------------------------------------------

_VALUE = r"([a-z0-9][a-z0-9' .-]{0,40}?)"
_END = r"(?=[,.;!]|\s+(?:and|but|who|which|since|because|from|at|in)\b|$)"
_FAMILY = r"(sister|brother|daughter|son|child|kid|wife|husband|partner|spouse|boss|manager|dog|cat|pet|car)"
_FAVOURITE = r"(colou?r|food|dish|movie|film|book|band|song|singer|sport|team|season|drink|city|animal|game|author)"
# (relation pattern, relation name, one_valued_always). The value is the last group.
_RELATIONS = [
    (re.compile(r"\bmy name is " + _VALUE + _END), "name"),
    (re.compile(r"\b(?:i am|user is) (\d{1,3}) years? old\b"), "age"),
    (re.compile(r"\bmy birthday is (?:on )?" + _VALUE + _END), "birthday"),
    (re.compile(r"\b(?:i was|user was) born (?:on|in the year) " + _VALUE + _END), "birth_date"),
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
}  # fmt: skip


def _relations(text: str) -> dict[tuple, tuple[str, bool]]:
    """{(relation, detail): (value, only)} stated in ``text``."""
    found: dict[tuple, tuple[str, bool]] = {}
    low = normalise(text)
    for pattern, name in _RELATIONS:
        for match in pattern.finditer(low):
            groups = match.groups()
            if name == "family":
                only, kind, value = groups
                value = value.strip()
                if value.split()[0] in _NOT_A_VALUE:
                    continue
                found[(name, kind)] = (value, bool(only) or kind in _ONE_VALUED_FAMILY)
            elif name == "favourite":
                kind, value = groups
                found[(name, kind)] = (value.strip(), True)
            else:
                value = groups[-1].strip()
                if value.split()[0] in _NOT_A_VALUE:
                    continue
                found[(name,)] = (value, True)
    return found


def _same_value(x: str, y: str) -> bool:
    tx, ty = set(x.split()) - STOPWORDS, set(y.split()) - STOPWORDS
    return x == y or x.startswith(y) or y.startswith(x) or bool(tx and ty and (tx <= ty or ty <= tx))


def _one_value(a: str, b: str) -> Finding | None:
    ra, rb = _relations(a), _relations(b)
    for key in ra.keys() & rb.keys():
        (va, only_a), (vb, only_b) = ra[key], rb[key]
        if not (only_a or only_b) or _same_value(va, vb):
            continue
        what = " ".join(key).replace("_", " ").replace("family ", "").replace("favourite ", "favourite ")
        return Finding("one_value", f"Two values for a one-valued fact ({what}): “{va}” and “{vb}”.", 0.9)
    return None


# --- diets and abstinence ------------------------------------------------------------------------------------

_MEAT = {"steak", "steaks", "beef", "burger", "burgers", "hamburger", "bacon", "ham", "pork", "chicken", "lamb",
         "sausage", "sausages", "salami", "pepperoni", "meatballs", "meat", "veal", "turkey", "brisket", "ribs",
         "prosciutto", "chorizo", "duck", "venison", "wings", "hot dog", "meatloaf", "kebab"}  # fmt: skip
_FISH = {"fish", "salmon", "tuna", "sushi", "shrimp", "prawns", "cod", "sardines", "oysters", "lobster", "crab",
         "anchovies", "mussels", "seafood"}  # fmt: skip
_DAIRY_EGG = {"cheese", "milk", "butter", "yogurt", "yoghurt", "cream", "eggs", "egg", "omelette", "ice cream",
              "honey", "latte", "cheeseburger", "pizza"}  # fmt: skip
_ALCOHOL = {"beer", "beers", "wine", "whisky", "whiskey", "vodka", "gin", "rum", "tequila", "cocktail", "cocktails",
            "champagne", "margarita", "margaritas", "pint", "pints", "sake", "cider", "prosecco", "bourbon",
            "mojito", "negroni", "ipa", "lager", "stout"}  # fmt: skip
_GLUTEN = {"bread", "pasta", "baguette", "croissant", "bagel", "pizza", "beer", "noodles", "cake", "sourdough"}
_PORK = {"pork", "bacon", "ham", "salami", "pepperoni", "prosciutto", "chorizo", "sausage", "sausages"}

# (pattern naming a diet, its label, the foods it excludes)
_BECOME = r"\b(?:am|is|be|been|went|gone|turned|become|became|going|stay|staying) (?:a |fully |strictly |strict )?"
_DIETS = [
    (re.compile(_BECOME + r"vegan\b|\bvegan (?:since|for)\b|\bplant-based\b"), "vegan", _MEAT | _FISH | _DAIRY_EGG),
    (re.compile(_BECOME + r"vegetarian\b|\bvegetarian (?:since|for)\b"), "vegetarian", _MEAT | _FISH),
    (re.compile(r"\b(?:am|is|went|gone|became|been) (?:a )?pescatarian\b"), "pescatarian", _MEAT),
    (re.compile(r"\b(?:do|does|did) not eat (?:any )?(?:meat|animal products)\b|\bnever eat (?:any )?meat\b"
                r"|\bgave up meat\b|\bstopped eating meat\b|\bno longer eat meat\b"), "no meat", _MEAT),
    (re.compile(r"\b(?:do|does) not (?:drink|touch) (?:any )?(?:alcohol|booze)\b|\bnever (?:drink|touch) alcohol\b"
                r"|\b(?:am|is|been|went|stay|staying) (?:completely |totally )?(?:sober|teetotal|a teetotaler)\b"
                r"|\bquit (?:drinking|alcohol)\b|\bstopped drinking (?:alcohol)?\b|\bgave up (?:alcohol|drinking)\b"),
     "no alcohol", _ALCOHOL),
    (re.compile(r"\b(?:am|is) (?:a )?coeliac\b|\b(?:am|is) (?:a )?celiac\b|\bgluten-free\b"), "gluten-free", _GLUTEN),
    (re.compile(r"\b(?:do|does) not eat pork\b|\bnever eat pork\b|\b(?:keep|keeps|eat|eats) (?:strictly )?"
                r"(?:halal|kosher)\b"), "no pork", _PORK),
    (re.compile(r"\b(?:am|is) (?:lactose intolerant|dairy-free)\b|\b(?:do|does) not (?:eat|have) dairy\b"),
     "no dairy", {"cheese", "milk", "butter", "yogurt", "yoghurt", "cream", "ice cream", "latte", "milkshake"}),
]  # fmt: skip
_CONSUME = re.compile(
    r"\b(?:ate|eat|eating|eats|had|have|having|ordered|order|grilled|grill|cooked|cook|cooking|devoured|tried|"
    r"drank|drink|drinking|drinks|enjoyed|enjoy|love|loved|loves|got|grabbed|made|makes|make|sipped|finished|"
    r"split|shared|bbq|barbecued|barbecue|roasted|fried)\b"
)
_ALLERGY = re.compile(r"\ballergic to ([a-z]+(?: [a-z]+)?)")


def _mentions(food: set[str], text: str) -> str | None:
    for item in sorted(food, key=len, reverse=True):
        if re.search(r"\b" + re.escape(item) + r"\b", text):
            return item
    return None


def _diet_vs_food(stated: str, other: str) -> Finding | None:
    for pattern, label, excluded in _DIETS:
        if not pattern.search(stated):
            continue
        # The other statement eats what the diet excludes — and is not itself about the diet
        # ("vegan cheese", "veggie burger", "I miss bacon") or negated.
        if pattern.search(other) or re.search(r"\b(?:vegan|vegetarian|veggie|plant-based|meatless|meat-free|"
                                              r"non-alcoholic|alcohol-free|gluten-free|dairy-free|oat|soy|almond|"
                                              r"tofu|beyond|impossible|fake|faux|mock|miss|missing|craving|smell|"
                                              r"for (?:my|the|our) (?:kids|family|guests|husband|wife|partner|son|"
                                              r"daughter|dog|cat))\b", other):  # fmt: skip
            return None
        food = _mentions(excluded, other)
        if food and _CONSUME.search(other) and not (set(words(other)) & NEGATORS):
            return Finding("diet", f"Stated diet ({label}) against eating or drinking {food}.", 0.85)
    match = _ALLERGY.search(stated)
    if match and not set(words(stated)) & NEGATORS:
        allergen = match.group(1).split()[0]
        allergen = allergen[:-1] if allergen.endswith("s") and len(allergen) > 4 else allergen
        if (
            re.search(r"\b" + re.escape(allergen) + r"s?\b", other)
            and _CONSUME.search(other)
            and not re.search(r"\ballerg|\bfree\b|\bwithout\b|\bno\b|\bnot\b|\bavoid", other)
        ):
            return Finding("diet", f"Stated allergy ({allergen}) against eating it.", 0.8)
    return None


# What a statement of a diet is said with (lemmas, for the bucket's full-text index).
_DIET_WORDS = frozenset({
    "vegetarian", "vegan", "pescatarian", "teetotal", "teetotaler", "sober", "allergic", "celiac", "coeliac",
    "lactose", "halal", "kosher", "gluten", "meat", "alcohol", "pork", "dairy", "drinking", "plant",
})  # fmt: skip
_ALL_EXCLUDED = _MEAT | _FISH | _DAIRY_EGG | _ALCOHOL | _GLUTEN | _PORK


def diet_probe(text: str) -> frozenset[str]:
    """Words to look for among a bucket's other memories (by full text, not by meaning):
    a statement of a diet looks for the foods it excludes, a meal for statements of a diet.
    Empty for anything else. Diet pairs are far apart in meaning ("I'm vegetarian" / "I had
    steak again"), so the nearest neighbours alone would miss them."""
    low = normalise(text)
    if any(pattern.search(low) for pattern, _label, _foods in _DIETS) or _ALLERGY.search(low):
        excluded = set().union(*(foods for pattern, _label, foods in _DIETS if pattern.search(low)))
        allergy = _ALLERGY.search(low)
        if allergy:
            excluded.add(allergy.group(1).split()[0])
        return frozenset(w for w in excluded if re.fullmatch(r"[a-z]+", w))
    if _CONSUME.search(low) and _mentions(_ALL_EXCLUDED, low):
        return _DIET_WORDS
    return frozenset()


def _diet(a: str, b: str) -> Finding | None:
    return _diet_vs_food(a, b) or _diet_vs_food(b, a)


# --- negation and antonyms of the same statement ------------------------------------------------------------

ANTONYMS = [
    ("love", "hate"), ("like", "dislike"), ("enjoy", "hate"), ("love", "dislike"), ("like", "hate"),
    ("always", "never"), ("married", "divorced"), ("married", "single"), ("alive", "dead"), ("pass", "fail"),
    ("passed", "failed"), ("introvert", "extrovert"), ("introverted", "extroverted"), ("early", "late"),
    ("morning", "night"), ("allowed", "forbidden"), ("accepted", "rejected"), ("win", "lose"), ("won", "lost"),
    ("open", "closed"), ("easy", "hard"), ("cheap", "expensive"), ("hot", "cold"), ("left-handed", "right-handed"),
    ("remote", "office"), ("employed", "unemployed"), ("healthy", "sick"), ("best", "worst"), ("agree", "disagree"),
    ("favourite", "least favourite"), ("support", "oppose"), ("true", "false"), ("safe", "dangerous"),
    ("boring", "exciting"), ("allow", "forbid"), ("start", "quit"), ("started", "quit"), ("adore", "hate"),
    ("adore", "detest"), ("love", "detest"), ("fan", "hater"), ("sober", "drunk"), ("full-time", "part-time"),
    ("rent", "own"), ("renting", "own"), ("older", "younger"), ("tall", "short"),
]  # fmt: skip
_OPPOSITE: dict[str, set[str]] = {}
for _x, _y in ANTONYMS:
    _OPPOSITE.setdefault(_stem(_x), set()).add(_stem(_y))
    _OPPOSITE.setdefault(_stem(_y), set()).add(_stem(_x))

# How much of the two statements' content must be shared, apart from the flipped word.
MIN_OVERLAP = 0.75
MIN_SHARED_TERMS = 2


def _overlap(x: set[str], y: set[str]) -> float:
    return len(x & y) / len(x | y) if x | y else 0.0


def _negated(tokens: list[str]) -> bool:
    return bool(set(tokens) & NEGATORS) or "no longer" in " ".join(tokens)


def _negation(a: str, b: str, ta: list[str], tb: list[str]) -> Finding | None:
    if _negated(ta) == _negated(tb):
        return None
    ca, cb = content_terms(ta), content_terms(tb)
    shared = ca & cb
    # One shared word is enough when it is the whole statement ("I can swim" / "I can't swim").
    if not shared or (len(shared) < MIN_SHARED_TERMS and ca != cb) or _overlap(ca, cb) < MIN_OVERLAP:
        return None
    what = " ".join(sorted(shared))
    return Finding("negation", f"The same statement ({what}), negated in one memory only.", 0.8)


def _antonym(a: str, b: str, ta: list[str], tb: list[str]) -> Finding | None:
    if _negated(ta) != _negated(tb):
        return None  # "I don't hate X" / "I love X": a double flip, not a contradiction
    ca, cb = content_terms(ta), content_terms(tb)
    for x in ca - cb:
        for y in _OPPOSITE.get(x, ()):
            if y in cb and y not in ca:
                rest_a, rest_b = ca - {x}, cb - {y}
                # The rest is the same, or there is none ("I'm married" / "I'm single").
                if (not rest_a and not rest_b) or (rest_a & rest_b and _overlap(rest_a, rest_b) >= MIN_OVERLAP):
                    return Finding("antonym", f"Opposite words (“{x}” / “{y}”) in otherwise the same statement.", 0.75)
    return None


# --- the detector ------------------------------------------------------------------------------------------


def detect(a: str, b: str) -> Finding | None:
    """The strongest cue that ``a`` and ``b`` contradict each other, or None.

    Order matters only for which reason is shown: a pair is raised once.
    """
    sa, sb = subject(a), subject(b)
    if sa is None or sa != sb:
        return None
    ta, tb = words(a), words(b)
    finding = _one_value(a, b)
    if finding:
        return finding
    if _hedged(ta, a) or _hedged(tb, b):
        return None
    na, nb = normalise(a), normalise(b)
    return _diet(na, nb) or _negation(a, b, ta, tb) or _antonym(a, b, ta, tb)
