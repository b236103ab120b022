"""A search with include_blocks: the blocks come first, inside the same token budget; a block
that does not fit is left out and named; the memories get what is left (docs/RETRIEVAL.md,
"Memory blocks in an answer")."""

from __future__ import annotations

import random

import pytest

from memories.services.blocks import Expected, block_put, block_tokens
from memories.services.buckets import bucket_create
from tests.factories import make_client, search, write

pytestmark = pytest.mark.django_db

FACTS = [
    "Ana grows tomatoes on her balcony in Porto.",
    "Ana waters the tomatoes every morning before work.",
    "Ana's tomatoes were attacked by aphids in July.",
    "Ana gave her neighbour a basket of tomatoes.",
    "Ana plans to try yellow tomatoes next spring.",
]


def block(bucket, label, content, agent_id=None, **kwargs):
    made, _ = block_put(bucket=bucket, agent_id=agent_id, label=label, content=content, expected=Expected(), **kwargs)
    return made


def spent(answer) -> int:
    """What the answer's texts cost, recounted from what it returned."""
    return sum(b["token_count"] for b in answer["blocks"]) + sum(h["token_count"] for h in answer["results"])


def test_without_a_budget_every_block_comes_first_and_the_results_are_unchanged(api, bucket):
    write(bucket, *FACTS, sequence=False)
    block(bucket, "persona", "I am a gardening assistant.")
    block(bucket, "human", "The user is Ana, who lives in Porto.")
    plain = search(api, bucket, "Ana tomatoes", mode="keyword")
    answer = search(api, bucket, "Ana tomatoes", mode="keyword", include_blocks=True)
    assert [b["label"] for b in answer["blocks"]] == ["human", "persona"]
    assert answer["blocks_left_out"] == []
    assert [h["id"] for h in answer["results"]] == [h["id"] for h in plain["results"]]
    assert answer["total_tokens"] == plain["total_tokens"] + sum(b["token_count"] for b in answer["blocks"])
    assert "blocks" not in plain


def test_a_block_bigger_than_the_budget_is_left_out_and_named_and_memories_fill_the_budget(api, bucket):
    write(bucket, *FACTS, sequence=False)
    big = block(bucket, "persona", "I am a very thorough gardening assistant. " * 20)
    small = block(bucket, "human", "The user is Ana.")
    budget = 60
    assert big.token_count > budget
    answer = search(api, bucket, "Ana tomatoes", mode="keyword", token_budget=budget, include_blocks=True)
    assert [b["label"] for b in answer["blocks"]] == ["human"]
    assert answer["blocks_left_out"] == [
        {"bucket_id": str(bucket.pk), "label": "persona", "agent_id": None, "token_count": big.token_count}
    ]
    assert answer["results"], "the memories fill what the blocks leave"
    assert spent(answer) == answer["total_tokens"] <= budget
    alone = search(api, bucket, "Ana tomatoes", mode="keyword", token_budget=budget - small.token_count)
    assert [h["id"] for h in answer["results"]] == [h["id"] for h in alone["results"]]


def test_blocks_exactly_at_the_budget_leave_no_room_for_memories(api, bucket):
    write(bucket, *FACTS, sequence=False)
    one = block(bucket, "human", "The user is Ana, who grows tomatoes.")
    two = block(bucket, "persona", "I am a gardening assistant.")
    budget = one.token_count + two.token_count
    answer = search(api, bucket, "Ana tomatoes", mode="keyword", token_budget=budget, include_blocks=True)
    assert [b["label"] for b in answer["blocks"]] == ["human", "persona"]
    assert answer["results"] == [] and answer["total_tokens"] == budget
    assert answer["warnings"] == ["The blocks took the whole token budget: no memory fits."]
    # One token less: the second block no longer fits, and a memory may take its place.
    short = search(api, bucket, "Ana tomatoes", mode="keyword", token_budget=budget - 1, include_blocks=True)
    assert [b["label"] for b in short["blocks"]] == ["human"]
    assert [b["label"] for b in short["blocks_left_out"]] == ["persona"]
    assert spent(short) <= budget - 1


def test_many_blocks_and_any_budget_never_exceed_it(api, bucket):
    write(bucket, *FACTS, sequence=False)
    rng = random.Random(7)
    sizes = {}
    for i in range(30):
        text = " ".join(
            rng.choice(["figs", "plums", "soil", "rain", "Ana", "Porto", "compost"]) for _ in range(rng.randint(1, 40))
        )
        sizes[f"note-{i:02d}"] = block(bucket, f"note-{i:02d}", text).token_count
    for budget in [1, 2, 5, 17, 50, 120, 333, 700, 5_000]:
        answer = search(api, bucket, "Ana tomatoes", mode="keyword", token_budget=budget, include_blocks=True)
        assert spent(answer) == answer["total_tokens"] <= budget, budget
        named = [b["label"] for b in answer["blocks"]] + [b["label"] for b in answer["blocks_left_out"]]
        assert sorted(named) == sorted(sizes), budget
        # Greedy in order: a block was left out only because it did not fit what was left then.
        used = 0
        included = {b["label"] for b in answer["blocks"]}
        for label in sorted(sizes):
            if label in included:
                used += sizes[label]
            else:
                assert used + sizes[label] > budget, (budget, label)


