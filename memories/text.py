"""Text normalisation and hashing for dedup; the speaker prefix and the text a memory is embedded by."""

from __future__ import annotations

import calendar
import hashlib
import re
import unicodedata
from dataclasses import dataclass

_WHITESPACE = re.compile(r"\s+")
# A transcript line: "Caroline: I went to…", "Dr. Lee: take two a day", "O’Brien : hi" — one to
# three capitalised words (of at most 31 characters each) and a colon, with text after it.
_SPEAKER_PREFIX = re.compile(r"^\s*([A-Z][\w'’.-]{0,30}(?: [A-Z][\w'’.-]{0,30}){0,2})\s*:\s+(?=\S)")
# Labels that open a note rather than name a speaker ("Note: ...", "Update: ...").
NOTE_LABELS = frozenset({
    "note", "notes", "update", "reminder", "todo", "fyi", "important", "summary", "question", "answer", "q", "a",
    "re", "subject", "tip", "warning", "edit", "ps", "p.s", "nb", "context", "fact", "memory", "goal", "task",
    "idea", "plan", "status", "result", "problem", "solution", "example", "source", "title", "topic", "today",
    "tomorrow", "yesterday", "morning", "evening", "tonight", "breakfast", "lunch", "dinner", "agenda", "action",
    "decision", "preference", "info", "correction", "caveat", "error", "hint", "observation",
})  # fmt: skip
# Titles a name may open with ("Dr. Lee"): alone ("Dr.:"), with articles, they name nobody.
TITLES = frozenset({"mr", "mrs", "ms", "miss", "dr", "prof", "sir", "madam", "mx"})
_ARTICLES = frozenset({"the", "a", "an"})
# "Monday: gym", "March: taxes": a date opens the line, not a speaker.
_DATE_WORDS = frozenset(name.lower() for name in (*calendar.month_name, *calendar.day_name) if name)
# The ASCII punctuation (Unicode category P), as a str.translate table: most memories are
# ASCII, and translating them in C is several times faster than the per-character loop.
_ASCII_PUNCTUATION = {cp: " " for cp in range(128) if unicodedata.category(chr(cp)).startswith("P")}


def normalize_for_hash(text: str) -> str:
    """Lowercase, replace punctuation with spaces, collapse whitespace.

    Not lemmatised on purpose (seed 000): "cat" and "cats" are different facts.
    Punctuation becomes a space rather than vanishing, so "dark-roast" and
    "dark roast" normalise alike. Symbols such as emoji are kept: "I love 🍕"
    and "I love 🍣" are not duplicates.
    """
    text = unicodedata.normalize("NFKC", text).casefold()
    if text.isascii():
        text = text.translate(_ASCII_PUNCTUATION)
    else:
        text = "".join(" " if unicodedata.category(ch).startswith("P") else ch for ch in text)
    return _WHITESPACE.sub(" ", text).strip()


def text_hash(text: str) -> str:
    """MD5 (32 hex characters) of the normalised text. Text that normalises to
    nothing (only punctuation) is hashed verbatim, so "!!!" and "???" stay distinct."""
    return hash_key(text)[1]


def hash_key(text: str) -> tuple[int, str]:
    """``(length of the hashed text, text_hash(text))``: one order for every text,
    shortest first, that texts with the same hash share (the write path inserts in it)."""
    normalized = normalize_for_hash(text) or text.strip()
    return len(normalized), hashlib.md5(normalized.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class SpeakerPrefix:
    """A leading "Name: " of a memory's text (:func:`speaker_prefix`)."""

    label: str  # as written: "Caroline", "Dr. Lee", "Note"
    end: int  # where the text after it starts
    kind: str  # "name" (a person), "user" ("User:", "Me:"), "assistant", or "label" (no speaker: "Note:", "Monday:")

    @property
    def speaker(self) -> str | None:
        """Who speaks, as written: the label unless it is a note's label or a date."""
        return None if self.kind == "label" else self.label


def speaker_prefix(text: str) -> SpeakerPrefix | None:
    """The leading "Name: " of a transcript line, or None: one to three capitalised words and a
    colon with text after it ("Caroline: I went to a support group"). "User:"/"Me:" and
    "Assistant:" name those two; a note's label ("Note:", "Update:"), a month or weekday
    ("Monday: gym") or a title alone ("Dr.:") is a prefix but names no speaker. The one reader of such prefixes: what a
    memory is embedded by (:func:`embedding_text`), who retrieval hears speaking
    (:func:`transcript_speaker`) and whom the graph makes the "I" (graph.extract.split_speaker)."""
    match = _SPEAKER_PREFIX.match(text)
    if match is None:
        return None
    label = match.group(1)
    lower = label.casefold().rstrip(".")
    if lower in {"user", "me"}:
        kind = "user"
    elif lower == "assistant":
        kind = "assistant"
    elif (
        lower in NOTE_LABELS
        or lower.split()[0] in _DATE_WORDS
        or all(word.strip(".'’-") in TITLES | _ARTICLES for word in lower.split())
    ):
        kind = "label"
    else:
        kind = "name"
    return SpeakerPrefix(label=label, end=match.end(), kind=kind)


def transcript_speaker(content: str) -> str | None:
    """The speaker a memory's text names at its start ("Caroline: …" → "Caroline"), or None
    (none, or a note's label or a date: "Note: …", "Monday: …")."""
    prefix = speaker_prefix(content)
    return prefix.speaker if prefix else None


def embedding_text(content: str, attributed_to: str | None) -> str:
    """The text a memory's own vector is computed from: without a leading "Name: " (or "Note: ")
    when the memory has no attribution (the speaker is then its attribution, matched by name at
    search time). In a short transcript line the name would otherwise dominate the vector: every
    "Nate: You too!" lands near every question about Nate."""
    if attributed_to is None:
        prefix = speaker_prefix(content)
        if prefix:
            return content[prefix.end :]
    return content
