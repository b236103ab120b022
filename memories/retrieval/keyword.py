"""BM25 over a bucket's lemmatised memories and their key documents: the keyword signals. One
statement per signal reads the candidates; their scores are computed here."""

from __future__ import annotations

import math
import re
import uuid

from engram_site import metrics, tracing
from engram_site.replica import read_connection
from memories import ranking, search_terms
from memories.filters import MemoryFilters, bucket_list
from memories.retrieval.concurrency import start
from memories.retrieval.stats import bucket_stats
from tenants.models import Bucket

# Terms in more than this share of the bucket do not generate BM25 candidates on their own
# (they still score the candidates the rarer terms find): "the", "like", "user" would
# otherwise make every query scan most of the bucket.
COMMON_TERM_SHARE = 0.25
# The rarest query terms fetch candidates while their document frequencies add up to this;
# pairs of the other terms (each in at most PAIR_TERM_SHARE of the bucket) fetch the
# documents holding both (see _candidate_query). With MAX_KEYWORD_MATCHES, the budget trades
# exactness for time at large buckets: at 100k memories (300 generated questions, top 10
# against an exhaustive BM25, ties as equals) 1500/3000 kept 0.990 of the memory side's top
# 10 and 0.973 of the context side's in 5.4 / 6.2 ms median; 1000/2000 0.984 / 0.957 in 4.2 /
# 5.0 ms, paid for both BM25 signals running by default (docs/RETRIEVAL.md).
CANDIDATE_BUDGET = 1000
PAIR_TERM_SHARE = 0.05
MAX_PAIR_TERMS = 8
# At most this many matching documents are scored per signal.
MAX_KEYWORD_MATCHES = 2000


# Terms PostgreSQL's parser keeps whole and the 'simple' dictionary leaves as they are
# (an ASCII word in lower case, a run of digits): their lexeme is the term itself.
_PLAIN_TERM = re.compile(r"[a-z]{1,200}|[0-9]{1,200}")


def query_lexemes(query_lemmas: str) -> list[str]:
    """The lexemes PostgreSQL's parser makes of the lemmatised query — exactly what
    documents were indexed as, whatever the text (CJK, numbers with dots, …). When every
    term is plain (most questions), that is the distinct terms in tsvector order, and the
    round trip to ask the parser is saved."""
    terms = query_lemmas.split()
    if not terms:
        return []
    if all(_PLAIN_TERM.fullmatch(term) for term in terms):
        return sorted(set(terms))
    with read_connection().cursor() as cur:
        cur.execute("SELECT lexeme FROM unnest(to_tsvector('simple', %s))", [query_lemmas])
        return [row[0] for row in cur.fetchall()]


def plural_variants(lexemes: list[str]) -> dict[str, str]:
    """Other number forms of the query's lexemes, for the words the lemmatizer leaves as they are
    (proper nouns and words it does not know: "Fridays", "standups"), each mapped to its lexeme:
    a plain word not ending in "s" with an "s" added, and one ending in "s" without it (not after
    "s", "u" or "i": "class", "bus", "Paris"), not among the lexemes already."""
    known = set(lexemes)
    variants: dict[str, str] = {}
    for lexeme in lexemes:
        if not _PLAIN_TERM.fullmatch(lexeme) or lexeme.isdigit() or len(lexeme) < 3:
            continue
        if not lexeme.endswith("s"):
            forms = [lexeme + "s"]
        elif len(lexeme) > 4 and not lexeme.endswith(("ss", "us", "is")):
            forms = [lexeme[:-1]]
        else:
            continue
        for form in forms:
            if form not in known:
                variants.setdefault(form, lexeme)
    return variants


def _tsquery(lexemes: list[str]) -> str:
    # Lexemes are quoted (quote_literal rules), so tsquery operators inside them are inert.
    return " | ".join("'" + lexeme.replace("'", "''").replace("\\", "\\\\") + "'" for lexeme in lexemes)


