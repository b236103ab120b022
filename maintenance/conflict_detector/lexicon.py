"""The words of a short statement: normalised text, crude lemmas, numbers, and the word lists
the cues read it with (negations, stop words, hedges, dated and past markers)."""

from __future__ import annotations

import re
from functools import lru_cache

# --- normalisation ---------------------------------------------------------------------------------------

_CONTRACTIONS = [
    (r"\bcan't\b", "can not"), (r"\bcannot\b", "can not"), (r"\bwon't\b", "will not"), (r"\bshan't\b", "shall not"),
    (r"\bain't\b", "am not"), (r"\b(\w+)n't\b", r"\1 not"), (r"\bi'm\b", "i am"), (r"\b(\w+)'re\b", r"\1 are"),
    (r"\b(\w+)'ve\b", r"\1 have"), (r"\b(\w+)'ll\b", r"\1 will"), (r"\b(\w+)'d\b", r"\1 would"),
    (r"\b(it|that|there|what|he|she|who|here)'s\b", r"\1 is"),
]  # fmt: skip
# Fixed phrases read as one word or as their plain meaning, before negations are counted.
_PHRASES = [
    (r"\b(?:can|could) not stand\b", "hate"), (r"\bam not a fan of\b", "dislike"), (r"\bnot any ?more\b", "no longer"),
(r"\bhave got\b", "have"), (r"\bhas got\b", "has"), (r"\bbeen to\b", "gone to"),
    (r"\ban early riser\b", "a morning person"), (r"\ba night owl\b", "a night person"),
    (r"\bam an only child\b", "have no siblings"), (r"\bright now\b", "now"), (r"\bthese days\b", "now"),
    (r"\bat all\b", ""), (r"\ba lot\b", ""), (r"\bfull time\b", "full-time"), (r"\bpart time\b", "part-time"),
    (r"\bof (?:my|our) own\b", ""), (r"\b(my|our) own\b", r"\1"), (r"\bcut out\b", "quit"),
    (r"\bgive up\b", "quit"), (r"\bgave up\b", "quit"), (r"\bgiven up\b", "quit"),
    (r"\bstop(?:ped|s)?\b", "quit"), (r"\bquits\b", "quit"), (r"\btook up\b", "started"),
]  # fmt: skip


def normalise(text: str) -> str:
    text = text.lower().replace("’", "'").replace("‘", "'").replace("–", "-").replace("—", ", ")
    for pattern, replacement in _CONTRACTIONS:
        text = re.sub(pattern, replacement, text)
    for pattern, replacement in _PHRASES:
        text = re.sub(pattern, replacement, text)
    text = re.sub(r"(\d),(\d{3})\b", r"\1\2", text)  # 3,000 -> 3000
    text = re.sub(r"(\d)(am|pm|km|kg|cm|h)\b", r"\1 \2", text)  # 10am -> 10 am
    return re.sub(r"\s+", " ", text).strip()


TOKEN = re.compile(r"\d+(?:[.:]\d+)?(?:-[a-z]+)*|[a-zà-ÿ]+(?:-[a-zà-ÿ]+)*|\?")


def words(text: str) -> list[str]:
    return TOKEN.findall(normalise(text))


# --- lemmas ----------------------------------------------------------------------------------------------

_IRREGULAR = {
    "am": "be", "is": "be", "are": "be", "was": "be", "were": "be", "been": "be", "being": "be",
    "has": "have", "had": "have", "having": "have", "does": "do", "did": "do", "done": "do",
    "goes": "go", "went": "go", "gone": "go", "going": "go", "ate": "eat", "eaten": "eat", "drank": "drink",
    "drunk": "drink", "sold": "sell", "bought": "buy", "made": "make", "took": "take", "taken": "take",
    "drove": "drive", "driven": "drive", "ran": "run", "swam": "swim", "swum": "swim", "spoke": "speak",
    "spoken": "speak", "wore": "wear", "worn": "wear", "rode": "ride", "ridden": "ride", "saw": "see",
    "seen": "see", "got": "get", "gotten": "get", "gave": "give", "given": "give", "told": "tell", "left": "leave",
    "felt": "feel", "slept": "sleep", "met": "meet", "thought": "think", "kept": "keep", "began": "begin",
    "begun": "begin", "wrote": "write", "written": "write", "paid": "pay", "lost": "lose", "won": "win",
    "flew": "fly", "flown": "fly", "grew": "grow", "grown": "grow", "knew": "know", "known": "know",
    "brought": "bring", "caught": "catch", "taught": "teach", "sat": "sit", "stood": "stand", "spent": "spend",
    "sent": "send", "built": "build", "heard": "hear", "found": "find", "held": "hold", "broke": "break",
    "broken": "break", "chose": "choose", "chosen": "choose", "forgot": "forget", "stole": "steal",
    "stolen": "steal", "fell": "fall", "became": "become", "came": "come", "children": "child", "kids": "child",
    "kid": "child", "grandchildren": "grandchild", "grandkids": "grandchild", "men": "man", "women": "woman",
    "people": "person", "feet": "foot", "married": "marry", "news": "news", "films": "movie", "film": "movie",
    "television": "tv", "telly": "tv", "bicycle": "bike", "bicycles": "bike", "quitting": "quit", "lying": "lie",
    "dying": "die", "died": "die", "series": "series", "glasses": "glass", "classes": "class", "buses": "bus",
}  # fmt: skip
_VOWEL = re.compile(r"[aeiouy]")


