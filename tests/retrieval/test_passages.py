"""Long memories in search: a memory is found by any of its passages, scored by the best of its
own vector and its passages' (the ``passages`` knob), and a hit names the passage that matched."""

from __future__ import annotations

import pytest

from memories.models import Memory
from memories.retrieval import memories_search
from memories.retrieval.stats import bucket_stats
from memories.services.passages import memory_passages_build
from tests.factories import search, write

pytestmark = pytest.mark.django_db

FILLER = [
    "The migration plan covers the staging database, the replicas and the nightly backups.",
    "Each step lists its command, the expected output and the person who runs it.",
    "We keep a log of every step with the time it started and the time it finished.",
    "The rollback procedure restores the last snapshot and replays the binary log.",
    "Monitoring dashboards must stay green for an hour before the next step begins.",
]
# Far past the model's window: only a passage's vector sees it.
ANSWER = "Remember that Ingrid's sourdough starter is fed with rye flour every Sunday evening."


def _long_memory() -> str:
    body = "\n\n".join(" ".join(FILLER) + f" Section {i} ends here." for i in range(6))
    return f"{body}\n\n{ANSWER}\n\n" + " ".join(FILLER)


@pytest.fixture
def bucket_with_a_long_memory(bucket):
    [long_id] = write(bucket, _long_memory(), sequence=False)
    write(
        bucket,
        "Tomas bakes white bread on Saturdays.",
        "The bakery on the corner sells rye loaves.",
        "Our team meets on Sunday evenings for dinner.",
        sequence=False,
    )
    assert memory_passages_build(bucket=bucket).built == 1
    bucket_stats.clear()
    return long_id


QUESTION = "What flour is Ingrid's sourdough starter fed with?"


def _ranked(bucket, **ranking) -> list:
    return [h.id for h in memories_search(bucket=bucket, query=QUESTION, mode="vector", ranking_overrides=ranking).hits]


def test_a_long_memory_is_found_by_the_passage_past_its_window(bucket, bucket_with_a_long_memory):
    long_id = bucket_with_a_long_memory
    assert _ranked(bucket, passages="max")[0] == long_id
    # Its own vector (the first ~1,000 characters, all migration plans) is far from the question.
    assert _ranked(bucket, passages="off")[0] != long_id


def test_a_hit_names_the_passage_that_matched(bucket, bucket_with_a_long_memory):
    long_id = bucket_with_a_long_memory
    result = memories_search(bucket=bucket, query=QUESTION, explain=True, ranking_overrides={"passages": "max"})
    [hit] = [h for h in result.hits if h.id == long_id]
    content = Memory.objects.get(pk=long_id).content
    assert ANSWER in content[hit.passage.start : hit.passage.end]
    assert hit.passage.ordinal > 0
    assert hit.explain["passage"]["ordinal"] == hit.passage.ordinal
    # Short memories have no passage.
    assert all(h.passage is None for h in result.hits if h.id != long_id)


def test_passages_second_best_blend_is_bounded_by_the_best(bucket, bucket_with_a_long_memory):
    long_id = bucket_with_a_long_memory
    scores = {}
    for second in (0.0, 0.5):
        result = memories_search(
            bucket=bucket, query=QUESTION, mode="vector", explain=True,
            ranking_overrides={"passages": "max", "passage_second": second},
        )  # fmt: skip
        [hit] = [h for h in result.hits if h.id == long_id]
        scores[second] = hit.explain["signals"]["vector"]["score"]
    assert scores[0.5] < scores[0.0]


def test_a_passage_discount_lowers_what_a_passage_adds(bucket, bucket_with_a_long_memory):
    long_id = bucket_with_a_long_memory

    def score(**ranking):
        result = memories_search(bucket=bucket, query=QUESTION, mode="vector", explain=True, ranking_overrides=ranking)
        return next(h.explain["signals"]["vector"]["score"] for h in result.hits if h.id == long_id)

    full = score(passages="max")
    assert score(passages="max", passage_discount=0.1) == pytest.approx(full - 0.1, abs=1e-5)


