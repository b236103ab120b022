"""POST /api/v1/buckets/{id}/search — real PostgreSQL, real model."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.apps import apps
from django.db import connection
from django.utils import timezone

from engram_site.providers import embedding
from engram_site.scoping import in_this_context
from graph.services.extraction import graph_extract_memories
from memories import access
from memories.models import Memory, MemoryAccess
from memories.retrieval import keyword, rows, stats, vector
from memories.services import MemoryInput, memories_ingest
from memories.services import access as access_times
from memories.services.buckets import bucket_create
from tests.factories import make_client, search, write

pytestmark = pytest.mark.django_db

CORPUS = [
    "Our dog Biscuit is a golden retriever who loves the beach.",
    "I prefer dark roast coffee in the morning.",
    "My sister Anna works as a nurse in Boston.",
    "The quarterly report is due on the last Friday of June.",
    "I am allergic to peanuts.",
    "We are planning a trip to Kyoto next spring.",
    "My laptop is a ThinkPad X1 Carbon.",
    "I go climbing at the gym on Tuesdays and Thursdays.",
]


def test_exact_words_rank_the_matching_memory_first_in_keyword_mode(api, bucket):
    ids = write(bucket, *CORPUS, api=api, sequence=False)
    body = search(api, bucket, "ThinkPad laptop", mode="keyword")
    assert body["mode_used"] == "keyword"
    assert body["results"][0]["id"] == ids[6]
    body = search(api, bucket, "peanuts", mode="keyword")
    assert [r["id"] for r in body["results"]] == [ids[4]]  # only what matches


def test_lemmas_match_inflected_forms(api, bucket):
    ids = write(bucket, *CORPUS, api=api, sequence=False)
    assert search(api, bucket, "who went climbed at gyms", mode="keyword")["results"][0]["id"] == ids[7]


def test_paraphrase_without_shared_words_is_found_by_vector_and_hybrid(api, bucket):
    ids = write(bucket, *CORPUS, api=api, sequence=False)
    query = "what kind of canine companion do I have"
    keyword_ids = [r["id"] for r in search(api, bucket, query, mode="keyword")["results"]]
    assert ids[0] not in keyword_ids
    assert search(api, bucket, query, mode="vector")["results"][0]["id"] == ids[0]
    assert search(api, bucket, query, mode="hybrid")["results"][0]["id"] == ids[0]


def test_recency_breaks_ties_between_equally_relevant_facts(api, bucket):
    now = timezone.now()
    old, new = write(
        bucket,
        {"content": "My favourite colour is blue", "created_at": (now - timedelta(days=700)).isoformat()},
        {"content": "My favourite colour is green", "created_at": (now - timedelta(days=3)).isoformat()},
        api=api,
        sequence=False,
    )
    body = search(api, bucket, "favourite colour", mode="keyword", explain=True)
    assert [r["id"] for r in body["results"]] == [new, old]
    signals = [r["explain"]["signals"]["keyword"]["score"] for r in body["results"]]
    assert signals[0] == signals[1]  # equally relevant: recency decided
    # Swap the ages: the order follows.
    Memory.objects.filter(pk=old).update(created_at=now - timedelta(days=1))
    Memory.objects.filter(pk=new).update(created_at=now - timedelta(days=900))
    body = search(api, bucket, "favourite colour", mode="keyword")
    assert [r["id"] for r in body["results"]] == [old, new]


def test_token_budget_is_never_exceeded(api, bucket):
    write(
        bucket,
        *CORPUS,
        *[f"Note {i}: the garden needs watering twice a week in summer" for i in range(20)],
        api=api,
        sequence=False,
    )
    for budget in (1, 12, 30, 75, 200, 5000):
        body = search(api, bucket, "garden coffee trip laptop", token_budget=budget)
        used = sum(r["token_count"] for r in body["results"])
        assert used <= budget
        assert body["total_tokens"] == used
    # A budget without a limit is not cut at 10 results.
    assert len(search(api, bucket, "garden watering", token_budget=5000)["results"]) > 10


def test_limit(api, bucket):
    write(bucket, *CORPUS, api=api, sequence=False)
    assert len(search(api, bucket, "anything at all", limit=3)["results"]) == 3


@pytest.mark.parametrize("mode", ["hybrid", "vector", "keyword", "vector-walk"])
def test_filters(api, bucket, mode, monkeypatch):
    if mode == "vector-walk":  # every filter through the HNSW walk, its parameters bound apart
        monkeypatch.setattr(vector, "EXACT_SCAN_BELOW", 0)
        mode = "vector"
    now = timezone.now()
    a, b, c, d = write(
        bucket,
        {
            "content": "Coffee tastes great",
            "hint_tags": ["food", "morning"],
            "agent_id": "chef",
            "run_id": "r1",
            "attributed_to": "user",
            "created_at": (now - timedelta(days=400)).isoformat(),
        },
        {
            "content": "Coffee beans from Ethiopia",
            "hint_tags": ["food"],
            "agent_id": "buyer",
            "run_id": "r2",
            "attributed_to": "assistant",
            "created_at": (now - timedelta(days=10)).isoformat(),
        },
        {
            "content": "Coffee shop on Main street",
            "hint_tags": ["places"],
            "agent_id": "chef",
            "run_id": "r2",
            "attributed_to": "user",
            "created_at": (now - timedelta(days=1)).isoformat(),
        },
        {"content": "Coffee grinder is broken"},
        api=api,
        sequence=False,
    )
    Memory.objects.filter(pk=b).update(classified_scope="specific", classified_topic="coffee-beans")
    Memory.objects.filter(pk=d).update(classified_scope="general")

    def ids(**filters):
        return {r["id"] for r in search(api, bucket, "coffee", mode=mode, filters=filters, limit=20)["results"]}

    assert ids(hint_tags=["food"]) == {a, b}
    assert ids(hint_tags=["food", "morning"]) == {a}
    assert ids(agent_id="chef") == {a, c}
    assert ids(run_id="r2") == {b, c}
    assert ids(attributed_to="assistant") == {b}
    assert ids(classified_scope="specific") == {b}
    assert ids(classified_topic="coffee-beans") == {b}
    assert ids(created_after=(now - timedelta(days=30)).isoformat()) == {b, c, d}
    assert ids(created_before=(now - timedelta(days=30)).isoformat()) == {a}
    assert ids(agent_id="chef", attributed_to="user", created_after=(now - timedelta(days=5)).isoformat()) == {c}


def test_explain_shows_ranks_scores_boosts_and_context(api, bucket):
    write(bucket, "I joined Globex in 2019.", "Five years already!", api=api, sequence=True)
    assert "Five years already!" in [
        r["content"] for r in search(api, bucket, "how long have I worked at Globex")["results"]
    ]
    # keyword_context is weighted in by default, and explains itself too.
    body = search(api, bucket, "how long have I worked at Globex", explain=True)
    top = {r["content"]: r["explain"] for r in body["results"]}
    explain = top["Five years already!"]
    assert explain["context"] == "I joined Globex in 2019."
    assert "keyword_context" in explain["signals"] and "rank" in explain["signals"]["keyword_context"]
    assert set(explain["boosts"]) >= {"recency"}
    assert explain["fusion"] == "score" and explain["fused"] > 0


def test_sequence_context_finds_a_short_follow_up(api, bucket):
    ids = write(
        bucket,
        *CORPUS,
        "I started working at Initech as a data engineer in 2019.",
        "Five years already, can you believe it!",
        api=api,
        sequence=True,
    )
    body = search(api, bucket, "How long have I been at Initech?", limit=3)
    assert ids[-1] in [r["id"] for r in body["results"]]


def test_the_first_memory_of_a_sequence_is_not_outranked_by_its_successor(api, bucket):
    """The first memory has no context vector, its successors carry it in theirs: it stands
    in its own vector in the vector_context list, or a successor would win on that list alone."""
    cat, nurse, dinner = write(
        bucket,
        "My cat Miso sleeps on the windowsill.",
        "I work as a nurse in Boston.",
        "Dinner with Anna on Friday at 7pm.",
        api=api,
        sequence=True,
    )
    # Under rank fusion without the neighbour lift, where the stand-in decided it: one list
    # more for the successor outweighed a better rank in the other.
    rank_fusion = {"fusion": "rrf", "neighbour_weight": 0, "weights": {"keyword": 0.5, "keyword_context": 0}}
    body = search(api, bucket, "what pet do I have", explain=True, ranking=rank_fusion)
    assert body["results"][0]["id"] == cat
    signals = body["results"][0]["explain"]["signals"]
    assert signals["vector_context"] == signals["vector"]  # its own similarity, ranked first
    # Switched off, the memory without a context vector ranks in one vector list only.
    body = search(api, bucket, "what pet do I have", explain=True, ranking={**rank_fusion, "context_stand_in": False})
    assert "vector_context" not in {r["id"]: r for r in body["results"]}[cat]["explain"]["signals"]
    assert body["results"][0]["id"] != cat


def test_without_any_context_vector_nothing_stands_in(api, bucket):
    """A bucket written without sequences has an empty vector_context list; stand-ins there
    would only repeat the vector list and double its weight."""
    write(bucket, *CORPUS, api=api, sequence=False)
    body = search(api, bucket, "what kind of dog do I have", explain=True)
    assert body["results"][0]["content"] == CORPUS[0]
    assert not any("vector_context" in r["explain"]["signals"] for r in body["results"])


def test_search_records_access_times_off_the_search_path_and_the_job_applies_them(api, bucket):
    from memories.models import MemoryAccess

    ids = write(bucket, *CORPUS, api=api, sequence=False)
    body = search(api, bucket, "coffee dog sister", limit=3)
    returned = {r["id"] for r in body["results"]}
    assert not MemoryAccess.objects.exists()  # nothing is written while answering
    assert access.flush() == len(returned)  # one upsert into the narrow access table
    assert {str(i) for i in MemoryAccess.objects.values_list("memory_id", flat=True)} == returned
    assert not Memory.objects.filter(last_accessed_at__isnull=False).exists()  # memories rows untouched so far
    # Readers already see the time...
    assert api.get(f"/api/v1/memories/{next(iter(returned))}").json()["last_accessed_at"] is not None
    listed = api.get(f"/api/v1/buckets/{bucket.pk}/memories").json()["results"]
    assert {m["id"] for m in listed if m["last_accessed_at"]} == returned
    # ...and the job copies it into memories.last_accessed_at, emptying the queue.
    assert access_times.apply_pending() == {"applied": len(returned), "unchanged": 0, "left_locked": 0}
    accessed = {str(i) for i in Memory.objects.filter(last_accessed_at__isnull=False).values_list("id", flat=True)}
    assert accessed == returned and returned <= set(ids)
    assert not MemoryAccess.objects.exists()


def test_a_memory_is_rewritten_at_most_once_per_resolution(api, bucket):
    from memories.models import MemoryAccess

    [memory_id] = write(bucket, CORPUS[0], api=api, sequence=False)
    memory_uuid = uuid.UUID(memory_id)
    access.record([memory_uuid])
    access.flush()
    access_times.apply_pending()
    first = Memory.objects.get(pk=memory_id).last_accessed_at
    # Surfaced again ten minutes later: within the hour, nothing is queued or rewritten.
    access.record([memory_uuid], at=first + timedelta(minutes=10))
    assert access.flush() == 0 and not MemoryAccess.objects.exists()
    # Two hours later it is.
    access.record([memory_uuid], at=first + timedelta(hours=2))
    assert access.flush() == 1
    assert access_times.apply_pending()["applied"] == 1
    assert Memory.objects.get(pk=memory_id).last_accessed_at == first + timedelta(hours=2)


def test_a_deleted_memory_takes_its_pending_access_time_with_it(api, bucket):
    from memories.models import MemoryAccess

    [memory_id] = write(bucket, CORPUS[0], api=api, sequence=False)
    access.record([uuid.UUID(memory_id)])
    access.flush()
    assert api.delete(f"/api/v1/memories/{memory_id}").status_code == 204
    assert not MemoryAccess.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_applying_access_times_skips_rows_another_transaction_holds_instead_of_waiting(api, bucket):
    import threading

    from django.db import connection, transaction

    from memories.models import MemoryAccess

    ids = write(bucket, *CORPUS[:3], api=api, sequence=False)
    access.record([uuid.UUID(i) for i in ids])
    assert access.flush() == 3
    locked, release = threading.Event(), threading.Event()

    def hold_first_row():
        with transaction.atomic():
            Memory.objects.select_for_update().get(pk=ids[0])
            locked.set()
            release.wait(30)
        connection.close()

    holder = threading.Thread(target=in_this_context(hold_first_row))
    holder.start()
    try:
        assert locked.wait(30)
        # The held row is left for the next run; the job does not wait for it.
        assert access_times.apply_pending() == {"applied": 2, "unchanged": 0, "left_locked": 1}
    finally:
        release.set()
        holder.join(30)
    touched = {str(i) for i in Memory.objects.filter(last_accessed_at__isnull=False).values_list("id", flat=True)}
    assert touched == set(ids[1:])
    assert [str(m) for m in MemoryAccess.objects.values_list("memory_id", flat=True)] == [ids[0]]
    assert access_times.apply_pending()["applied"] == 1


# Queries that mean something to SQL, to tsquery, to LIKE or to a regex, or are merely odd text.
# Each holds the placeholder {w}, which the test replaces with a word of one memory.
HOSTILE = {
    "sql injection": "{w}' OR 1=1 --",
    "sql statement": "{w}'; DROP TABLE memories; --",
    "tsquery operators": "!{w}:* & ({w} | x) <-> !!'\\",
    "tsquery glued": "{w}&|!():*<->'\\",
    "tsquery prefix": "{w}:* | a:*",
    "backslashes": "\\{w}\\ \\\\ \\'",
    "quotes": "\"{w}\" '{w}' `{w}` ‘{w}’ ''{w}''",
    "like wildcards": "%{w}% _{w}_ %_",
    "dollar quoting": "$${w}$$ $tag$",
    "regex": "{w}.* [a-z]+ ^$ (?i)",
    # The API refuses NUL and the other C0 controls (tests/system/test_hostile_input.py); these it takes.
    "control characters": "{w}\t\r\n\u0085\u009b\u200b\u200d\u202e\ufeff\u2028 end",
    "unicode": "東京 {w} Ünïcödé café שלום",
    "emoji": "🥜 {w} 😀👩🏽\u200d💻🇵🇹",
    "very long word": "{w} " + "x" * 3_900,
    "stopwords around": "the of and {w} to is",
}
# Queries that share no word with any memory (and name no entity).
NOTHING_IN_COMMON = {
    "sql injection": "' OR 1=1 --",
    "tsquery operators": "&|!():*<->'\\",
    "tsquery prefix": "a:* & b:* | c:*",
    "lone backslash": "\\",
    "lone quote": "'",
    "only stopwords": "the of and a to is",
    "only punctuation": "?!.,;:-_()[]{}",
    "like wildcards": "%_%",
    "emoji": "😀😀",
    "CJK": "東京",
    "control characters": "\t\u200b\u202e\ufeff",
    "very long word": "x" * 4_000,
}
MODES = ("keyword", "vector", "hybrid", "graph")


@pytest.fixture
def searched(api, bucket, other_tenant):
    """The corpus (with its graph), a canary beside it and a canary in another tenant's bucket,
    and a snapshot of the database to compare with after the searches."""
    ids = write(bucket, *CORPUS, "Canary: the vault code is 4711.", api=api, sequence=False)
    graph_extract_memories(memory_ids=ids)
    outside = bucket_create(tenant=other_tenant, name="outside")
    memories_ingest(bucket=outside, items=[MemoryInput(content="Anna's canary: the other vault code is 1234.")])
    return ids, database_snapshot()


def database_snapshot() -> tuple[dict[str, int], str]:
    """The row count of every table, and a digest of every memory row, whole (embeddings included).
    The search's own access bookkeeping (memory_access, written in the background) is left out."""
    counts = {m._meta.db_table: m.objects.count() for m in apps.get_models() if m is not MemoryAccess}
    with connection.cursor() as cur:
        cur.execute("SELECT md5(string_agg(m::text, '|' ORDER BY m.id)) FROM memories m")
        return counts, cur.fetchone()[0]