def test_a_list_of_labels_picks_those_blocks_in_that_order(api, bucket):
    block(bucket, "persona", "I am a gardening assistant.")
    block(bucket, "human", "The user is Ana.")
    block(bucket, "goals", "Help Ana grow yellow tomatoes.")
    answer = search(api, bucket, "tomatoes", mode="keyword", include_blocks=["persona", "goals", "missing"])
    assert [b["label"] for b in answer["blocks"]] == ["persona", "goals"]
    assert answer["blocks"][0]["content"] == "I am a gardening assistant."
    assert answer["blocks"][0]["etag"] and answer["blocks"][0]["version"] == 1


def test_the_blocks_are_the_shared_ones_and_the_searched_agents(tenant, api, bucket):
    block(bucket, "human", "Shared: the user is Ana.")
    block(bucket, "persona", "alfa's persona", agent_id="alfa")
    block(bucket, "persona", "beta's persona", agent_id="beta")
    unrestricted = search(api, bucket, "Ana", mode="keyword", include_blocks=True)
    assert [b["content"] for b in unrestricted["blocks"]] == ["Shared: the user is Ana."]
    for_alfa = search(api, bucket, "Ana", mode="keyword", include_blocks=True, filters={"agent_id": "alfa"})
    assert [b["content"] for b in for_alfa["blocks"]] == ["Shared: the user is Ana.", "alfa's persona"]
    held = make_client(tenant, agent_ids=["alfa"], include_shared=True)
    mine = search(held, bucket, "Ana", mode="keyword", include_blocks=True)
    assert [b["content"] for b in mine["blocks"]] == ["Shared: the user is Ana.", "alfa's persona"]
    # A token held to alfa asking for beta's blocks gets none of them.
    asked = search(held, bucket, "Ana", mode="keyword", include_blocks=True, filters={"agent_id": "beta"})
    assert "beta's persona" not in str(asked)
    without_shared = make_client(tenant, agent_ids=["alfa"])
    assert [
        b["content"] for b in search(without_shared, bucket, "Ana", mode="keyword", include_blocks=True)["blocks"]
    ] == ["alfa's persona"]


def test_explain_names_the_budget_the_blocks_took(api, bucket):
    write(bucket, *FACTS, sequence=False)
    human = block(bucket, "human", "The user is Ana, who grows tomatoes.")
    block(bucket, "persona", "word " * 300)
    answer = search(api, bucket, "Ana tomatoes", mode="keyword", token_budget=80, include_blocks=True, explain=True)
    shares = {"token_budget": 80, "blocks": human.token_count, "memories": 80 - human.token_count}
    assert answer["explain"]["budget"] == {**shares, "memory_tokens": sum(h["token_count"] for h in answer["results"])}
    assert answer["explain"]["blocks"] == ["human"] and answer["explain"]["blocks_left_out"] == ["persona"]
    assert answer["results"] and all(h["explain"]["budget"] == shares for h in answer["results"])


def test_a_search_across_buckets_takes_each_buckets_blocks(tenant, api, bucket):
    other = bucket_create(tenant=tenant, name="second")
    block(bucket, "persona", "first bucket persona")
    block(other, "persona", "second bucket persona")
    response = api.post(
        "/api/v1/search",
        {"query": "persona", "mode": "keyword", "include_blocks": True, "buckets": [str(other.pk), str(bucket.pk)]},
        format="json",
    )
    assert response.status_code == 200, response.content
    assert [(b["bucket_id"], b["content"]) for b in response.json()["blocks"]] == [
        (str(other.pk), "second bucket persona"),
        (str(bucket.pk), "first bucket persona"),
    ]


@pytest.mark.parametrize("value", [None, 1, "persona", [], ["Persona"], ["a", "a"], [1], {"persona": True}])
def test_include_blocks_is_true_false_or_a_list_of_labels(api, bucket, value):
    response = api.post(f"/api/v1/buckets/{bucket.pk}/search", {"query": "x", "include_blocks": value}, format="json")
    assert response.status_code == 400 and "include_blocks" in response.json()["errors"]


def test_false_includes_no_blocks(api, bucket):
    block(bucket, "persona", "x")
    assert "blocks" not in search(api, bucket, "x", mode="keyword", include_blocks=False)


def test_block_tokens_are_what_the_budget_counts():
    assert block_tokens("") == 0
    assert block_tokens("unbelievable tomatoes") >= 2
