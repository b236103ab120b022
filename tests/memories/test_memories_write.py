"""The write path: POST /api/v1/buckets/{id}/memories."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import numpy as np
import pytest
from django.db import connection

from memories.models import Memory
from memories.text import normalize_for_hash, text_hash

pytestmark = pytest.mark.django_db


def url(bucket) -> str:
    return f"/api/v1/buckets/{bucket.pk}/memories"


def test_single_memory_is_stored_with_every_derived_column(api, bucket):
    response = api.post(
        url(bucket),
        {
            "content": "I moved to Lisbon in March.",
            "attributed_to": "user",
            "agent_id": "planner",
            "run_id": "r1",
            "source_actor_id": "slack-bot",
            "hint_root": "/home/notes",
            "hint_tags": ["travel", "home", "travel"],
            "metadata": {"source": "chat"},
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    [result] = response.json()["results"]
    assert result["deduplicated"] is False
    memory = Memory.objects.get(pk=result["id"])
    assert memory.tenant_id == bucket.tenant_id and memory.bucket_id == bucket.pk
    assert memory.content == "I moved to Lisbon in March."
    assert memory.text_hash == text_hash("I moved to Lisbon in March.") and len(memory.text_hash) == 32
    assert memory.hint_tags == ["travel", "home"]
    assert memory.metadata == {"source": "chat"}
    assert memory.token_count and memory.token_count > 5
    assert "lisbon" in memory.text_lemmatized.split() and "move" in memory.text_lemmatized.split()
    assert memory.embedding is not None and len(memory.embedding) == 384
    assert np.isclose(np.linalg.norm(memory.embedding), 1.0, atol=1e-3)
    assert memory.created_at is not None


@pytest.mark.parametrize(
    ("text", "terms"),
    [
        ("What does Alice do for work?", ["alice", "work"]),  # not "doe" (the lookup lemma of "does")
        ("She did well in the race", ["race"]),  # not "good" (the lookup lemma of "well")
        ("I made pasta with my sister", ["make", "pasta", "sister"]),  # stop word, but a kept lemma
    ],
)
def test_stop_words_stay_out_of_the_lexical_document_whatever_their_lemma(text, terms):
    from engram_site.providers import lemmatizer
    from memories import search_terms

    assert lemmatizer.lemmatize(text).split() == terms
    assert search_terms.query_terms(text) == terms


def test_date_words_are_part_of_the_lexical_document(api, bucket):
    api.post(url(bucket), {"content": "Adopted a kitten", "created_at": "2023-05-16T08:00:00Z"}, format="json")
    memory = Memory.objects.get(bucket=bucket)
    assert memory.text_lemmatized.split()[-3:] == ["2023", "may", "tuesday"]
    assert memory.created_at == datetime(2023, 5, 16, 8, tzinfo=UTC)


def test_batch_results_come_back_in_input_order(api, bucket):
    contents = [f"Fact number {i} about the garden" for i in range(25)]
    response = api.post(url(bucket), {"memories": [{"content": c} for c in contents]}, format="json")
    assert response.status_code == 201
    ids = [r["id"] for r in response.json()["results"]]
    stored = dict(Memory.objects.filter(bucket=bucket).values_list("id", "content"))
    assert [stored[uuid.UUID(i)] for i in ids] == contents
    # Batch items without explicit times keep their order in created_at.
    times = [Memory.objects.get(pk=i).created_at for i in ids]
    assert times == sorted(times) and len(set(times)) == len(times)


def test_duplicate_content_returns_existing_id(api, bucket):
    first = api.post(url(bucket), {"content": "I prefer dark roast coffee"}, format="json").json()["results"][0]
    again = api.post(url(bucket), {"content": "  i PREFER dark-roast coffee!! "}, format="json").json()["results"][0]
    assert again == {"id": first["id"], "deduplicated": True}
    assert Memory.objects.filter(bucket=bucket).count() == 1


def test_duplicates_inside_one_batch_are_stored_once(api, bucket):
    response = api.post(
        url(bucket),
        {"memories": [{"content": "Alice likes tea"}, {"content": "alice likes tea."}, {"content": "Bob likes tea"}]},
        format="json",
    )
    results = response.json()["results"]
    assert results[0]["deduplicated"] is False and results[1] == {"id": results[0]["id"], "deduplicated": True}
    assert results[2]["deduplicated"] is False
    assert Memory.objects.filter(bucket=bucket).count() == 2


def test_texts_the_bucket_already_holds_skip_the_model(api, bucket, monkeypatch):
    from engram_site.providers import embedding

    old = [{"content": f"Box {i} sits on the {i}th shelf of the garage."} for i in range(5)]
    first = api.post(url(bucket), {"memories": old, "sequence": False}, format="json").json()["results"]
    embedded = []
    real_embed = embedding.embed_texts

    def spy(texts, **kwargs):
        embedded.extend(texts)
        return real_embed(texts, **kwargs)

    monkeypatch.setattr(embedding, "embed_texts", spy)
    again = [{"content": item["content"].upper()} for item in old] + [{"content": "The bike hangs by the door."}]
    response = api.post(url(bucket), {"memories": again, "sequence": False}, format="json")
    assert response.status_code == 201, response.content
    results = response.json()["results"]
    assert results[:5] == [{"id": r["id"], "deduplicated": True} for r in first]
    assert results[5]["deduplicated"] is False
    assert embedded == ["The bike hangs by the door."]  # only the new text met the model
    assert Memory.objects.filter(bucket=bucket).count() == 6
    assert not Memory.objects.filter(bucket=bucket, embedding__isnull=True).exists()


def test_a_held_text_deleted_before_the_insert_is_written_again(bucket, monkeypatch):
    from memories.services.ingest import insert as services

    kept = services.memories_ingest(bucket=bucket, items=[services.MemoryInput(content="Tea at five.")])[0]
    real_prepare, prepared = services._prepare, []

    def prepare(rows, model):
        prepared.append(sorted(row.item.content for row in rows))
        if len(prepared) == 1:  # after the batch looked the text up, before its transaction
            Memory.objects.filter(pk=kept.id).delete()
        return real_prepare(rows, model)

    monkeypatch.setattr(services, "_prepare", prepare)
    items = [services.MemoryInput(content="tea at five"), services.MemoryInput(content="Coffee at nine.")]
    out = services.memories_ingest(bucket=bucket, items=items)
    assert prepared == [["Coffee at nine."], ["Coffee at nine.", "tea at five"]]
    assert [r.deduplicated for r in out] == [False, False] and out[0].id != kept.id
    stored = Memory.objects.get(pk=out[0].id)
    assert stored.content == "tea at five" and stored.embedding is not None and stored.text_lemmatized
    assert Memory.objects.filter(bucket=bucket).count() == 2


def test_same_text_in_two_buckets_is_two_memories(api, tenant, bucket):
    from memories.services.buckets import bucket_create

    other = bucket_create(tenant=tenant, name="second")
    a = api.post(url(bucket), {"content": "shared fact"}, format="json").json()["results"][0]
    b = api.post(url(other), {"content": "shared fact"}, format="json").json()["results"][0]
    assert a["id"] != b["id"] and not b["deduplicated"]


def test_normalisation_keeps_real_distinctions():
    assert normalize_for_hash("I prefer dark-roast coffee!") == normalize_for_hash("i prefer dark roast   coffee")
    assert text_hash("I have a cat") != text_hash("I have cats")  # not lemmatised
    assert text_hash("I love 🍕") != text_hash("I love 🍣")
    assert text_hash("!!!") != text_hash("???")


def test_the_insert_order_puts_short_texts_first_and_spellings_of_one_text_together():
    from memories.text import hash_key

    # One text in two spellings: one key, so every writer meets it at the same place.
    assert hash_key("I prefer dark-roast coffee!") == hash_key("i prefer  dark roast coffee")
    assert hash_key("!!!")[0] == 3 and hash_key("  ?? ")[0] == 2  # hashed verbatim, stripped
    keys = sorted(hash_key(t) for t in ["a much longer sentence about the garden shed", "short one", "mid length text"])
    assert [k[0] for k in keys] == sorted(k[0] for k in keys)
    assert all(k[1] == text_hash(t) for k, t in [(hash_key("Tea."), "Tea."), (hash_key("tea"), "tea")])


def test_a_batch_is_embedded_and_inserted_shortest_text_first(bucket, monkeypatch):
    from memories.services.ingest import insert as services

    monkeypatch.setattr(services, "EMBED_CHUNK_ROWS", 3)
    real_insert, inserted = services._insert, []

    def insert(bucket, rows, model):
        inserted.append([row.item.content for row in rows])
        return real_insert(bucket, rows, model)

    monkeypatch.setattr(services, "_insert", insert)
    texts = [("x" * (n % 11 + 1)) + f" item {n}" for n in range(0, 40, 3)]  # lengths out of order
    out = services.memories_ingest(bucket=bucket, items=[services.MemoryInput(content=t) for t in texts])
    assert [r.deduplicated for r in out] == [False] * len(texts)
    flat = [text for chunk in inserted for text in chunk]
    assert sorted(flat) == sorted(texts) and len(inserted) > 2
    assert [len(t) for t in flat] == sorted(len(t) for t in texts)


@pytest.mark.parametrize(
    "text",
    [
        "".join(map(chr, range(128))),  # every ASCII character: punctuation vs symbols ($+<=>^`|~)
        'Dark-roast, please! (not decaf) — 50% off @ Joe\'s; e-mail: a_b@c.io [x] {y} "q" #tag ¿qué?',
        "Ｆｕｌｌｗｉｄｔｈ！ ﬁ ligature… «quotes» 「括弧」",  # NFKC can turn these into ASCII or not
    ],
)
def test_ascii_fast_path_normalises_like_the_character_definition(text):
    import re
    import unicodedata

    folded = unicodedata.normalize("NFKC", text).casefold()
    spaced = "".join(" " if unicodedata.category(ch).startswith("P") else ch for ch in folded)
    assert normalize_for_hash(text) == re.sub(r"\s+", " ", spaced).strip()


@pytest.mark.parametrize(
    "text",
    [
        "🎉🎉🎉 party time 🥳",
        "東京でラーメンを食べました",
        "مرحبا بالعالم — RTL text ‏",
        "see https://example.com/path?q=1&x=2#frag for details",
        "def f(x):\n    return x ** 2  # code",
        "a" * 5000,
        # Control characters (a bell) are refused: tests/system/test_hostile_input.py
        "Zalgo t̸̢̛e̵͇͝x̶̱̆t̴̰̿ and \u200b zero width",
        "SELECT * FROM memories; DROP TABLE memories; -- ' \" & | ! ( ) : * < ->",
    ],
)
def test_odd_unicode_never_produces_null_lemmas_or_errors(api, bucket, text):
    response = api.post(url(bucket), {"content": text}, format="json")
    assert response.status_code == 201
    memory = Memory.objects.get(pk=response.json()["results"][0]["id"])
    assert memory.text_lemmatized is not None
    assert memory.embedding is not None
    with connection.cursor() as cur:
        cur.execute("SELECT lemmatized_tsv IS NOT NULL FROM memories WHERE id = %s", [memory.pk])
        assert cur.fetchone()[0]


def test_sequence_context_from_the_batch(api, bucket):
    response = api.post(
        url(bucket),
        {
            "memories": [
                {"content": "I started at Acme Robotics in 2019."},
                {"content": "I lead the drone team there."},
                {"content": "5 years already!"},
            ]
        },
        format="json",
    )
    ids = [r["id"] for r in response.json()["results"]]
    first, second, third = (Memory.objects.get(pk=i) for i in ids)
    assert first.context_text is None and first.context_embedding is None
    assert second.context_text == "I started at Acme Robotics in 2019."
    assert third.context_text == "I started at Acme Robotics in 2019.\nI lead the drone team there."
    assert third.context_embedding is not None and "acme" in third.context_lemmatized.split()


def test_sequence_context_continues_a_run_across_requests(api, bucket):
    api.post(url(bucket), {"content": "We adopted a puppy named Miso", "run_id": "chat-7"}, format="json")
    api.post(url(bucket), {"content": "Unrelated fact from another run", "run_id": "chat-8"}, format="json")
    response = api.post(url(bucket), {"content": "He chewed my shoes", "run_id": "chat-7"}, format="json")
    memory = Memory.objects.get(pk=response.json()["results"][0]["id"])
    assert memory.context_text == "We adopted a puppy named Miso"


def test_sequence_false_stores_no_context(api, bucket):
    api.post(url(bucket), {"memories": [{"content": "one"}, {"content": "two"}], "sequence": False}, format="json")
    assert not Memory.objects.filter(bucket=bucket, context_text__isnull=False).exists()


def test_a_small_batch_is_embedded_in_two_calls_memories_apart_from_their_contexts(api, bucket, monkeypatch):
    from engram_site.providers import embedding

    calls = []
    original = embedding.embed_texts

    def spy(texts, **kwargs):
        calls.append(len(texts))
        return original(texts, **kwargs)

    monkeypatch.setattr(embedding, "embed_texts", spy)
    api.post(url(bucket), {"memories": [{"content": f"fact {i}"} for i in range(8)]}, format="json")
    # One chunk (8 rows, SMALLEST_CHUNK_ROWS x 2): the 8 memories in one call, the 7
    # (longer) context texts in another, so no memory is padded to a context's length.
    assert calls == [8, 7]


def test_token_count_uses_the_model_tokenizer(api, bucket):
    from engram_site.providers.embedding import get_model

    api.post(url(bucket), {"content": "Tokenization counts wordpieces"}, format="json")
    memory = Memory.objects.get(bucket=bucket)
    expected = len(get_model().tokenizer("Tokenization counts wordpieces", add_special_tokens=False)["input_ids"])
    assert memory.token_count == expected


def test_write_scope_is_required(client_factory, tenant, bucket):
    reader = client_factory(tenant, scopes=["read"])
    assert reader.post(url(bucket), {"content": "x"}, format="json").status_code == 403
    assert not Memory.objects.exists()


def test_outsider_cannot_write_into_a_bucket(outsider_api, bucket):
    response = outsider_api.post(url(bucket), {"content": "intrusion"}, format="json")
    assert response.status_code == 404
    assert not Memory.objects.exists()


def test_restricted_token_cannot_write_to_another_bucket(client_factory, tenant, bucket):
    from memories.services.buckets import bucket_create

    other = bucket_create(tenant=tenant, name="other")
    restricted = client_factory(tenant, bucket=bucket)
    assert restricted.post(url(other), {"content": "x"}, format="json").status_code == 404
    assert restricted.post(url(bucket), {"content": "x"}, format="json").status_code == 201


# --- batches larger than one embedding chunk (embedded one chunk ahead of the inserts) --------


def big_batch(count: int, prefix: str = "Fact") -> list[dict]:
    return [{"content": f"{prefix} number {i}: the {i % 7}th shelf holds box {i * 13 % 101}."} for i in range(count)]


def test_a_batch_of_several_chunks_stores_every_row_with_its_own_vectors(api, bucket, monkeypatch):
    from engram_site.providers import embedding
    from memories.services.ingest import insert as services
    from memories.services.ingest.derived import join_context

    monkeypatch.setattr(services, "EMBED_CHUNK_ROWS", 7)
    items = big_batch(30)
    response = api.post(url(bucket), {"memories": items}, format="json")
    assert response.status_code == 201, response.content
    ids = [r["id"] for r in response.json()["results"]]
    assert len(set(ids)) == 30
    rows = {str(m.pk): m for m in Memory.objects.filter(pk__in=ids)}
    expected = embedding.embed_texts([item["content"] for item in items])
    for i, memory_id in enumerate(ids):
        memory = rows[memory_id]
        assert memory.content == items[i]["content"]  # results in request order
        assert np.abs(np.asarray(memory.embedding) - expected[i]).max() < 1e-5  # its own vector, not a neighbour's
        if i:  # the batch is a sequence: each row after the first has a context vector
            context = join_context("\n".join(x["content"] for x in items[max(0, i - 2) : i]), items[i]["content"])
            assert (
                memory.context_text
                and np.abs(np.asarray(memory.context_embedding) - embedding.embed_texts([context])[0]).max() < 1e-5
            )


@pytest.mark.parametrize("count", [1, 8, 9, 10, 16, 17, 63, 64, 65, 100, 256, 319, 320, 321, 1000, 1018])
def test_chunks_keep_every_row_once_in_order_and_shrink_towards_the_end(count):
    from memories.services.ingest import insert as services

    rows = list(range(count))
    chunks = services._chunks(rows)
    sizes = [len(chunk) for chunk in chunks]
    assert [row for chunk in chunks for row in chunk] == rows
    assert all(0 < size <= services.EMBED_CHUNK_ROWS for size in sizes)
    assert sizes == sorted(sizes, reverse=True)  # no small chunk before a large one
    assert sizes[-1] == (services.SMALLEST_CHUNK_ROWS if count > 2 * services.SMALLEST_CHUNK_ROWS else count)
    if count == 10:
        assert sizes == [6, 4]
    if count == 100:
        assert sizes == [40, 32, 16, 8, 4]
    if count >= 1000:
        assert sizes[-6:] == [128, 64, 32, 16, 8, 4] and max(sizes[:-6]) - min(sizes[:-6]) <= 1


def test_a_failure_inserting_a_later_chunk_leaves_nothing_of_the_batch(api, bucket, monkeypatch):
    from memories.services.ingest import insert as services

    monkeypatch.setattr(services, "EMBED_CHUNK_ROWS", 8)
    monkeypatch.setattr(services, "SMALLEST_CHUNK_ROWS", 2)
    real_insert, calls = services._insert, []

    def insert(bucket, rows, model):
        calls.append(len(rows))
        if len(calls) == 3:
            raise RuntimeError("the database went away mid-batch")
        return real_insert(bucket, rows, model)

    monkeypatch.setattr(services, "_insert", insert)
    with pytest.raises(RuntimeError, match="mid-batch"):
        services.memories_ingest(
            bucket=bucket, items=[services.MemoryInput(content=i["content"]) for i in big_batch(14)]
        )
    assert calls == [8, 4, 2]  # the chunks halve towards the end; the third failed
    assert not Memory.objects.filter(bucket=bucket).exists()


def test_a_model_failing_on_one_chunk_stores_those_rows_without_vectors_and_the_rest_with(api, bucket, monkeypatch):
    from engram_site.providers import embedding
    from memories.services.ingest import insert as services

    monkeypatch.setattr(services, "EMBED_CHUNK_ROWS", 4)
    model = embedding.get_model()
    real_encode = model.encode

    def encode(texts, **kwargs):
        if any("poisoned" in t for t in texts):
            raise RuntimeError("model crashed on this chunk")
        return real_encode(texts, **kwargs)

    monkeypatch.setattr(model, "encode", encode)
    items = big_batch(12) + [{"content": "A poisoned sentence."}]
    response = api.post(url(bucket), {"memories": items, "sequence": False}, format="json")
    assert response.status_code == 201, response.content
    stored = Memory.objects.filter(bucket=bucket)
    assert stored.count() == 13  # no write lost
    without = set(stored.filter(embedding__isnull=True).values_list("content", flat=True))
    assert "A poisoned sentence." in without
    assert 0 < len(without) <= 4  # only the failing chunk
    assert stored.filter(embedding__isnull=False).count() == 13 - len(without)