def _candidate_query(present: list[str], df: dict[str, int], n: int) -> tuple[str, bool]:
    """The tsquery that fetches BM25 candidates, and whether it may match more than
    :data:`MAX_KEYWORD_MATCHES` documents (then they are ordered before the cut).

    The rarest terms fetch every document holding them, while their document frequencies
    add up to at most :data:`CANDIDATE_BUDGET` (always at least the rarest one). Pairs of
    the remaining terms in at most :data:`PAIR_TERM_SHARE` of the bucket fetch the documents
    holding both (two of them together can outweigh one rare term), rarest pairs first,
    while the upper bound of the matches (the smaller frequency of each pair) stays within
    :data:`MAX_KEYWORD_MATCHES`. Other terms fetch nothing ("user", "like" would make every
    query read most of the bucket) but still score the candidates.
    """
    ordered = sorted(present, key=lambda lx: (df[lx], lx))
    rare: list[str] = []
    total = 0
    for lx in ordered:
        if rare and total + df[lx] > CANDIDATE_BUDGET:
            break
        rare.append(lx)
        total += df[lx]
    others = [lx for lx in ordered[len(rare) :] if df[lx] <= PAIR_TERM_SHARE * n][:MAX_PAIR_TERMS]
    pairs = sorted(
        ((a, b) for i, a in enumerate(others) for b in others[i + 1 :]), key=lambda p: (min(df[p[0]], df[p[1]]), p)
    )
    parts = [_tsquery([lx]) for lx in rare]
    for a, b in pairs:
        bound = min(df[a], df[b])
        if total + bound > MAX_KEYWORD_MATCHES:
            break
        parts.append(f"({_tsquery([a])} & {_tsquery([b])})")
        total += bound
    return " | ".join(parts), total > MAX_KEYWORD_MATCHES


def bm25(
    bucket: Bucket | list[Bucket],
    lexemes: list[str],
    filters: MemoryFilters,
    config: ranking.RankingConfig,
    *,
    context: bool,
    mass: bool = False,
    stand_in_rows: bool = False,
) -> tuple:
    """BM25 over the lemmatised text (``context``: memory + sequence context), best first, and
    its *coverage*: the largest share of the query's IDF mass one of the ten best matches holds
    (every query term counts, those no memory of the bucket holds included). A paraphrase
    shares few words with its answer, so its best lexical matches cover little of the query.

    Candidates come from :func:`_candidate_query`, so the cost follows them, not the bucket.
    Each is scored exactly: term frequency from the lexeme's positions, saturating with
    ``k1``; document length (its terms, as the bucket average is counted) against the
    bucket's average, weighted by ``b``; Lucene's IDF within the bucket. The statement returns
    each candidate's id, length and the query's own lexemes in it (``setweight`` marks them,
    ``ts_filter`` keeps them, both in C: a short tsvector's text); the scores are computed here
    (:func:`_scored`) with the same floating-point operations in the same order as PostgreSQL
    would, which costs less than unnesting, joining and grouping each candidate's lexemes there.

    Several buckets (a search across buckets) are scored as one collection: document count,
    document frequencies and average length are theirs taken together
    (:meth:`~memories.retrieval.stats._BucketStats.size_of`), so a score means the same
    whichever bucket its memory is in, and one statement reads them all.

    ``mass``: also return the query's IDF mass over these documents (every query term's IDF),
    what a document of average length holding each term once scores. ``stand_in_rows`` (the
    memory side): also return what :func:`_stand_ins` scores the list's memories without context
    from, read by the same statement.
    """
    found = _bm25(bucket, lexemes, filters, config, "context_tsv" if context else "lemmatized_tsv", stand_in_rows)
    return (found if stand_in_rows else found[:3]) if mass else found[:2]


def key_bm25(
    bucket: Bucket | list[Bucket],
    lexemes: list[str],
    filters: MemoryFilters,
    config: ranking.RankingConfig,
    *,
    mass: bool = False,
) -> tuple:
    """BM25 over the memories' key documents (``memory_keys``, memories.keys), as :func:`bm25`
    scores their own text: the ``keyword_key`` signal. A key is read with its memory (the
    search's filters are the memory's) and only while it is of the memory's current text. A
    bucket without keys costs no statement. ``mass`` as in :func:`bm25`."""
    found = _bm25(bucket, lexemes, filters, config, "key_tsv")
    return found[:3] if mass else found[:2]