def test_a_filter_keeps_the_passages_of_the_memories_it_excludes_out(bucket, bucket_with_a_long_memory):
    from memories.filters import MemoryFilters

    long_id = bucket_with_a_long_memory
    result = memories_search(
        bucket=bucket, query=QUESTION, mode="vector", filters=MemoryFilters(agent_id="nobody"),
        ranking_overrides={"passages": "max"},
    )  # fmt: skip
    assert long_id not in [h.id for h in result.hits]


def test_an_edited_memory_is_not_found_by_its_old_passages(bucket, bucket_with_a_long_memory):
    from memories.services import memory_update

    long_id = bucket_with_a_long_memory
    Memory.objects.filter(pk=long_id).update(text_hash="0" * 32)  # as if edited, before the edit's delete
    bucket_stats.clear()
    assert _ranked(bucket, passages="max")[0] != long_id
    memory_update(memory=Memory.objects.get(pk=long_id), content="A short note now.")
    assert _ranked(bucket, passages="max")[0] != long_id


# --- the answer: the passage a hit names, and the budget's excerpt ----------------------------------


def test_the_api_names_the_passage_and_the_budget_returns_it_rather_than_the_whole(api, bucket):
    [long_id] = write(bucket, _long_memory(), sequence=False, api=api)
    write(bucket, "Tomas bakes white bread on Saturdays.", sequence=False, api=api)
    memory_passages_build(bucket=bucket)
    bucket_stats.clear()
    content = Memory.objects.get(pk=long_id).content
    ranking = {"passages": "max"}

    whole = search(api, bucket, QUESTION, ranking=ranking)
    [hit] = [r for r in whole["results"] if r["id"] == str(long_id)]
    assert ANSWER in content[hit["passage"]["start"] : hit["passage"]["end"]]
    assert hit["content"] == content and hit["excerpt"] is None  # no budget: the whole memory

    # A budget the whole memory does not fit: its passage with a little context.
    budgeted = search(api, bucket, QUESTION, ranking=ranking, token_budget=400)
    [cut] = [r for r in budgeted["results"] if r["id"] == str(long_id)]
    start, end = cut["excerpt"]["start"], cut["excerpt"]["end"]
    assert cut["content"] == content[start:end] and ANSWER in cut["content"]
    assert start <= hit["passage"]["start"] and end >= hit["passage"]["end"]
    assert cut["token_count"] <= 400 < Memory.objects.get(pk=long_id).token_count
    assert budgeted["total_tokens"] == sum(r["token_count"] for r in budgeted["results"]) <= 400

    # Passages off in the ranking (the default): the hit still names its passage, and the budget cuts it.
    [plain] = [r for r in search(api, bucket, QUESTION, token_budget=400)["results"] if r["id"] == str(long_id)]
    assert plain["passage"] == hit["passage"] and plain["excerpt"] is not None
    # "whole": the budget leaves the memory out rather than cut it.
    strict = search(api, bucket, QUESTION, ranking=ranking, token_budget=400, excerpt="whole")
    assert str(long_id) not in [r["id"] for r in strict["results"]]
    # "passage": the excerpt even without a budget.
    [always] = [r for r in search(api, bucket, QUESTION, ranking=ranking, excerpt="passage")["results"]
                if r["id"] == str(long_id)]  # fmt: skip
    assert always["excerpt"] is not None and ANSWER in always["content"]


def test_an_outsider_cannot_search_the_passages(outsider_api, bucket):
    write(bucket, _long_memory(), sequence=False)
    memory_passages_build(bucket=bucket)
    response = outsider_api.post(
        f"/api/v1/buckets/{bucket.pk}/search", {"query": QUESTION, "ranking": {"passages": "max"}}, format="json"
    )
    assert response.status_code == 404
