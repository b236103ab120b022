"""Judging and shaping statements: what to drop (filler, empty questions), what to trim, when a
statement needs its heading, and the bounds every statement keeps (length, no repeats)."""

from __future__ import annotations

import re
from functools import lru_cache

from sources.distill.units import MAX_STATEMENT_CHARS, Statement

_FILLER_PHRASES = sorted(
    """
    hi|hello|hey|heya|hiya|yo|howdy|greetings|hi all|hello all|hey all|hi everyone|hello everyone|hey everyone
    |hi there|hello there|hey there|hey guys|hi guys|hi folks|hi team|hello team|dear all|good morning
    |good afternoon|good evening|good night|morning|evening
    |welcome|welcome back|welcome home|thanks|thank you|thanks a lot|thanks so much|thank you so much|thanks again
    |thank you again|many thanks|thx|ty|tysm|cheers|much appreciated|appreciate it|i appreciate it|really
    |ok|okay|k|kk|sure|cool|nice|great|awesome|perfect|lovely|amazing|wonderful|fantastic|excellent|neat|sweet
    |got it|noted|sounds good|sounds great|sounds fun|sounds like fun|sounds like a plan|sounds like a fun day
    |makes sense|right|alright|all right|yes|yeah|yep|yup|yes please|no|nope|nah|no thanks|of course|absolutely
    |exactly|indeed|true|fair|fair enough|agreed|will do|good|good idea|good point|good choice|good call|good news
    |interesting|wow|oh|ah|aha|hmm|hm|uh|um|er|lol|haha|hahaha|hehe|lmao|rofl|ugh|oops|sorry|no problem
    |no worries|np|you re welcome|your welcome|my pleasure|happy to help|glad to help|glad i could help|bye
    |goodbye|bye bye|see you|see ya|see you later|talk later|talk soon|ttyl|later|take care|have a nice day
    |have a good one|have fun|good luck|enjoy|congrats|congratulations|well done|nice work|great job|great question
    |good question|real question|sorry to hear that|i m sorry to hear that|so sorry|that s great|that s awesome
    |that s amazing
    |that s wonderful|that s fantastic|that s so cool|that s cool|that s nice|that s fun|how fun|how exciting
    |how are you|how are you doing|how s it going|what s up|sup|how have you been|you too|same to you|me too
    |i m good|i m fine|i m great|i m well|i m doing well|i m doing great|i m doing good|doing well|doing good
    |not bad|all good|how can i help|how can i help you|how can i help you today|what can i do for you
    |let me know|let me know if you need anything|anything else|is there anything else|happy to|any time|anytime
    |anyway|anyways|so|well|and|also|but|then|now|just|one more thing|quick question|that s all|that s it
    """.replace("\n", "").split("|"),
    key=len,
    reverse=True,
)
# Phrases as word tuples; a sentence is filler when it splits into them entirely (is_filler).
_FILLER = frozenset(tuple(p.split()) for p in _FILLER_PHRASES if p.strip())
_FILLER_LONGEST = max(len(p) for p in _FILLER)
# Longer than this, a sentence is not small talk (and the check stays cheap on hostile input).
FILLER_MAX_WORDS = 24
_LEADING_INTERJECTION = re.compile(
    r"^(?:(?:ok(?:ay)?|so|well|oh|ah|ugh|yeah|yes|yep|hmm+|lol|haha+|hey|cool|right|alright|also|and|but|anyway"
    r"|btw|fyi|honestly|actually|basically|update|oh well|ok so|ok real question|real question)\b[\s,.!:;-]*)+",
    re.IGNORECASE,
)
_TRAILING_FILLER = re.compile(r"(?:[\s,]+(?:lol|haha+|hehe|lmao|rofl|xd|:\)|:\(|:d|;\)|\^\^))+\s*([.!?]*)$", re.I)
_LEADING_LETTERS = re.compile(r"[^\W\d_]+")
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?", re.UNICODE)
_FIRST_PERSON = re.compile(r"\b(?:i|i'm|i've|i'd|i'll|me|my|mine|myself|we|we're|we've|us|our|ours)\b", re.I)


def _normal(text: str) -> str:
    words = _WORD.findall(text.lower().replace("’", "'"))
    return " ".join(w.replace("'", " ") for w in words)


