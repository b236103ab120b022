"""Cutting a document into chunks: heading-bounded, paragraph-aligned, bounded in size.

Plain text and Markdown alike: ATX (``# Title``) and setext (underlined) headings start a
new section, blank lines separate blocks, fenced code blocks are kept whole. A chunk never
spans two sections and holds whole blocks up to :data:`MAX_CHUNK_CHARS`; a block longer
than that is cut at sentence ends (or, failing that, at whitespace). Chunks keep the raw
Markdown (provenance); the distiller does its own clean-up.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_CHUNK_CHARS = 2_000

_ATX = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t#]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
# A sentence end followed by whitespace: where an oversized block may be cut.
_SENTENCE_END = re.compile(r"(?<=[.!?…])[\"'”’)\]]*\s+")


@dataclass(frozen=True)
class DocumentChunk:
    text: str
    heading: str  # the heading path, "Section > Subsection"; "" before the first heading


def _clean_heading(text: str) -> str:
    return re.sub(r"[*_`]+", "", text).strip()


def _blocks(lines: list[str]) -> list[tuple[str, str]]:
    """(kind, text) pairs: ("heading:<level>", title) or ("block", raw text)."""
    out: list[tuple[str, str]] = []
    current: list[str] = []
    fence: str | None = None

    def flush() -> None:
        if current and any(line.strip() for line in current):
            out.append(("block", "\n".join(current).strip("\n")))
        current.clear()

    for line in lines:
        if fence is not None:
            current.append(line)
            if line.strip().startswith(fence):
                fence = None
                flush()
            continue
        opening = _FENCE.match(line)
        if opening:
            flush()
            fence = opening.group(1)[:3]
            current.append(line)
            continue
        atx = _ATX.match(line)
        if atx:
            flush()
            out.append((f"heading:{len(atx.group(1))}", _clean_heading(atx.group(2))))
            continue
        if (
            _SETEXT.match(line)
            and len(current) == 1
            and current[0].strip()
            and not current[0].lstrip().startswith(("-", "*", "+", ">", "|"))
        ):
            title = current.pop()
            flush()
            out.append((f"heading:{1 if line.strip().startswith('=') else 2}", _clean_heading(title)))
            continue
        if not line.strip():
            flush()
            continue
        current.append(line)
    flush()
    return out


def _split_long(block: str, limit: int) -> list[str]:
    """Cut a block longer than ``limit`` at sentence ends, or at whitespace, or hard."""
    pieces: list[str] = []
    current = ""
    for sentence in _SENTENCE_END.split(block):
        while len(sentence) > limit:
            cut = sentence.rfind(" ", 0, limit)
            cut = cut if cut > limit // 2 else limit
            head, sentence = sentence[:cut], sentence[cut:].lstrip()
            if current:
                pieces.append(current)
                current = ""
            pieces.append(head)
        if current and len(current) + 1 + len(sentence) > limit:
            pieces.append(current)
            current = sentence
        else:
            current = f"{current} {sentence}" if current else sentence
    if current:
        pieces.append(current)
    return [p.strip() for p in pieces if p.strip()]


def chunk_document(text: str, *, max_chars: int = MAX_CHUNK_CHARS) -> list[DocumentChunk]:
    """The chunks of a document, in order."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    chunks: list[DocumentChunk] = []
    path: list[tuple[int, str]] = []  # (level, title) of the open headings
    pending: list[str] = []

    def heading() -> str:
        return " > ".join(title for _level, title in path if title)

    def flush() -> None:
        if pending:
            chunks.append(DocumentChunk(text="\n\n".join(pending), heading=heading()))
            pending.clear()

    for kind, value in _blocks(lines):
        if kind.startswith("heading:"):
            flush()
            level = int(kind.split(":")[1])
            path[:] = [(lv, t) for lv, t in path if lv < level] + [(level, value)]
            continue
        parts = [value] if len(value) <= max_chars else _split_long(value, max_chars)
        for part in parts:
            size = sum(len(p) + 2 for p in pending)
            if pending and size + len(part) > max_chars:
                flush()
            pending.append(part)
    flush()
    return chunks
