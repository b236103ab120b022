"""BM25 (memories.retrieval.keyword.bm25) against the formula computed here over the whole bucket."""

from __future__ import annotations

import math
import random

import pytest

from memories import ranking, search_terms
from memories.filters import MemoryFilters
from memories.models import Memory
from memories.retrieval import keyword
from memories.services import MemoryInput, memories_ingest

pytestmark = pytest.mark.django_db

WORDS = "apple river castle violin garden rocket silver harbor lantern meadow".split()


def python_bm25(bucket, lexemes: list[str], config: ranking.RankingConfig) -> dict:
    """Every memory of the bucket scored by the textbook formula: term frequencies from its
    stored tsvector, its length in terms (space-separated lemmas, as the server counts them)."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "SELECT id, lexeme, coalesce(array_length(positions, 1), 1) FROM memories, unnest(lemmatized_tsv) "
            "WHERE bucket_id = %s",
            [bucket.pk],
        )
        docs: dict = {}
        for memory_id, lexeme, tf in cur.fetchall():
            docs.setdefault(memory_id, {})[lexeme] = tf
    lengths = {m.pk: len((m.text_lemmatized or "").split(" ")) for m in Memory.objects.filter(bucket=bucket)}
    n = len(lengths)
    avgdl = sum(lengths.values()) / n
    k1, b = config.bm25_k1, config.bm25_b
    scores = {}
    for memory_id, terms in docs.items():
        score = 0.0
        for lx in set(lexemes):
            df = sum(1 for d in docs.values() if lx in d)
            if lx in terms:
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                tf = terms[lx]
                ratio = lengths[memory_id] / avgdl
                norm = 1 + (config.bm25_b_long if config.bm25_b_long is not None and ratio > 1 else b) * (ratio - 1)
                score += idf * tf * (k1 + 1) / (tf + k1 * norm)
        if score > 0:
            scores[memory_id] = score
    return scores


@pytest.fixture
def word_bucket(bucket):
    rng = random.Random(7)
    texts = set()
    while len(texts) < 400:
        # Skewed word frequencies, repeated words (tf > 1) and varied lengths.
        words = rng.choices(WORDS, weights=[40, 20, 10, 8, 6, 5, 4, 3, 2, 1], k=rng.randint(2, 12))
        texts.add(" ".join(words) + f" item{len(texts)}")
    # Keyword scores read the lemmas alone: the vectors are left to the sweep (not computed here).
    memories_ingest(bucket=bucket, items=[MemoryInput(content=t) for t in sorted(texts)], sequence=False, embed=False)
    return bucket


@pytest.mark.parametrize("b_long", [None, 0.9], ids=["b", "b_long"])
@pytest.mark.parametrize("query", ["lantern meadow", "apple river castle", "violin violin harbor", "apple", "meadow"])
def test_sql_bm25_equals_the_formula_over_the_whole_bucket(word_bucket, query, b_long, monkeypatch):
    config = ranking.resolve({}, {"bm25_b_long": b_long})
    lexemes = keyword.query_lexemes(" ".join(search_terms.query_terms(query)))
    expected = python_bm25(word_bucket, lexemes, config)
    # Small budgets, so candidate selection (rarest terms, pairs, the cut) is exercised.
    monkeypatch.setattr(keyword, "CANDIDATE_BUDGET", 60)
    monkeypatch.setattr(keyword, "MAX_KEYWORD_MATCHES", 150)
    got, _coverage = keyword.bm25(word_bucket, lexemes, MemoryFilters(), config, context=False)
    assert got, query
    best = sorted(expected.values(), reverse=True)
    # The top 10 are exactly the best-scoring memories (ties may come in either order).
    for (memory_id, score), rank_score in zip(got[:10], best[:10], strict=False):
        assert score == pytest.approx(expected[memory_id], rel=1e-6)
        assert score == pytest.approx(rank_score, rel=1e-6)


def test_term_frequency_saturates_and_length_normalises(bucket):
    memories_ingest(
        bucket=bucket,
        items=[
            MemoryInput(content=c)
            for c in [
                "comet",
                "comet comet",
                "comet comet comet comet comet comet",
                "comet " + " ".join(f"filler{i}" for i in range(12)),
                "unrelated words only",
            ]
        ],  # fmt: skip
        sequence=False,
    )
    config = ranking.resolve({}, None)
    got = dict(keyword.bm25(bucket, ["comet"], MemoryFilters(), config, context=False)[0])
    by_text = {Memory.objects.get(pk=k).content: v for k, v in got.items()}
    one, two, six = by_text["comet"], by_text["comet comet"], by_text["comet comet comet comet comet comet"]
    assert one < two < six  # more occurrences score higher...
    assert (six - two) / 4 < two - one  # ...each extra occurrence adds less (saturation)...
    assert six < 2 * one
    assert by_text["comet " + " ".join(f"filler{i}" for i in range(12))] < one  # a long memory scores lower
    assert "unrelated words only" not in by_text


@pytest.mark.parametrize(
    "lemmas",
    [
        "apple river apple castle",
        "0123 42 7 2024 may",
        "a " + "z" * 200 + " " + "9" * 200,
        "dog dog",
        # not plain: the parser is asked
        "e-mail 3.5 o'clock",
        "café 東京 mp3",
        "v1.2.3 user@example.com",
    ],
)
def test_query_lexemes_are_the_parsers_lexemes(lemmas):
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT lexeme FROM unnest(to_tsvector('simple', %s))", [lemmas])
        parsed = [row[0] for row in cur.fetchall()]
    assert keyword.query_lexemes(lemmas) == parsed


def test_plain_query_terms_need_no_round_trip():
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as plain:
        assert keyword.query_lexemes("river apple 2024 apple") == ["2024", "apple", "river"]
    with CaptureQueriesContext(connection) as other:
        keyword.query_lexemes("river e-mail")
    assert len(plain) == 0 and len(other) == 1


def test_coverage_is_the_share_of_the_query_the_best_match_holds(bucket):
    memories_ingest(
        bucket=bucket,
        items=[MemoryInput(content=c) for c in ["comet tail", "comet", "meteor shower", "quiet evening"]],
        sequence=False,
    )
    config = ranking.resolve({}, None)
    search = MemoryFilters()
    _hits, whole = keyword.bm25(bucket, ["comet", "tail"], search, config, context=False)
    assert whole == pytest.approx(1.0)  # "comet tail" holds every query term
    _hits, part = keyword.bm25(bucket, ["comet", "nebula"], search, config, context=False)
    assert 0 < part < 0.5  # "nebula" is in no memory, and the rarer term weighs more
    lowered = ranking.with_keyword_coverage(ranking.merge(config, {"keyword_coverage_floor": 0.2}), part)
    assert lowered.weight("keyword") == pytest.approx(config.weight("keyword") * (0.2 + 0.8 * part))
    assert ranking.with_keyword_coverage(config, part) is config  # the default floor (1) changes nothing


def test_document_lengths_are_counted_as_the_bucket_average_counts_them():
    """The statement's cheaper length (bytes, the context document as the sum of its parts) is the
    count stats.DOC_LENGTH averages, whatever the text: characters of several bytes, empty lemmas,
    runs of spaces."""
    from django.db import connection

    from memories.retrieval.stats import DOC_LENGTH

    texts = ["", "one", "café 東京 mp3", "a  b ", " lead", "naïve résumé über", "x" * 300 + " y"]
    rows = [(t, c) for t in [*texts, None] for c in texts]
    documents = [("lemmatized_tsv", "m"), ("context_tsv", "m"), ("key_tsv", "k")]
    with connection.cursor() as cur:
        for column, alias in documents:
            columns = "(lemmatized, unused)" if alias == "k" else "(text_lemmatized, context_lemmatized)"
            # A key document's lemmas are never NULL.
            values = [(t if t is not None else c, c) for t, c in rows] if alias == "k" else rows
            cur.execute(
                f"SELECT {keyword._LENGTH[column]}, {DOC_LENGTH[column]} "
                f"FROM (VALUES {', '.join(['(%s, %s)'] * len(values))}) {alias}{columns}",
                [v for row in values for v in row],
            )
            for cheaper, counted in cur.fetchall():
                assert cheaper == counted, column


@pytest.mark.parametrize(
    "vector",
    [
        "'comet':1A,4A,9A 'tail':2A",
        "'comet':7A",
        "'o''clock':1A,3A 'a\\\\b':2A 'x:y':4A,5A",  # a quote, a backslash and a colon in lexemes
        "'comet' 'tail':3A",  # a lexeme without positions counts once
        "",
    ],
)
def test_terms_are_read_from_a_tsvectors_text_as_postgresql_unnests_them(vector):
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT %s::tsvector::text", [vector])
        text = cur.fetchone()[0]
        cur.execute("SELECT lexeme, coalesce(array_length(positions, 1), 1) FROM unnest(%s::tsvector)", [vector])
        expected = [(keyword._quoted(lexeme), float(tf)) for lexeme, tf in cur.fetchall()]
    weights = {quoted: 1.0 for quoted, _tf in expected}
    assert keyword._terms(text, weights) == expected


def test_equal_scores_are_ordered_by_id(bucket):
    memories_ingest(
        bucket=bucket,
        items=[MemoryInput(content=f"comet {word}") for word in ["alpha", "beta", "gamma", "delta", "omega"]],
        sequence=False,
        embed=False,
    )
    config = ranking.resolve({}, None)
    hits, _coverage = keyword.bm25(bucket, ["comet"], MemoryFilters(), config, context=False)
    assert len(hits) == 5 and len({score for _id, score in hits}) == 1
    assert [memory_id for memory_id, _score in hits] == sorted(memory_id for memory_id, _score in hits)


def test_a_memory_without_context_stands_in_with_the_context_documents_statistics(bucket, settings):
    """The first memory of a batch has no context: in the context list it is scored by its own
    text, with the context documents' count, frequencies and average length (read by the memory
    side's statement, no statement of its own)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from memories.retrieval.stats import bucket_stats

    for batch in (
        ["comet tail over the harbor", "a quiet evening walk", "the violin lesson ran late"],
        ["lantern meadow picnic", "comet comet seen again", "silver rocket launch"],
    ):
        memories_ingest(bucket=bucket, items=[MemoryInput(content=c) for c in batch], sequence=True, embed=False)
    first = Memory.objects.get(bucket=bucket, content="comet tail over the harbor")
    assert first.context_lemmatized is None
    config = ranking.resolve({}, {"weights": {"keyword_context": 1.0}})
    settings.ENGRAM_SEARCH_PARALLEL = False  # every statement on this thread's connection
    bucket_stats.clear()
    lexemes = keyword.query_lexemes(" ".join(search_terms.query_terms("comet harbor")))
    keyword.keyword_signals(bucket, "comet harbor", MemoryFilters(), config, None)  # statistics cached
    with CaptureQueriesContext(connection) as statements:
        _memory, context_side, *_rest = keyword.keyword_signals(bucket, "comet harbor", MemoryFilters(), config, None)
    scores = dict(context_side)
    assert first.pk in scores
    size = bucket_stats.size(bucket)
    df = bucket_stats.document_frequencies(bucket, "context_tsv", lexemes)
    terms = (first.text_lemmatized or "").split(" ")
    k1, b = config.bm25_k1, config.bm25_b
    expected = 0.0
    for lx in lexemes:
        idf = math.log(1 + (size["n_context"] - df[lx] + 0.5) / (df[lx] + 0.5))
        tf = terms.count(lx)
        if tf:
            expected += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(terms) / size["avgdl_context"]))
    assert scores[first.pk] == pytest.approx(expected, rel=1e-9)
    bm25_statements = [q for q in statements.captured_queries if "ts_filter" in q["sql"]]
    assert len(bm25_statements) == 2  # the memory side and the context side (the key side: no keys)
