"""Markdown and text clean-up: a document's text as plain paragraphs, list items and table rows."""

from __future__ import annotations

import re
from dataclasses import dataclass

_IMAGE = re.compile(r"!\[([^\]]*)\]\([^)]*\)")
_LINK = re.compile(r"\[([^\]]+)\]\([^)]*\)")
_REF_LINK = re.compile(r"\[([^\]]+)\]\[[^\]]*\]")
_AUTOLINK = re.compile(r"<((?:https?|mailto):[^>\s]+)>")
_FOOTNOTE = re.compile(r"\[\^[^\]]+\]")
_HTML_TAG = re.compile(r"</?[A-Za-z][^>]*>")
_CODE = re.compile(r"`+([^`]+)`+")
_EMPHASIS = re.compile(r"(?<![\w*~])(\*{1,3}|_{1,3}|~~)(?=\S)(.+?)(?<=\S)\1(?![\w*~])")
_WHITESPACE = re.compile(r"\s+")
_LIST_ITEM = re.compile(r"^\s{0,6}(?:[-*+•]|\d{1,3}[.)])\s+(.*)$")
_TABLE_SEPARATOR = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
_RULE = re.compile(r"^\s{0,3}([-*_])(\s*\1){2,}\s*$")
_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")


def inline_plain(text: str) -> str:
    """Markdown inline syntax removed: links keep their text, images and footnote marks go."""
    text = _IMAGE.sub("", text)
    text = _LINK.sub(r"\1", text)
    text = _REF_LINK.sub(r"\1", text)
    text = _AUTOLINK.sub(r"\1", text)
    text = _FOOTNOTE.sub("", text)
    text = _HTML_TAG.sub("", text)
    text = _CODE.sub(r"\1", text)
    for _ in range(2):  # nested emphasis (***bold italic***, **_both_**)
        text = _EMPHASIS.sub(r"\2", text)
    return _WHITESPACE.sub(" ", text).strip()


@dataclass
class _Block:
    kind: str  # "para" | "item" | "row"
    text: str
    intro: str = ""  # list items: the line that introduced the list ("Allergies:")


def _table_row(cells: list[str], header: list[str]) -> str:
    if header and len(header) == len(cells):
        pairs = [f"{h}: {c}" for h, c in zip(header, cells, strict=True) if c and h]
        return "; ".join(pairs)
    return "; ".join(c for c in cells if c)


def _split_cells(line: str) -> list[str]:
    return [inline_plain(c) for c in line.strip().strip("|").split("|")]


def blocks(text: str) -> list[_Block]:
    """Paragraphs, list items (with the line that introduced them) and table rows; code goes."""
    out: list[_Block] = []
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    paragraph: list[str] = []
    intro = ""
    fence: str | None = None
    header: list[str] = []
    in_table = False

    def flush_paragraph() -> None:
        nonlocal intro
        if paragraph:
            joined = inline_plain(" ".join(paragraph))
            if joined:
                out.append(_Block("para", joined))
                intro = joined if joined.endswith(":") else ""
            paragraph.clear()

    for raw in lines:
        if fence is not None:
            if raw.strip().startswith(fence):
                fence = None
            continue
        opening = _FENCE.match(raw)
        if opening:
            flush_paragraph()
            fence = opening.group(1)[:3]
            continue
        line = raw.strip()
        while line.startswith(">"):
            line = line[1:].strip()
        if not line:
            flush_paragraph()
            in_table = False
            continue
        if _RULE.match(line):
            flush_paragraph()
            continue
        if line.startswith("|") or (in_table and "|" in line):
            if _TABLE_SEPARATOR.match(line):
                continue
            cells = _split_cells(line)
            if not in_table:
                flush_paragraph()
                in_table = True
                header = cells
                continue
            row = _table_row(cells, header)
            if row:
                out.append(_Block("row", row))
            continue
        item = _LIST_ITEM.match(line)
        if item:
            flush_paragraph()
            out.append(_Block("item", inline_plain(item.group(1)), intro=intro))
            continue
        if out and out[-1].kind == "item" and not paragraph and raw.startswith((" ", "\t")):
            out[-1].text = f"{out[-1].text} {inline_plain(line)}"  # a list item's continuation line
            continue
        paragraph.append(line)
    flush_paragraph()
    # An introducing line ("Allergies:") is context for its items, not a statement of its own.
    return [b for b in out if not (b.kind == "para" and b.text.endswith(":") and len(b.text.split()) <= 12)]
