"""First person -> the speaker: "I moved" becomes "Maya moved" when a conversation asks for it."""

from __future__ import annotations

_BE_PRESENT = {"am": "is", "'m": "is", "’m": "is"}
_HAVE = {"have": "has", "'ve": "has", "’ve": "has"}
_MODAL_CONTRACTIONS = {"'d": "would", "’d": "would", "'ll": "will", "’ll": "will"}
_ES_ENDINGS = ("s", "sh", "ch", "x", "z", "o")


def third_person(verb: str) -> str:
    """The third-person singular present of a verb ("work" → "works", "try" → "tries")."""
    lower = verb.lower()
    irregular = {"be": "is", "am": "is", "have": "has", "do": "does", "go": "goes"}
    if lower in irregular:
        form = irregular[lower]
    elif lower.endswith("y") and len(lower) > 1 and lower[-2] not in "aeiou":
        form = lower[:-1] + "ies"
    elif lower.endswith(_ES_ENDINGS):
        form = lower + "es"
    else:
        form = lower + "s"
    return form.capitalize() if verb[:1].isupper() else form


def resolve_first_person(doc, speaker: str) -> str:
    """First person singular in a parsed statement replaced by the speaker, the verb agreeing
    ("I am" → "Maya is", "I work" → "Maya works", "my" → "Maya's"). "we" and "our" stay:
    who else is meant is not known."""
    span = doc
    replaced: dict[int, str] = {}  # token index -> new text
    for token in span:
        lower = token.text.lower()
        if lower == "i" and token.pos_ == "PRON":
            replaced[token.i] = speaker
            head = token.head
            if token.dep_ in ("nsubj", "nsubjpass"):
                # The first auxiliary or the verb itself carries the agreement ("I don't", "I have been").
                auxes = [c for c in head.children if c.dep_ in ("aux", "auxpass") and c.i > token.i]
                target = auxes[0] if auxes else head
                if target.i > token.i and target.i not in replaced:
                    t = target.text.lower()
                    if t in _BE_PRESENT:
                        replaced[target.i] = _BE_PRESENT[t]
                    elif t in _HAVE and target.tag_ in ("VBP", "VB"):
                        replaced[target.i] = _HAVE[t]
                    elif t in _MODAL_CONTRACTIONS:
                        replaced[target.i] = _MODAL_CONTRACTIONS[t]
                    elif target.tag_ == "VBP":
                        replaced[target.i] = third_person(target.text)
        elif lower in ("me", "myself") and token.pos_ == "PRON":
            replaced[token.i] = speaker
        elif lower in ("my", "mine") and token.pos_ == "PRON":
            replaced[token.i] = f"{speaker}'s"
    if not replaced:
        return span.text
    out = []
    for token in span:
        new = replaced.get(token.i)
        if new is None:
            out.append(token.text_with_ws)
            continue
        if token.text.startswith(("'", "’")):
            new = " " + new  # "I'm" -> "Maya is": the contraction had no space before it
        out.append(new + token.whitespace_)
    result = "".join(out).strip()
    return result[0].upper() + result[1:] if result else result