def search_any(api, bucket, query: str, mode: str) -> dict:
    """A search that must answer 200 with a well-formed body: hits of this bucket, each once, best first."""
    response = api.post(f"/api/v1/buckets/{bucket.pk}/search", {"query": query, "mode": mode}, format="json")
    assert response.status_code == 200, (mode, response.status_code, response.content[:500])
    body = response.json()
    assert body["mode_used"] == mode and isinstance(body["warnings"], list) and isinstance(body["total_tokens"], int)
    hits = body["results"]
    assert isinstance(hits, list) and len(hits) <= 10
    ids = [hit["id"] for hit in hits]
    assert len(set(ids)) == len(ids)
    in_bucket = {str(i) for i in Memory.objects.for_bucket(bucket).filter(pk__in=ids).values_list("id", flat=True)}
    assert set(ids) == in_bucket, "a hit from outside the bucket"
    scores = [hit["score"] for hit in hits]
    assert all(isinstance(score, float | int) and 0 <= score < float("inf") for score in scores), (mode, scores)
    assert scores == sorted(scores, reverse=True), (mode, scores)
    assert all(isinstance(hit["content"], str) and hit["content"] for hit in hits)
    return body


@pytest.mark.parametrize("template", list(HOSTILE.values()), ids=list(HOSTILE))
def test_hostile_queries_never_fail(api, bucket, searched, template):
    """A hostile query is text to every signal: it answers 200 in every mode, finds the memory
    it names a word of (so the word reached the keyword, vector and graph signals rather than
    being dropped with the odd characters around it), and changes nothing in the database."""
    ids, before = searched
    anna = ids[2]  # "My sister Anna works as a nurse in Boston." ("anna" is its own lemma)
    query = template.replace("{w}", "Anna")
    found = {mode: [hit["id"] for hit in search_any(api, bucket, query, mode)["results"]] for mode in MODES}
    # Only the memory holding the word matches it: an injected OR or prefix would match them all.
    assert found["keyword"] == [anna]
    assert found["vector"][0] == anna and found["hybrid"][0] == anna
    assert found["graph"] and found["graph"][0] == anna  # Anna, the entity: her memories
    assert database_snapshot() == before
    assert Memory.objects.get(pk=ids[-1]).content == "Canary: the vault code is 4711."


