"""The BM25 lemmatizer: spaCy's tokenizer and lookup lemmas, read without Token objects."""

from __future__ import annotations

import pytest

from engram_site.providers import lemmatizer

TEXTS = [
    "I moved to Lisbon in March and my sisters were visiting.",
    "What does Alice do for work? She did well in the race.",
    "I made pasta with my sister; we're making it again tomorrow!",
    "Visit https://example.com/foo_bar?x=1 or mail john.doe@example.org #travel @anna",
    "Prices: $5, 50%, 3.14, 1st and 2nd place — the kids' toys cost 1,249 euros.",
    "東京 is far away 🎉 and München too; ſtraße, İstanbul, ΣΊΣΥΦΟΣ.",
    "  \n\t  ",
    "",
    "In May we met. May I ask? He may come.",
    "x" * 90 + " ends with a very long token",
    "Don't, can't, won't, he's O'Neil's cousin (the one in N.Y.C.) -- isn't he?",
    "running ran runs better geese mice children went gone was were been",
]


def reference_terms(text: str) -> list[str]:
    """What the lookup lemmatizer gives when spaCy runs it the ordinary way: every token of
    the lowercased text as a Token, its ``lemma_`` set by the pipeline's lemmatizer."""
    nlp = lemmatizer._load()
    stops = lemmatizer.stop_words()
    terms = []
    for token in nlp(text.lower()):
        if token.is_space or token.is_punct:
            continue
        lemma = token.lemma_ or token.text
        if token.text in stops and lemma not in lemmatizer.KEPT_WORDS:
            continue
        for piece in lemmatizer._TERM.findall(lemma):
            piece = piece[: lemmatizer.MAX_TERM_LENGTH]
            if piece and piece not in stops:
                terms.append(piece)
    return terms + lemmatizer._ambiguous_months(text)


def test_the_terms_are_those_of_spacys_lookup_lemmatizer_run_token_by_token():
    got = lemmatizer.lemmatize_many(TEXTS)
    assert got == [" ".join(reference_terms(text)) for text in TEXTS]
    assert got[0].split() == ["move", "lisbon", "march", "sister", "visit"]
    assert "goose" in got[-1].split() and "child" in got[-1].split()
    assert got[6] == got[7] == ""
    assert max(len(term) for text in got for term in text.split()) == lemmatizer.MAX_TERM_LENGTH


def test_a_full_cache_starts_again_and_changes_no_term(monkeypatch):
    monkeypatch.setattr(lemmatizer, "_TERMS_BY_ORTH", {})
    monkeypatch.setattr(lemmatizer, "_TERMS_CACHE_LIMIT", 5)
    got = lemmatizer.lemmatize_many(TEXTS)
    assert 0 < len(lemmatizer._TERMS_BY_ORTH) <= 5
    assert got == [" ".join(reference_terms(text)) for text in TEXTS]


class _BrokenTokenizer:
    """Fails on a whole batch, and on any text that holds ``poison``."""

    def __init__(self, tokenizer, poison: str):
        self.tokenizer = tokenizer
        self.poison = poison

    def pipe(self, texts, batch_size=None):
        raise RuntimeError("the batch failed")

    def __call__(self, text):
        if self.poison in text:
            raise RuntimeError("this text failed")
        return self.tokenizer(text)


def test_a_text_the_tokenizer_fails_on_gets_plain_word_terms_and_the_others_their_lemmas(monkeypatch):
    nlp = lemmatizer._load()
    monkeypatch.setattr(nlp, "tokenizer", _BrokenTokenizer(nlp.tokenizer, poison="poison"))
    texts = ["My sisters were running.", "The poison pills were running out."]
    got = lemmatizer.lemmatize_many(texts)
    assert got[0] == "sister run"  # tokenized alone, lemmatized
    assert got[1] == "poison pills running"  # lowercase words, stop words dropped, no lemmas


@pytest.mark.parametrize("text", ["Anna's cats are sleeping", "WENT TO THE MARKETS"])
def test_case_does_not_change_the_terms(text):
    assert lemmatizer.lemmatize(text) == lemmatizer.lemmatize(text.lower())