# Per BM25 document: (bucket count, average length) in the statistics, the FROM clause, the
# tsvector, and a condition on the rows. A key is joined to its memory (whose columns the filters
# test) and read only while it is of the memory's text.
_DOCUMENTS = {
    "lemmatized_tsv": ("n", "avgdl", "memories m", "m.lemmatized_tsv", ""),
    "context_tsv": (
        "n_context",
        "avgdl_context",
        "memories m",
        "m.context_tsv",
        " AND m.context_lemmatized IS NOT NULL",
    ),
    "key_tsv": (
        "n_key",
        "avgdl_key",
        "memory_keys k JOIN memories m ON m.id = k.memory_id AND m.text_hash IS NOT DISTINCT FROM k.text_hash",
        "k.tsv",
        "",
    ),
}
# A document's length as stats.DOC_LENGTH counts it (its space-separated lemmas, the bucket
# average's count), cheaper: in bytes (a space is one byte in UTF-8 and no byte of another
# character), so the text's characters are not counted twice per candidate; and memory + context
# as the sum of its two parts (the space that joins them is one more), without joining them.
_SPACES = "(octet_length({0}) - octet_length(replace({0}, ' ', '')) + 1)"
_LENGTH = {
    "lemmatized_tsv": _SPACES.format("coalesce(m.text_lemmatized, '')"),
    "context_tsv": _SPACES.format("coalesce(m.text_lemmatized, '')") + " + " + _SPACES.format("m.context_lemmatized"),
    "key_tsv": _SPACES.format("k.lemmatized"),
}


def _weighed(buckets: list[Bucket], lexemes: list[str], config: ranking.RankingConfig, column: str, *,
             every_term: bool = False) -> tuple | None:  # fmt: skip
    """The statistics the documents of ``column`` are scored with: (document count, average
    length, document frequencies, the lexemes that score, their IDFs, the query's IDF mass), or
    None when nothing can score. ``every_term``: every query term scores, those no document
    holds too (the stand-ins: one no context document holds is as rare as any there)."""
    count, average, _source, _tsv, _guard = _DOCUMENTS[column]
    stats = bucket_stats.size_of(buckets)
    n = stats[count]
    if n == 0:
        return None
    variants = plural_variants(lexemes) if config.keyword_plurals else {}
    df = bucket_stats.frequencies_of(buckets, column, lexemes + list(variants))
    variants = {form: lexeme for form, lexeme in variants.items() if df.get(form, 0) > 0}
    present = (list(lexemes) if every_term else [lx for lx in lexemes if df.get(lx, 0) > 0]) + list(variants)
    if not present:
        return None
    # A lexeme and its other number forms are one term: their frequencies add up (a document
    # rarely holds both), and each form scores with the term's IDF.
    term_df = dict(df)
    for form, lexeme in variants.items():
        term_df[lexeme] = term_df.get(lexeme, 0) + df[form]

    # Lucene's BM25 IDF (never negative).
    def inverse(lx: str) -> float:
        return math.log(1 + (n - term_df.get(lx, 0) + 0.5) / (term_df.get(lx, 0) + 0.5))

    idf = [inverse(variants.get(lx, lx)) for lx in present]
    return n, stats[average], df, present, idf, sum(inverse(lx) for lx in lexemes)