@pytest.mark.parametrize("query", list(NOTHING_IN_COMMON.values()), ids=list(NOTHING_IN_COMMON))
def test_hostile_queries_that_share_no_word_with_any_memory_match_none_by_keyword(api, bucket, searched, query):
    ids, before = searched
    for mode in MODES:
        hits = search_any(api, bucket, query, mode)["results"]
        if mode in ("keyword", "graph"):
            # Nothing holds these words or names these entities: a query turned into "match
            # anything" (an injected OR, a bare prefix, an emptied tsquery) would return memories.
            assert hits == [], mode
        else:  # the nearest neighbours of whatever the text means: the bucket's memories
            assert {hit["id"] for hit in hits} == set(ids), mode
    assert database_snapshot() == before


# spaCy's tokenizer leaves characters it does not split off (a backslash, "$$", "&|!():*<->")
# attached to a word; the lemma table has no entry for "peanuts\\", so each word in such a token
# is looked up on its own: the query term is "peanut", as the memory's ("peanuts&" or "peanuts!"
# alone are split by the tokenizer and lemmatised anyway).
@pytest.mark.parametrize("query", ["peanuts&|!():*<->'\\", "\\peanuts\\", "$$peanuts$$"])
def test_a_plural_glued_to_symbols_is_lemmatised_like_the_memory_it_names(api, bucket, query):
    ids = write(bucket, *CORPUS, api=api, sequence=False)
    assert [hit["id"] for hit in search(api, bucket, query, mode="keyword")["results"]] == [ids[4]]


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"query": ""},
        {"query": "   "},
        {"query": 5},
        {"query": "x" * 4001},
        {"query": "x", "mode": "psychic"},
        {"query": "x", "limit": 0},
        {"query": "x", "limit": 101},
        {"query": "x", "limit": -5},
        {"query": "x", "token_budget": 0},
        {"query": "x", "token_budget": -1},
        {"query": "x", "filters": {"colour": "red"}},
        {"query": "x", "filters": {"hint_tags": "food"}},
        {"query": "x", "filters": "none"},
        {"query": "x", "ranking": {"fusion": "magic"}},
        {"query": "x", "ranking": {"weights": {"telepathy": 1}}},
        {"query": "x", "ranking": {"rrf_k": -1}},
        {"query": "x", "ranking": {"context_stand_in": "yes"}},
        {"query": "x", "explain": "very"},
        {"query": "x", "unknown": 1},
    ],
)
def test_bad_search_input_is_400(api, bucket, body):
    response = api.post(f"/api/v1/buckets/{bucket.pk}/search", body, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "invalid"


def test_ranking_overrides_are_applied(api, bucket):
    write(bucket, *CORPUS, api=api, sequence=False)
    body = search(api, bucket, "coffee", ranking={"fusion": "score", "weights": {"vector": 0}}, explain=True)
    assert body["results"][0]["explain"]["fusion"] == "score"
    assert "Coffee" in body["results"][0]["content"] or "coffee" in body["results"][0]["content"]


@pytest.mark.parametrize(
    ("zeroed", "runs"),
    [
        ({"keyword_context": 0}, {"bm25": [False], "vector": [False, True], "embed": 1}),
        ({"keyword": 0, "keyword_context": 0}, {"bm25": [], "vector": [False, True], "embed": 1}),
        ({"vector_context": 0}, {"bm25": [False, True], "vector": [False], "embed": 1}),
        # (the key documents' vector is weighted in by default: zeroed too, no embedding is made)
        ({"vector": 0, "vector_context": 0, "vector_key": 0}, {"bm25": [False, True], "vector": [], "embed": 0}),
        (None, {"bm25": [False, True], "vector": [False, True], "embed": 1}),  # the defaults
    ],
)
def test_signals_weighted_zero_are_not_run(api, bucket, monkeypatch, zeroed, runs):
    """With the defaults every signal runs (both BM25 and both vector walks, one embedding)."""
    from engram_site.providers import embedding

    write(bucket, *CORPUS, api=api, sequence=False)
    seen = {"bm25": [], "vector": [], "embed": 0}
    real_bm25, real_vector, real_embed = keyword.bm25, vector.nearest, embedding.embed_query

    def counting_bm25(*args, context, **kwargs):
        seen["bm25"].append(context)
        return real_bm25(*args, context=context, **kwargs)

    def counting_nearest(*args, context, **kwargs):
        seen["vector"].append(context)
        return real_vector(*args, context=context, **kwargs)

    def embed(text, **kwargs):
        seen["embed"] += 1
        return real_embed(text, **kwargs)

    monkeypatch.setattr(keyword, "bm25", counting_bm25)
    monkeypatch.setattr(vector, "nearest", counting_nearest)
    monkeypatch.setattr(embedding, "embed_query", embed)
    embedding._embed_query_cached.cache_clear()
    # Every signal weighted in, then some zeroed.
    ranking = {"weights": {"keyword_context": 0.25, **zeroed}} if zeroed is not None else None
    body = search(api, bucket, "ThinkPad laptop", explain=True, **({"ranking": ranking} if ranking else {}))
    assert sorted(seen["bm25"]) == runs["bm25"] and sorted(seen["vector"]) == runs["vector"]
    # Embeddings made (the model's calls): feedback asks for the query's vector again, from the cache.
    assert embedding._embed_query_cached.cache_info().misses == runs["embed"]
    assert (seen["embed"] > 0) == (runs["embed"] > 0)
    assert body["results"] and body["results"][0]["content"] == CORPUS[6]
    signals = set().union(*(hit["explain"]["signals"] for hit in body["results"]))
    assert not signals & set(zeroed if zeroed is not None else {"keyword_context"})


def test_tenant_retrieval_settings_are_defaults(api, tenant, bucket):
    tenant.settings = {"retrieval": {"fusion": "score"}}
    tenant.save()
    write(bucket, *CORPUS, api=api, sequence=False)
    assert search(api, bucket, "coffee", explain=True)["results"][0]["explain"]["fusion"] == "score"


def test_empty_bucket_returns_no_results(api, bucket):
    for mode in ("hybrid", "vector", "keyword"):
        assert search(api, bucket, "anything", mode=mode)["results"] == []


def test_read_scope_can_search_write_scope_cannot(client_factory, tenant, bucket, api):
    ids = write(bucket, *CORPUS, api=api, sequence=False)
    reader = client_factory(tenant, scopes=["read"])
    hits = search(reader, bucket, "coffee", mode="keyword")["results"]
    assert [hit["id"] for hit in hits][:1] == [ids[1]]  # it really searched
    writer = client_factory(tenant, scopes=["write"])
    refused = writer.post(f"/api/v1/buckets/{bucket.pk}/search", {"query": "coffee"}, format="json")
    assert refused.status_code == 403 and "results" not in refused.json()


def test_outsider_cannot_search_a_bucket(api, outsider_api, other_bucket, bucket):
    write(bucket, *CORPUS, api=api, sequence=False)
    response = outsider_api.post(f"/api/v1/buckets/{bucket.pk}/search", {"query": "coffee"}, format="json")
    assert response.status_code == 404
    # and the outsider's own bucket never shows this tenant's rows
    response = outsider_api.post(f"/api/v1/buckets/{other_bucket.pk}/search", {"query": "coffee"}, format="json")
    assert response.json()["results"] == []
    assert outsider_api.post(f"/api/v1/buckets/{uuid.uuid4()}/search", {"query": "x"}, format="json").status_code == 404


class TestModelUnavailable:
    def test_writes_succeed_without_embeddings_and_search_degrades_to_keyword(self, api, bucket, settings):
        settings.ENGRAM_EMBEDDINGS_ENABLED = False
        ids = write(bucket, *CORPUS, api=api, sequence=False)
        assert Memory.objects.filter(bucket=bucket, embedding__isnull=True).count() == len(CORPUS)
        assert Memory.objects.filter(bucket=bucket, text_lemmatized__isnull=True).count() == 0
        assert api.get(f"/api/v1/memories/{ids[0]}").json()["enrichment"]["embedding"] == "pending"
        for mode in ("hybrid", "vector"):
            body = search(api, bucket, "ThinkPad laptop", mode=mode)
            assert body["mode_used"] == "keyword"
            assert body["warnings"] and "unavailable" in body["warnings"][0]
            assert body["results"][0]["id"] == ids[6]
        pending = api.get(f"/api/v1/buckets/{bucket.pk}/memories?pending=true").json()["results"]
        assert len(pending) == len(CORPUS)

        # The model comes back: the sweep fills every row in, and vector search works again.
        from memories.services import memories_enrich_all_pending

        settings.ENGRAM_EMBEDDINGS_ENABLED = True
        report = memories_enrich_all_pending()
        assert report.embedded == len(CORPUS)
        assert not Memory.objects.filter(bucket=bucket, embedding__isnull=True).exists()
        assert (
            search(api, bucket, "what kind of canine companion do I have", mode="vector")["results"][0]["id"] == ids[0]
        )

    def test_a_model_that_crashes_mid_request_loses_no_write(self, api, bucket, monkeypatch):
        model = embedding.get_model()

        def broken(*args, **kwargs):
            raise RuntimeError("CUDA out of memory, or whatever models do")

        monkeypatch.setattr(model, "encode", broken)
        ids = write(bucket, *CORPUS[:3], api=api, sequence=True)
        assert Memory.objects.filter(pk__in=ids, embedding__isnull=True).count() == 3
        assert (
            Memory.objects.filter(pk__in=ids, context_text__isnull=False, context_embedding__isnull=True).count() == 2
        )
        body = search(api, bucket, "coffee with a crashed model")
        assert body["mode_used"] == "keyword"

    def test_lemmatizer_down_stores_rows_and_the_sweep_fills_lemmas(self, api, bucket, monkeypatch):
        from engram_site.providers import lemmatizer
        from memories.services import memories_enrich_all_pending

        def unavailable():
            raise lemmatizer.LemmatizerUnavailable("spaCy is gone")

        monkeypatch.setattr(lemmatizer, "_load", unavailable)
        ids = write(bucket, *CORPUS[:5], api=api, sequence=False)
        assert Memory.objects.filter(pk__in=ids, text_lemmatized__isnull=True).count() == 5
        monkeypatch.undo()
        report = memories_enrich_all_pending()
        assert report.lemmatized == 5
        assert not Memory.objects.filter(pk__in=ids, text_lemmatized__isnull=True).exists()
        assert search(api, bucket, "peanuts", mode="keyword")["results"][0]["id"] == ids[4]


@pytest.mark.django_db(transaction=True)
class TestParallelSignals:
    """ENGRAM_SEARCH_PARALLEL: the vector and graph signals run in executor threads, on their
    own connections (committed data only, hence a transactional test)."""

    @pytest.fixture(autouse=True)
    def _close_thread_connections(self):
        from memories.retrieval import close_search_connections

        yield
        close_search_connections()

    def test_parallel_and_serial_searches_give_the_same_answer(self, api, bucket, settings):
        write(bucket, *CORPUS, "Anna moved from Boston to Denver last year.", api=api, sequence=False)
        answers = {}
        for parallel in (False, True):
            settings.ENGRAM_SEARCH_PARALLEL = parallel
            for mode in ("hybrid", "vector", "graph"):
                body = search(api, bucket, "Where does my sister Anna work?", mode=mode, explain=True)
                answers[(parallel, mode)] = [(r["id"], round(r["score"], 9), r["explain"]) for r in body["results"]]
        for mode in ("hybrid", "vector", "graph"):
            assert answers[(True, mode)] == answers[(False, mode)], mode
        assert answers[(True, "hybrid")][0][2]["signals"].keys() >= {"vector", "keyword"}

    def test_signal_threads_replace_connections_the_database_dropped(self, api, bucket, settings):
        """The threads keep their connections between searches without Django's per-use
        health check; one the server has closed since (a restart, an idle timeout) is
        replaced and the signal run again, so the search does not fail."""
        from django.db import connection

        write(bucket, *CORPUS, api=api, sequence=False)
        settings.ENGRAM_SEARCH_PARALLEL = True
        first = search(api, bucket, "Where does my sister Anna work?", mode="hybrid")
        with connection.cursor() as cur:
            cur.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
            )
            assert cur.fetchone()[0] >= 2  # the threads' connections were there, and are gone
        again = search(api, bucket, "Where does my sister Anna work?", mode="hybrid")
        assert [r["id"] for r in again["results"]] == [r["id"] for r in first["results"]]
        assert again["mode_used"] == "hybrid" and not again["warnings"]

    def test_a_failing_model_in_the_vector_thread_degrades_to_keyword(self, api, bucket, settings, monkeypatch):
        write(bucket, *CORPUS, api=api, sequence=False)
        settings.ENGRAM_SEARCH_PARALLEL = True

        def broken(texts, **kwargs):
            raise embedding.EmbeddingUnavailable("model crashed")

        monkeypatch.setattr(embedding, "embed_texts", broken)
        embedding._embed_query_cached.cache_clear()
        body = search(api, bucket, "ThinkPad laptop", mode="hybrid")
        assert body["mode_used"] == "keyword" and body["warnings"]
        assert "ThinkPad" in body["results"][0]["content"]


