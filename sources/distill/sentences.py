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


# What splitting into sentences needs of the pipeline: the dependency parse (and the token
# vectors it reads). The tagger, lemmatizer and entity recognizer do not change where sentences
# end; leaving them out of the call makes a parse ~3x cheaper (measured on the 100k corpus's
# memories: the same sentences, 0.60 s instead of 1.77 s of CPU for 300).
_SENTENCE_PIPES = {"tok2vec", "parser"}


def _unneeded(nlp) -> list[str]:
    return [name for name in nlp.pipe_names if name not in _SENTENCE_PIPES]


def _joined(doc) -> list[str]:
    out: list[str] = []
    for span in doc.sents:
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


def sentences(text: str) -> list[str]:
    nlp = pipeline()
    if nlp is None:
        return _regex_sentences(text)
    return _joined(nlp(text, disable=_unneeded(nlp)))


def sentences_many(texts: list[str]) -> list[list[str]]:
    """:func:`sentences` of each text, parsed together (``nlp.pipe``: one batch through the
    model instead of a call per text, about half the CPU again on short memories)."""
    nlp = pipeline()
    if nlp is None:
        return [_regex_sentences(text) for text in texts]
    return [_joined(doc) for doc in nlp.pipe(texts, disable=_unneeded(nlp), batch_size=64)]