def _bm25(
    bucket: Bucket | list[Bucket],
    lexemes: list[str],
    filters: MemoryFilters,
    config: ranking.RankingConfig,
    column: str,
    stand_in_rows: bool = False,
) -> tuple[list[tuple[uuid.UUID, float]], float, float, tuple]:
    nothing = [], 0.0, 0.0, ([], set())
    if not lexemes:
        return nothing
    buckets = bucket_list(bucket)
    weighed = _weighed(buckets, lexemes, config, column)
    if weighed is None:
        return nothing
    n, avgdl, df, present, idf, query_mass = weighed
    _count, _average, source, tsv, guard = _DOCUMENTS[column]
    candidate_query, too_many = _candidate_query(present, df, n)
    kept, stands_in = present, "false"
    if stand_in_rows:
        # The stand-ins' terms too (every query term and its other number forms), and whether
        # the memory has no context.
        forms = plural_variants(lexemes) if config.keyword_plurals else {}
        kept = present + [lx for lx in [*lexemes, *forms] if lx not in present]
        stands_in = "m.context_lemmatized IS NULL"
    where, params = filters.sql(buckets)
    # Only when even the rarest term is too common to read in full (a query of common words
    # only) are the matches ordered, by ts_rank, before the cut.
    order = f"ORDER BY ts_rank({tsv}, %s::tsquery) DESC" if too_many else ""
    order_params = [candidate_query] if order else []
    sql = f"""
        SELECT m.id::text, {_LENGTH[column]}, ts_filter(setweight({tsv}, 'A', %s::text[]), '{{a}}')::text,
               {stands_in}
        FROM {source}
        WHERE {where}{guard} AND {tsv} @@ %s::tsquery
        {order}
        LIMIT %s
    """
    with read_connection().cursor() as cur:
        cur.execute(sql, [kept, *params, candidate_query, *order_params, MAX_KEYWORD_MATCHES])
        found = cur.fetchall()
    weights = {_quoted(lx): weight for lx, weight in zip(present, idf, strict=True)}
    known = {_quoted(lx) for lx in kept}
    best = _scored(found, weights, known, config, avgdl)[: config.candidates]
    coverage = max((_matched(row[2], weights, known) for _score, _id, row in best[:10]), default=0.0) / query_mass
    ranked = [(uuid.UUID(memory_id), -score) for score, memory_id, _row in best]
    stand_ins = [row for _score, _id, row in best if row[3]] if stand_in_rows else []
    return ranked, min(1.0, coverage), query_mass, (stand_ins, known)


def _quoted(lexeme: str) -> str:
    """A lexeme as a tsvector's text shows it: quoted, its quotes and backslashes doubled."""
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


# One lexeme of a tsvector's text: quoted (quotes and backslashes doubled), then its positions.
_TSVECTOR_ENTRY = re.compile(r"('(?:[^'\\]|''|\\\\)*')(?::([0-9A-D,]+))?")


def _terms(terms: str, known: set[str]) -> list[tuple[str, float]]:
    """Each (quoted) lexeme of a tsvector's text and its term frequency, its number of positions
    (1 without any, as PostgreSQL counts them), in the tsvector's order. Lexemes hold no spaces
    and their positions no colon, so splitting is enough; the regular expression reads what
    splitting does not give ``known`` lexemes from."""
    entries = []
    for entry in terms.split(" "):
        lexeme, _, positions = entry.rpartition(":")
        if lexeme not in known:
            return [(lx, float(ps.count(",") + 1)) for lx, ps in _TSVECTOR_ENTRY.findall(terms)]
        entries.append((lexeme, float(positions.count(",") + 1)))
    return entries


def _matched(terms: str, weights: dict[str, float], known: set[str]) -> float:
    """The IDF of the query terms a document holds, added up in tsvector order."""
    total = 0.0
    for lexeme, _tf in _terms(terms, known):
        if lexeme in weights:
            total += weights[lexeme]
    return total


def _scored(
    found: list[tuple], weights: dict[str, float], known: set[str], config: ranking.RankingConfig, avgdl: float
) -> list:
    """BM25 of each (id, length, the query's lexemes in it as a tsvector's text, …) row, as
    ``(-score, id, row)`` sorted best first, ties by id (as PostgreSQL orders uuids: their text
    orders alike); a row holding none of ``weights``' lexemes is left out. Each term's part is
    computed, and the parts added in tsvector order, exactly as the statement that scored them in
    SQL did: the same floating-point results."""
    k1, b, b_long = config.bm25_k1, config.bm25_b, config.bm25_b_long
    k1_1 = k1 + 1
    by_length: dict[int, float] = {}  # k1 times the length's normalisation
    scored = []
    for row in found:
        memory_id, dl, terms = row[0], row[1], row[2]
        saturation = by_length.get(dl)
        if saturation is None:
            if b_long is None or b_long == b:
                norm = 1 - b + b * dl / avgdl
            else:
                # Documents longer than the average are normalised with bm25_b_long, shorter ones
                # with b (both meet at the average length, where the factor is 1).
                norm = 1 + (b_long if dl > avgdl else b) * (dl / avgdl - 1)
            saturation = by_length[dl] = k1 * norm
        if " " not in terms:  # one query term (most candidates): read in place
            lexeme, _, positions = terms.rpartition(":")
            weight = weights.get(lexeme)
            if weight is not None:
                tf = positions.count(",") + 1.0
                scored.append((-(weight * tf * k1_1 / (tf + saturation)), memory_id, row))
                continue
        score = None
        for lexeme, tf in _terms(terms, known):
            weight = weights.get(lexeme)
            if weight is not None:
                part = weight * tf * k1_1 / (tf + saturation)
                score = part if score is None else score + part
        if score is not None:
            scored.append((-score, memory_id, row))
    scored.sort()
    return scored