def is_filler(text: str) -> bool:
    """Greetings, thanks, acknowledgements and small talk, and nothing else: the words split
    entirely into filler phrases ("ok cool, thx" = "ok" + "cool" + "thx")."""
    if len(text) > FILLER_MAX_WORDS * 20:
        return False
    words = _normal(text).split()
    if not words:
        return True
    if len(words) > FILLER_MAX_WORDS:
        return False
    # reachable[i]: words[:i] splits into filler phrases (linear in the words, no backtracking).
    reachable = [True] + [False] * len(words)
    for start in range(len(words)):
        if reachable[start]:
            for end in range(start + 1, min(len(words), start + _FILLER_LONGEST) + 1):
                if tuple(words[start:end]) in _FILLER:
                    reachable[end] = True
    return reachable[-1]


def _has_number(text: str) -> bool:
    return any(ch.isdigit() for ch in text)


def _has_proper_noun(text: str) -> bool:
    """A capitalised word that is not the first word and not "I" (casual text is lowercase,
    so a capital letter mid-sentence is a strong sign of a name)."""
    words = _WORD.findall(text)
    return any(w[0].isupper() and w not in ("I", "I'm", "I've", "I'd", "I'll") for w in words[1:])


def is_question(text: str) -> bool:
    return text.rstrip(" \"'”’)").endswith("?")


def informative_question(text: str) -> bool:
    """A question worth keeping: it names something, has a number, or tells about the asker."""
    if _has_number(text) or _has_proper_noun(text):
        return True
    return bool(_FIRST_PERSON.search(text)) and len(_WORD.findall(text)) >= 7


def trim(text: str) -> str:
    """Leading interjections and trailing "lol"s removed; the first letter capitalised."""
    text = text.strip().lstrip("-–—•*").strip()
    trimmed = _LEADING_INTERJECTION.sub("", text).strip()
    if trimmed and len(_WORD.findall(trimmed)) >= 1:
        text = trimmed
    head, tail = text[:-120], text[-120:]  # (the pattern only ever looks at the end)
    text = (head + _TRAILING_FILLER.sub(r"\1", tail)).strip()
    first = _LEADING_LETTERS.match(text)
    if first and first.group().islower():  # not "iPhone", "eBay"
        text = text[0].upper() + text[1:]
    return text


def word_count(text: str) -> int:
    return len(_WORD.findall(text))


@lru_cache(maxsize=1)
def _stop_words() -> frozenset[str]:
    try:
        from spacy.lang.en.stop_words import STOP_WORDS

        return frozenset(STOP_WORDS)
    except Exception:  # pragma: no cover - spaCy is a dependency
        return frozenset()


def _content_words(text: str) -> set[str]:
    stops = _stop_words()
    return {w for w in _normal(text).split() if len(w) > 2 and w not in stops}


_NEEDS_ANTECEDENT = frozenset(
    "it its this that these those they them their he him his she her there here such both each".split()
)


def needs_context(statement: str) -> bool:
    """A statement that leans on its surroundings: it opens with a pronoun or demonstrative,
    or names nothing (no capitalised word after the first)."""
    words = _WORD.findall(statement)
    if not words:
        return False
    return words[0].lower() in _NEEDS_ANTECEDENT or not _has_proper_noun(statement)


def with_heading(statement: str, heading: str, *, always: bool = False) -> str:
    """``"Heading: statement"`` when the statement needs context (``always``: list items and
    table rows) and does not already mention what its heading is about."""
    if not heading:
        return statement
    subject = _content_words(heading)
    if not subject or subject & _content_words(statement):
        return statement
    if not always and not needs_context(statement):
        return statement
    return f"{heading}: {statement}"


def bounded(text: str) -> str:
    if len(text) <= MAX_STATEMENT_CHARS:
        return text
    cut = text.rfind(" ", 0, MAX_STATEMENT_CHARS)
    return text[: cut if cut > MAX_STATEMENT_CHARS // 2 else MAX_STATEMENT_CHARS].rstrip() + "…"


def unique(statements: list[Statement]) -> list[Statement]:
    seen: set[str] = set()
    out = []
    for s in statements:
        key = _normal(s.text)
        if key and key not in seen:
            seen.add(key)
            out.append(s)
    return out