@lru_cache(maxsize=20_000)
def lemma(word: str) -> str:
    """A crude lemma: enough to match "drinks"/"drank"/"drinking", "cups"/"cup", "went"/"gone"/"go".
    Not a dictionary form ("love" -> "lov"), only the same key for the forms of one word."""
    w = _IRREGULAR.get(word, word)
    if len(w) <= 3 or not w.isalpha():
        return w
    if w.endswith("ies") and len(w) > 4:
        w = w[:-3] + "y"
    elif w.endswith(("sses", "ches", "shes", "xes", "zes")):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    if w.endswith("ing") and len(w) >= 5 and _VOWEL.search(w[:-3]):
        w = w[:-3]
        if len(w) >= 3 and w[-1] == w[-2] and w[-1] not in "aeiouls":
            w = w[:-1]  # running -> runn -> run
    elif w.endswith("ed") and len(w) >= 4 and not w.endswith("eed") and _VOWEL.search(w[:-2]):
        w = w[:-2]
        if len(w) >= 3 and w[-1] == w[-2] and w[-1] not in "aeiouls":
            w = w[:-1]  # stopped -> stop
    return w[:-1] if len(w) > 3 and w.endswith("e") else w


# --- numbers ---------------------------------------------------------------------------------------------

_UNITS_WORDS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
    "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16,
    "seventeen": 17, "eighteen": 18, "nineteen": 19, "once": 1, "twice": 2, "a": 1, "an": 1,
}  # fmt: skip
_TENS_WORDS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80,
               "ninety": 90}  # fmt: skip


def number(token: str, *, articles: bool = False) -> float | None:
    """The value of a number written in digits or words ("34", "1.80", "thirty-four", "twice");
    "a"/"an" count as 1 only when ``articles``."""
    if re.fullmatch(r"\d+(?:\.\d+)?", token):
        return float(token)
    if token in ("a", "an") and not articles:
        return None
    if token in _UNITS_WORDS:
        return float(_UNITS_WORDS[token])
    if token in _TENS_WORDS:
        return float(_TENS_WORDS[token])
    parts = token.split("-")
    if len(parts) == 2 and parts[0] in _TENS_WORDS and parts[1] in _UNITS_WORDS and parts[1] not in ("a", "an"):
        return float(_TENS_WORDS[parts[0]] + _UNITS_WORDS[parts[1]])
    if token in ("hundred",):
        return 100.0
    return None


# --- words that carry no content for comparing two statements ---------------------------------------------