def _stand_ins(bucket, lexemes, config, rows) -> list[tuple[uuid.UUID, float]]:
    """The memory list's memories that have no context (``rows``, with the lexemes read:
    ``bm25(stand_in_rows=True)``), each scored by its own text as its context document with the
    context documents' statistics (count, frequencies, average length), so that the score sits on
    the ``keyword_context`` list's scale (``keyword_context_stand_in``). No statement: the memory
    side's read them. Nothing when no memory of the bucket has a context (the context list is then
    empty, and stand-ins would only repeat the memory list)."""
    found, known = rows
    buckets = bucket_list(bucket)
    if not found or bucket_stats.size_of(buckets)["n_context"] == 0:
        return []
    weighed = _weighed(buckets, lexemes, config, "context_tsv", every_term=True)
    if weighed is None:
        return []
    _n, avgdl, _df, present, idf, _mass = weighed
    weights = {_quoted(lx): weight for lx, weight in zip(present, idf, strict=True)}
    # The memory's own text as its context document: its length is the memory's.
    best = _scored(found, weights, known, config, avgdl)[: config.candidates]
    return [(uuid.UUID(memory_id), -score) for score, memory_id, _row in best]


def _with_stand_ins(context_side, stand_ins, config) -> list[tuple[uuid.UUID, float]]:
    """The context list with the stand-ins among it, best first, ``candidates`` long."""
    if not stand_ins:
        return context_side
    merged = context_side + stand_ins
    merged.sort(key=lambda r: (-r[1], str(r[0])))
    return merged[: config.candidates]


@metrics.timed(metrics.SIGNAL_SECONDS, signal="keyword")
@tracing.traced("engram.search.signal", signal="keyword")
def keyword_signals(
    bucket: Bucket | list[Bucket], query: str, filters: MemoryFilters, config: ranking.RankingConfig, now
):
    """BM25 over the memory, over memory + context and over the key documents (those two in
    other threads when ENGRAM_SEARCH_PARALLEL is on), for the lemmatised query; the coverage
    of the memory side (of the context side when only that one runs); and per signal the
    query's IDF mass over its documents, the score of a document of average length holding
    every query term once (``ranking.fuse``'s ceiling for a short list). A signal weighted 0 is
    not run."""
    lexemes = query_lexemes(" ".join(search_terms.query_terms(query, now)))
    context_side = (
        start(bm25, bucket, lexemes, filters, config, context=True, mass=True)
        if config.weight("keyword_context") > 0
        else None
    )
    key_side = (
        start(key_bm25, bucket, lexemes, filters, config, mass=True) if config.weight("keyword_key") > 0 else None
    )
    wants_stand_ins = config.keyword_context_stand_in and context_side is not None
    memory_side, coverage, memory_mass, *read = (
        bm25(bucket, lexemes, filters, config, context=False, mass=True, stand_in_rows=wants_stand_ins)
        if config.weight("keyword") > 0
        else ([], None, 0.0)
    )
    # As on the vector side (context_stand_in): a memory without context (the first of its
    # sequence) would rank in one BM25 list while its successor, whose context holds its words,
    # ranks in two. Only where the context list has anything: otherwise the stand-ins would
    # merely repeat the memory list and double its weight.
    stand_ins = _stand_ins(bucket, lexemes, config, read[0]) if read else []
    context_side, context_coverage, context_mass = context_side.result() if context_side else ([], None, 0.0)
    if context_side and memory_side:
        context_side = _with_stand_ins(context_side, stand_ins, config)
    key_side, _key_coverage, key_mass = key_side.result() if key_side else ([], None, 0.0)
    masses = {"keyword": memory_mass, "keyword_context": context_mass, "keyword_key": key_mass}
    return memory_side, context_side, key_side, coverage if coverage is not None else context_coverage, masses
