"""Sentence segmentation: spaCy's parser when it is available, a regular-expression splitter otherwise."""

from __future__ import annotations

import re

from engram_site.providers import nlp

_ABBREVIATIONS = frozenset(
    """
    mr mrs ms dr prof st jr sr mt ave blvd rd no vs etc approx dept est inc ltd co corp fig eg ie cf al
    jan feb mar apr jun jul aug sep sept oct nov dec mon tue tues wed thu thur thurs fri sat sun
    """.split()
)
_END_MARKS = ".!?…:;\"')”’"
_REGEX_BOUNDARY = re.compile(r"([.!?…]+[\"'”’)\]]*)\s+")


def _regex_sentences(text: str) -> list[str]:
    """A splitter for when spaCy is unavailable: ends of sentences, minus abbreviations and initials."""
    sentences: list[str] = []
    start = 0
    for match in _REGEX_BOUNDARY.finditer(text):
        before = text[start : match.start()].rsplit(None, 1)
        last = before[-1].lower().rstrip(".").replace(".", "") if before else ""
        if match.group(1) == "." and (last in _ABBREVIATIONS or (len(last) == 1 and last.isalpha())):
            continue
        sentences.append(text[start : match.end()].strip())
        start = match.end()
    tail = text[start:].strip()
    if tail:
        sentences.append(tail)
    return sentences


def pipeline():
    try:
        return nlp.get_pipeline()
    except Exception:  # PipelineUnavailable, or the graph app switched off
        return None


def sentences(text: str) -> list[str]:
    nlp = pipeline()
    if nlp is None:
        return _regex_sentences(text)
    out: list[str] = []
    for span in nlp(text).sents:
        piece = span.text.strip()
        if not piece:
            continue
        # The parser sometimes cuts unpunctuated chat mid-sentence ("I work nights | and I'm
        # training"): a piece starting in lowercase after one without an end mark continues it.
        if out and out[-1][-1:] not in _END_MARKS and piece[:1].islower():
            out[-1] = f"{out[-1]} {piece}"
        else:
            out.append(piece)
    return out