@pytest.mark.django_db(transaction=True)
def test_large_buckets_are_searched_through_the_hnsw_index_with_its_settings(api, bucket, monkeypatch):
    from django.db import connection

    # Pretend the bucket is large, and keep the planner off scanning and sorting this small
    # table: the index must answer, with hnsw.ef_search applied in the signal's transaction
    # (without it pgvector's default of 40 returns too few rows and the search falls back to
    # an exact scan). Autocommit, as in production: no test transaction hides a lost SET LOCAL.
    monkeypatch.setattr(vector, "EXACT_SCAN_BELOW", 10)
    write(
        bucket,
        *[f"Reading list entry {i}: a novel about the sea number {i}" for i in range(60)],
        api=api,
        sequence=True,
    )
    with connection.cursor() as cur:
        cur.execute("SET enable_seqscan = off; SET enable_sort = off; SET enable_bitmapscan = off")
    try:
        body = search(api, bucket, "books about the ocean", mode="vector", explain=True, limit=5)
    finally:
        with connection.cursor() as cur:
            cur.execute("RESET enable_seqscan; RESET enable_sort; RESET enable_bitmapscan")
    walks = body["results"][0]["explain"]["vector_search"]
    assert (walks["vector"], walks["vector_context"]) == ("hnsw", "hnsw")  # (vector_key: the bucket has no keys)