NEGATORS = {"not", "never", "no", "nobody", "nothing", "nowhere", "neither", "nor", "none"}
STOPWORDS = {
    "a", "an", "the", "and", "or", "but", "so", "to", "of", "in", "on", "at", "for", "with", "by", "from", "as",
    "is", "am", "are", "was", "were", "be", "been", "being", "do", "does", "did", "will", "would", "shall",
    "should", "can", "could", "may", "might", "must", "i", "me", "my", "mine", "myself", "we", "us", "our", "you",
    "your", "he", "him", "his", "she", "her", "they", "them", "their", "it", "its", "this", "that", "these",
    "those", "there", "here", "very", "really", "just", "also", "too", "still", "again", "actually", "now", "then",
    "all", "any", "anything", "anyone", "some", "much", "many", "more", "most", "quite", "user", "s", "lot", "lots",
    "always", "usually", "longer", "ever", "even", "either", "pretty", "totally", "completely", "honestly",
    "currently", "nowadays", "anymore", "lately", "recently", "generally", "normally", "typically", "definitely",
    "certainly",
    "probably", "already", "only", "about", "around", "roughly", "approximately", "nearly", "almost", "like", "up",
    "into", "off", "out", "where", "which", "who", "whom", "what", "how", "why", "other",
}  # fmt: skip
STOPWORDS -= {"like"}  # a verb here ("I like cats")
# Words that mark a statement as hedged, wished, planned or about someone else's view.
HEDGES = {
    "maybe", "perhaps", "might", "wish", "if", "whether", "think", "thinks", "believe", "guess", "says", "said",
    "told", "tells", "want", "wants", "wanted", "hope", "hoping", "hopes", "trying", "try", "tries", "plan",
    "planning", "plans", "until", "should", "supposed", "considering", "dream", "dreams", "imagine", "pretend",
    "wonder", "doubt", "unless", "gonna", "thinking",
}  # fmt: skip
# "going to the gym", "going to work": a place, not the future ("going to quit").
_PLACE_AFTER_TO = r"(?:the|a|an|my|our|his|her|their|work|school|bed|church|class|college|university|uni|town|"
_PLACE_AFTER_TO += r"sleep|lunch|dinner|breakfast|[a-z]+ing)\b"
GOING_TO = r"\bgoing to\b(?! " + _PLACE_AFTER_TO + r")"
HEDGE_PHRASES = re.compile(
    r"\bused to\b|" + GOING_TO + r"|\bneed to\b|\bneeds to\b|\bought to\b|\bwould like\b|\bwould love\b|\bnot sure\b|"
    r"\bnext (?:week|month|year|summer|spring|"
    r"autumn|fall|winter|time)\b|\bsomeday\b|\bone day\b|\bonce upon\b"
)
# "I believe in ghosts" states a belief, not a hedge: the phrase is kept apart from HEDGES above.
BELIEF = re.compile(r"\bbelieve in\b")
# Past periods that date a statement: it was so then, and may have changed since.
DATED = re.compile(
    r"\bas an? (?:child|kid|teenager|teen|student|boy|girl|baby|toddler)\b|\bwhen (?:i|we) (?:was|were|lived|"
    r"arrived|started|moved|met)\b|\bin (?:college|school|high school|university|uni|kindergarten)\b|\bin my "
    r"(?:teens|twenties|thirties|forties|fifties|sixties|youth|childhood|student days)\b|\bback (?:then|in)\b|"
    r"\bat the time\b|\byears ago\b|\b(?:19|20)\d\d\b|\blast (?:year|summer|winter|spring|autumn|fall|decade)\b|"
    r"\bbefore (?:the|my|i|we|that|then|college|school)\b|\bgrowing up\b|\bin the past\b|\bpreviously\b|\bformerly\b|"
    r"\bduring (?:college|school|university|the pandemic|lockdown)\b|\bfor the first time\b|\bfirst time\b"
)
PAST_MARKERS = re.compile(
    r"\byesterday\b|\blast (?:night|week|weekend|month|monday|tuesday|wednesday|thursday|friday|saturday|sunday|"
    r"time)\b|\bago\b|\bearlier today\b|\bthis morning\b|\bthe other day\b|\bon (?:monday|tuesday|wednesday|thursday|"
    r"friday|saturday|sunday)\b(?!s)"
)
# Past forms of verbs (besides words in -ed).
_PAST_FORMS = {
    "was", "were", "did", "had", "went", "ate", "drank", "sold", "bought", "made", "took", "drove", "ran", "swam",
    "spoke", "wore", "rode", "saw", "got", "gave", "told", "left", "felt", "slept", "met", "thought", "kept", "began",
    "wrote", "paid", "lost", "won", "flew", "grew", "knew", "brought", "caught", "taught", "sat", "stood", "spent",
    "sent", "built", "heard", "found", "held", "broke", "chose", "forgot", "stole", "fell", "became", "came",
    "could", "couldn", "quit", "turned", "died",
}  # fmt: skip
_ADJECTIVES_IN_ED = {"married", "retired", "engaged", "divorced", "widowed", "tired", "interested", "bored",
                     "scared", "allowed", "closed", "employed", "unemployed", "excited", "worried", "used",
                     "based", "needed", "vaccinated", "qualified", "separated", "obsessed", "related"}  # fmt: skip
_PARTICIPLES = {"been", "gone", "had", "done", "eaten", "drunk", "sold", "bought", "made", "taken", "driven",
                "swum", "spoken", "worn", "ridden", "seen", "got", "gotten", "given", "told", "left", "felt",
                "slept", "met", "kept", "begun", "written", "paid", "lost", "won", "flown", "grown", "known",
                "brought", "caught", "taught", "sat", "stood", "spent", "sent", "built", "heard", "found", "held",
                "broken", "chosen", "forgotten", "stolen", "fallen", "become", "come", "quit", "tried", "owned",
                "lived", "worked", "played", "used", "started", "finished", "visited", "tasted"}  # fmt: skip


def is_past_form(token: str) -> bool:
    return token in _PAST_FORMS or (token.endswith("ed") and len(token) > 4 and token not in _ADJECTIVES_IN_ED)


MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october", "november",
          "december")  # fmt: skip
DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
# A number in digits or words, as a regular expression's group.
NUM = r"(\d{1,3}|[a-z]+(?:-[a-z]+)?)"
