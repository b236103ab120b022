"""Text normalisation and hashing for dedup; the speaker prefix and the text a memory is embedded by."""

from __future__ import annotations

import hashlib
import re
import unicodedata

_WHITESPACE = re.compile(r"\s+")
# A transcript line: "Caroline: I went to…", "Dr. Lee: take two a day".
_SPEAKER_PREFIX = re.compile(r"^\s*([A-Z][\w'.-]{0,30}(?: [A-Z][\w'.-]{0,30}){0,2}):\s+(?=\S)")
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


def transcript_speaker(content: str) -> str | None:
    """The speaker a memory's text names at its start ("Caroline: …" → "Caroline"), or None."""
    match = _SPEAKER_PREFIX.match(content)
    return match.group(1) if match else None


def embedding_text(content: str, attributed_to: str | None) -> str:
    """The text a memory's own vector is computed from: without a leading "Name: " when the
    memory has no attribution (the speaker is then its attribution, matched by name at search
    time). In a short transcript line the name would otherwise dominate the vector: every
    "Nate: You too!" lands near every question about Nate."""
    if attributed_to is None:
        match = _SPEAKER_PREFIX.match(content)
        if match:
            return content[match.end() :]
    return content