@pytest.mark.django_db(transaction=True)
def test_the_walks_order_by_the_expression_the_hnsw_indexes_hold(api, bucket, monkeypatch):
    from django.db import connection
    from django.db.backends import utils

    from engram_site.db import binding_cursor
    from maintenance import nearest

    # Every statement ordering by a half-precision distance, from any thread's connection.
    walks = []
    real_execute = utils.CursorWrapper.execute

    def execute(self, sql, params=None):
        if "halfvec" in sql:
            walks.append((sql, params))
        return real_execute(self, sql, params)

    monkeypatch.setattr(utils.CursorWrapper, "execute", execute)
    monkeypatch.setattr(vector, "EXACT_SCAN_BELOW", 10)
    write(
        bucket,
        *[f"Reading list entry {i}: a novel about the sea number {i}" for i in range(30)],
        api=api,
        sequence=True,
    )
    search(api, bucket, "books about the ocean", mode="vector")
    first = bucket.memories.order_by("created_at").first()
    assert nearest.nearest(tenant_id=bucket.tenant_id, bucket_id=bucket.pk, memory_id=first.pk, k=5, exact=False)
    assert len(walks) == 3
    monkeypatch.setattr(utils.CursorWrapper, "execute", real_execute)

    # The planner may use an index only for the expression it holds: on this small table it
    # does once scanning and sorting are off, and would scan and sort anyway if it could not.
    # Explained with the parameters bound as the search binds them (the query vector in binary).
    indexes, used = ("idx_memories_embedding_hnsw", "idx_memories_context_hnsw"), set()
    with connection.cursor() as cur:
        cur.execute("SET enable_seqscan = off; SET enable_sort = off; SET enable_bitmapscan = off")
        try:
            with binding_cursor(connection) as bound:
                for sql, params in walks:
                    bound.execute("EXPLAIN " + sql, params)
                    plan = "\n".join(row[0] for row in bound.fetchall())
                    walked = {name for name in indexes if f"using {name}" in plan}
                    assert walked, plan
                    used |= walked
        finally:
            cur.execute("RESET enable_seqscan; RESET enable_sort; RESET enable_bitmapscan")
    assert used == set(indexes)


@pytest.mark.django_db(transaction=True)
def test_the_hnsw_walk_ranks_by_the_query_it_was_given(api, bucket, monkeypatch):
    """The walk binds the query vector in binary; ranked by anything else (a placeholder
    typed halfvec would misread those bytes) the nearest memory would not come first."""

    monkeypatch.setattr(vector, "EXACT_SCAN_BELOW", 0)
    texts = [
        "My sister Anna works as a nurse in Boston.",
        "The car needs new winter tyres before December.",
        "I am allergic to peanuts and cashews.",
        "The wifi password is written on the fridge door.",
        "We adopted a grey cat called Miso last spring.",
    ]
    write(bucket, *texts, api=api, sequence=False)
    for query, expected in [
        ("What is Anna's job?", 0),
        ("Which nuts can't I eat?", 2),
        ("How do I get online at home?", 3),
        ("What pet do we have?", 4),
        ("What does the car need?", 1),
    ]:
        body = search(api, bucket, query, mode="vector", explain=True)
        assert body["results"][0]["explain"]["vector_search"]["vector"] == "hnsw"
        assert body["results"][0]["content"] == texts[expected], query


def reader_and_gardener(api, bucket, monkeypatch) -> list[dict]:
    """A "large" bucket (the exact-read cutoff lowered to 20) where the agent "reader" wrote
    60 memories and "gardener" three, analysed: the planner estimates three rows for the
    gardener's filter, below the cutoff. Returns the gardener's memories."""
    from django.db import connection

    monkeypatch.setattr(vector, "EXACT_SCAN_BELOW", 20)
    reading = [{"content": f"Reading list entry {i}: a novel about the sea", "agent_id": "reader"} for i in range(60)]
    garden = [{"content": f"Garden note {i}: water the tomatoes at dawn", "agent_id": "gardener"} for i in range(3)]
    write(bucket, *reading, *garden, api=api, sequence=False)
    with connection.cursor() as cur:
        cur.execute("ANALYZE memories")
    return garden


@pytest.mark.django_db(transaction=True)
def test_a_filter_leaving_few_rows_is_searched_exactly_without_walking_the_index(api, bucket, monkeypatch):

    # The gardener's few rows are read and ranked exactly; the reader's filter still walks the index.
    garden = reader_and_gardener(api, bucket, monkeypatch)
    walks = []
    real_settings = vector.hnsw_settings
    monkeypatch.setattr(vector, "hnsw_settings", lambda cur, ef: walks.append(ef) or real_settings(cur, ef))

    body = search(api, bucket, "tomatoes", mode="vector", explain=True, filters={"agent_id": "gardener"})
    assert sorted(r["content"] for r in body["results"]) == sorted(g["content"] for g in garden)
    assert body["results"][0]["explain"]["vector_search"]["vector"] == "exact" and walks == []

    # (20 candidates: a walk answering fewer rows than asked for falls back to an exact scan.)
    body = search(
        api, bucket, "books about the ocean", mode="vector", explain=True, filters={"agent_id": "reader"},
        ranking={"candidates": 20},
    )  # fmt: skip
    assert body["results"][0]["explain"]["vector_search"]["vector"] == "hnsw" and walks
    assert {r["agent_id"] for r in body["results"]} == {"reader"}


@pytest.mark.django_db(transaction=True)
def test_the_filtered_row_estimate_is_planned_once_per_filter_until_the_bucket_changes(api, bucket, monkeypatch):

    garden = reader_and_gardener(api, bucket, monkeypatch)
    planned = []  # the agent of every filter the planner was asked about
    real_estimate = vector.estimated_rows

    def estimate(where, params, column):
        planned.append(params[-1])
        return real_estimate(where, params, column)

    monkeypatch.setattr(vector, "estimated_rows", estimate)

    def gardener_search(query):
        body = search(api, bucket, query, mode="vector", explain=True, filters={"agent_id": "gardener"})
        assert sorted(r["content"] for r in body["results"]) == sorted(g["content"] for g in garden)
        assert body["results"][0]["explain"]["vector_search"]["vector"] == "exact"

    gardener_search("tomatoes")
    assert planned == ["gardener"]
    gardener_search("when to water the plants")  # the same filter: the estimate is reused
    assert planned == ["gardener"]
    search(api, bucket, "the sea", mode="vector", filters={"agent_id": "reader"}, ranking={"candidates": 20})
    assert planned == ["gardener", "reader"]  # another filter is estimated on its own

    # A write to the bucket drops the estimates with the bucket's statistics...
    write(bucket, {"content": "Garden note: the basil needs shade", "agent_id": "gardener"}, api=api, sequence=False)
    garden.append({"content": "Garden note: the basil needs shade"})
    gardener_search("tomatoes")
    assert planned == ["gardener", "reader", "gardener"]
    # ...and so does their age.
    monkeypatch.setattr(stats, "STATS_TTL", 0.0)
    gardener_search("tomatoes")
    assert planned == ["gardener", "reader", "gardener", "gardener"]


def test_reading_only_the_rows_that_can_still_win_changes_no_answer(api, bucket, monkeypatch):

    now = timezone.now()
    items = [
        {"content": text, "created_at": (now - timedelta(days=37 * i)).isoformat()}
        for i, text in enumerate(CORPUS * 3 + [f"{c} (noted again, version {v})" for v in range(4) for c in CORPUS])
    ]
    write(bucket, *items, api=api, sequence=False)
    Memory.objects.filter(bucket=bucket, content__contains="version 1").update(superseded_at=now)
    queries = ["coffee", "where does my sister work", "dog beach", "Kyoto trip", "laptop", "climbing Tuesdays"]

    def answers():
        return [
            [(r["id"], r["score"]) for r in search(api, bucket, q, mode=m, limit=5)["results"]]
            for q in queries
            for m in ("hybrid", "keyword")
        ]

    fetched = []
    real_fetch = rows.fetch_rows
    monkeypatch.setattr(
        rows,
        "fetch_rows",
        lambda b, ids, important=None, **kw: fetched.append(len(ids)) or real_fetch(b, ids, important, **kw),
    )
    cut, rows_cut = answers(), sum(fetched)
    fetched.clear()
    real = rows.fetch_contenders
    monkeypatch.setattr(rows, "fetch_contenders", lambda b, fused, *a, **kw: real(b, fused, a[0], None, *a[2:], **kw))
    assert answers() == cut
    assert rows_cut < sum(fetched)  # the cut did skip rows


@pytest.mark.parametrize("zone", ["UTC", "Europe/Paris"])
def test_search_hits_are_written_exactly_as_the_documented_serializer_writes_them(api, bucket, zone):
    from rest_framework.renderers import JSONRenderer

    from memories import retrieval
    from memories.apis import search as apis

    write(bucket, *CORPUS[:3], api=api, sequence=False)
    write(
        bucket,
        {
            "content": "Anna moved from Boston to Seattle for a new hospital job.",
            "attributed_to": "user",
            "agent_id": "planner",
            "run_id": "run-7",
            "source_actor_id": "anna",
            "hint_root": "family/anna",
            "hint_tags": ["family", "work"],
            "metadata": {"turn": 4, "nested": {"ok": [1, "two", None]}, "note": "é ✓"},
            "created_at": "2024-03-01T10:15:30.123456+01:00",
        },
        api=api,
        sequence=True,
    )
    old = Memory.objects.get(bucket=bucket, content__startswith="My sister Anna")
    new = Memory.objects.get(bucket=bucket, content__startswith="Anna moved")
    Memory.objects.filter(pk=old.pk).update(superseded_at=timezone.now() - timedelta(days=1), superseded_by=new.pk)

    def as_json(value):
        return JSONRenderer().render(value)

    with timezone.override(zone):
        for explain in (False, True):
            result = retrieval.memories_search(
                bucket=bucket, query="where does Anna work", explain=explain, record_access=False
            )
            assert len(result.hits) == 4
            for hit in result.hits:
                item = {**hit.row, "score": round(hit.score, 6), "passage": None, "excerpt": None}
                if explain:
                    item["explain"] = hit.explain
                assert as_json(apis._hit_json(hit, explain)) == as_json(apis.SearchHitOut(item).data)
    body = search(api, bucket, "where does Anna work")
    assert {r["superseded"] for r in body["results"]} == {True, False}
    assert next(r for r in body["results"] if r["agent_id"] == "planner")["metadata"]["note"] == "é ✓"


def test_memories_about_a_person_named_in_the_question_are_boosted(api, bucket):
    write(
        bucket,
        "Anna likes green tea with honey.",
        "Annabel likes green tea too.",
        {"content": "I like green tea in the evening.", "source_actor_id": "Anna"},
        "Bob likes green tea, and so does ann.",
        "Ann and Anna both like green tea.",
        api=api,
        sequence=False,
    )

    def boosted(query):
        body = search(api, bucket, query, mode="keyword", explain=True)
        return {r["content"] for r in body["results"] if "person" in r["explain"]["boosts"]}

    assert boosted("Does Anna or Ann like green tea?") == {
        "Anna likes green tea with honey.",
        "I like green tea in the evening.",  # said by Anna
        "Bob likes green tea, and so does ann.",
        "Ann and Anna both like green tea.",
    }
    assert boosted("Does Anna like green tea?") == {
        "Anna likes green tea with honey.",
        "I like green tea in the evening.",
        "Ann and Anna both like green tea.",
    }


@pytest.mark.django_db(transaction=True)
def test_a_large_bucket_without_context_vectors_skips_the_context_walk_until_it_has_some(api, bucket, monkeypatch):
    """Written as unrelated facts, a bucket has no context vectors: reading all its rows to
    find none would cost a full scan per search. Once it has some, they are searched."""

    monkeypatch.setattr(vector, "EXACT_SCAN_BELOW", 20)
    facts = [f"Fact {i}: the blue notebook sits on shelf {i}" for i in range(30)]
    write(bucket, *facts, api=api, sequence=False)  # sequence=False: no context
    body = search(api, bucket, "Where is the blue notebook?", mode="vector", explain=True)
    walks = body["results"][0]["explain"]["vector_search"]
    assert (walks["vector"], walks["vector_context"]) == ("hnsw", "none")

    # A small bucket is still read exactly: nothing is skipped there.
    monkeypatch.setattr(vector, "EXACT_SCAN_BELOW", 2000)
    body = search(api, bucket, "Which shelf has the notebook?", mode="vector", explain=True)
    walks = body["results"][0]["explain"]["vector_search"]
    assert (walks["vector"], walks["vector_context"]) == ("exact", "exact")

    # This process's writes renew the count: sequenced memories are found by their context
    # (two context vectors, fewer than the cutoff: read exactly).
    monkeypatch.setattr(vector, "EXACT_SCAN_BELOW", 20)
    story = ["We moved to Lisbon in May.", "The new flat has a balcony over the river.", "It gets the morning sun."]
    write(bucket, *story, api=api, sequence=True)
    body = search(api, bucket, "the balcony of the Lisbon flat", mode="vector", explain=True)
    assert body["results"][0]["explain"]["vector_search"]["vector_context"] == "exact"
    assert any(r["explain"]["signals"].get("vector_context") for r in body["results"])


def test_scaled_ef_search_keeps_the_setting_up_to_the_first_size_and_grows_past_it():
    from memories.ranking import EF_SEARCH_MAX
    from memories.retrieval import EF_GROWS_FROM, scaled_ef_search

    assert scaled_ef_search(100, 0) == 100
    assert scaled_ef_search(100, EF_GROWS_FROM) == 100
    assert scaled_ef_search(100, 2.5 * EF_GROWS_FROM) == 229  # 250k, where 0.95 took ~230
    assert scaled_ef_search(100, 10 * EF_GROWS_FROM) == 795  # x8 at 1M, where 400 found 0.941-0.960
    assert scaled_ef_search(40, 10 * EF_GROWS_FROM) == 318  # a lower setting stays lower
    assert scaled_ef_search(100, 1000 * EF_GROWS_FROM) == EF_SEARCH_MAX


def test_the_index_walk_widens_with_the_graph_across_buckets_and_tenants(api, bucket, other_tenant, monkeypatch):
    """Recall at a fixed ef_search falls as the graph grows, and the graph holds every
    tenant's vectors: a walk in a bucket of a large table searches wider."""
    from django.db import connection

    from memories import retrieval

    used = []
    real = vector.hnsw_settings
    monkeypatch.setattr(vector, "hnsw_settings", lambda cur, ef: (used.append(ef), real(cur, ef)))
    monkeypatch.setattr(vector, "EXACT_SCAN_BELOW", 20)
    monkeypatch.setattr(vector, "EF_GROWS_FROM", 100)
    write(bucket, *(f"Fact {i}: the green kettle is in cupboard {i}" for i in range(30)), api=api, sequence=False)
    # The graph's size is the planner's row estimate of the whole table, which rows of earlier tests in
    # this database may have left behind (rolled back or flushed, but counted by autovacuum): count now.
    with connection.cursor() as cur:
        cur.execute("ANALYZE memories")
    retrieval.bucket_stats.clear()
    search(api, bucket, "Where is the kettle?", mode="vector", ranking={"candidates": 10})
    assert used == [100]  # 30 vectors: below the first size, the setting as is

    # Another tenant's 270 memories are in the same graph; ANALYZE counts them.
    neighbour = other_tenant.buckets.create(name="neighbour")
    write(
        neighbour,
        *(f"Note {i}: the train leaves platform {i}" for i in range(270)),
        api=make_client(other_tenant),
        sequence=False,
    )
    with connection.cursor() as cur:
        cur.execute("ANALYZE memories")
    retrieval.bucket_stats.clear()
    used.clear()
    search(api, bucket, "Which cupboard has the kettle?", mode="vector", ranking={"candidates": 10})
    assert used == [retrieval.scaled_ef_search(100, 300)] and used[0] > 100
    # A configured ef_search is the base it grows from.
    used.clear()
    search(api, bucket, "Which cupboard has the kettle?", mode="vector", ranking={"candidates": 10, "ef_search": 20})
    assert used == [retrieval.scaled_ef_search(20, 300)]
