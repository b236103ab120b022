"""Questions that need several memories: the diversity step (coverage over redundancy).
Real PostgreSQL, real model."""

from __future__ import annotations

import dataclasses
import uuid

import numpy as np
import pytest

from memories import ranking
from memories.retrieval import diversity
from memories.retrieval.hits import Hit
from tests.factories import search, write

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "query",
    [
        "Which books has Melanie read?",
        "What activities does Melanie partake in?",
        "How many production rollbacks did we have?",
        "Compare the three builder quotes.",
        "List the constructs we had to rewrite.",
        "How did the budget evolve from the first estimate to the final tally?",
        "What are the places we stayed at?",
    ],
)
def test_questions_that_ask_for_several_things_are_recognised(query):
    assert diversity.asks_for_several(query)


@pytest.mark.parametrize(
    "query",
    ["Where does Maya live now?", "What did Caroline research?", "Who hired Priya?", "What is my dog's name?"],
)
def test_questions_about_one_thing_are_not(query):
    assert not diversity.asks_for_several(query)


def _hit(score: float) -> Hit:
    return Hit(id=uuid.uuid4(), row={}, score=score, explain={"boosts": {}})


def _unit(*values: float) -> np.ndarray:
    vector = np.array(values, dtype=np.float32)
    return vector / np.linalg.norm(vector)


def test_a_near_copy_of_a_better_hit_gives_way_to_distinct_evidence():
    best, copy, other, last = _hit(1.0), _hit(0.95), _hit(0.8), _hit(0.7)
    vectors = {best.id: _unit(1, 0, 0), copy.id: _unit(1, 0.05, 0), other.id: _unit(0, 1, 0)}
    config = ranking.merge(ranking.DEFAULTS, {"diversity": 0.5, "diversity_pool": 10})
    ranked = diversity.diversify([best, copy, other, last], vectors, config)
    # ``last`` has no vector: it is never discounted, and it passes the discounted copy.
    assert [h.id for h in ranked] == [best.id, other.id, last.id, copy.id]
    assert [h.score for h in ranked] == sorted((h.score for h in ranked), reverse=True)
    assert copy.score == pytest.approx(0.95 * (1 - 0.5 * 1.0), abs=0.01)
    assert copy.explain["boosts"]["diversity"] < 1 and "diversity" not in best.explain["boosts"]
    assert other.score == 0.8  # unrelated to the best: no discount


def test_hits_below_the_pool_follow_it_and_score_at_most_its_last():
    hits = [_hit(1.0), _hit(0.99), _hit(0.5)]
    same = _unit(1, 0)
    config = ranking.merge(ranking.DEFAULTS, {"diversity": 1.0, "diversity_pool": 10})
    ranked = diversity.diversify(
        hits, {hits[0].id: same, hits[1].id: same}, dataclasses.replace(config, diversity_pool=2)
    )
    # The copy is discounted to 0 but stays in the pool; the hit below the pool follows it.
    assert [h.id for h in ranked] == [hits[0].id, hits[1].id, hits[2].id]
    assert [h.score for h in ranked] == [1.0, 0.0, 0.0]


BOOKS = [
    "I finished reading Dune by Frank Herbert last week.",
    "Last week I finished reading Frank Herbert's Dune.",
    "I finished Dune by Frank Herbert, last week.",
    "My book club is reading Middlemarch by George Eliot this month.",
    # Scored last, so that min-max fusion does not send the book club to 0.
    "The team standup is at 9:30 every weekday.",
]


def test_a_question_for_several_things_sees_distinct_memories_first(api, bucket):
    ids = write(bucket, *BOOKS, api=api, sequence=False)
    query = "Which books did I finish reading?"
    plain = [r["id"] for r in search(api, bucket, query, mode="vector", limit=4)["results"]]
    assert plain.index(ids[3]) == 3, plain  # the three copies of one fact first
    body = search(api, bucket, query, mode="vector", limit=4, explain=True, ranking={"diversity": 0.6})
    found = [r["id"] for r in body["results"]]
    assert found.index(ids[3]) == 1, found
    assert any("diversity" in r["explain"]["boosts"] for r in body["results"])
    scores = [r["score"] for r in body["results"]]
    assert scores == sorted(scores, reverse=True)


def test_diversity_leaves_questions_about_one_thing_alone_unless_asked_for_all(api, bucket):
    ids = write(bucket, *BOOKS, api=api, sequence=False)
    query = "What did I finish reading last week?"
    plain = [r["id"] for r in search(api, bucket, query, mode="vector", limit=4)["results"]]
    several = search(api, bucket, query, mode="vector", limit=4, ranking={"diversity": 0.6})
    assert [r["id"] for r in several["results"]] == plain
    every = search(api, bucket, query, mode="vector", limit=4, ranking={"diversity": 0.6, "diversity_questions": "all"})
    assert [r["id"] for r in every["results"]].index(ids[3]) < plain.index(ids[3])


def test_diversity_options_are_validated():
    for bad in ({"diversity": 1.5}, {"diversity_pool": 5}, {"diversity_questions": "some"}, {"diversity": True}):
        with pytest.raises(ranking.RankingConfigError):
            ranking.merge(ranking.DEFAULTS, bad)


# --- session context ---------------------------------------------------------------------------

SESSION = [
    "User: The first pgloader trial failed on zero dates in the orders table.",
    "Assistant: Dinner plans for Friday are still open.",
    "Assistant: Convert the zero dates to NULL in a view, then load that instead.",
]
# More like the question than the fix, in another write batch: the fix is outside the vector
# list (10 candidates) and shares no word with the question.
OTHERS = [f"User: Trial number {n} of the pgloader import went fine on the {n}th." for n in range(2, 14)]


def test_memories_of_a_strongly_found_session_join_the_candidates(api, bucket):
    session = write(bucket, *SESSION, api=api)
    write(bucket, *OTHERS, api=api, sequence=False)
    query = "What did the first pgloader trial fail on?"
    base = {"candidates": 10, "neighbour_weight": 0, "session_context": 0,
            "weights": {"vector_context": 0, "keyword_context": 0}}  # fmt: skip
    plain = search(api, bucket, query, limit=20, ranking=base)
    assert session[2] not in [r["id"] for r in plain["results"]]
    body = search(api, bucket, query, limit=20, explain=True, ranking={**base, "session_context": 0.5})
    found = {r["id"]: r for r in body["results"]}
    assert [r["id"] for r in body["results"]][0] == session[0]
    assert found[session[2]]["explain"]["session_lift"] > 0
    assert "signals" in found[session[2]]["explain"] and not found[session[2]]["explain"]["signals"]
    # Ranked inside the session by their similarity to the question: the fix above the dinner.
    assert found[session[2]]["explain"]["session_lift"] > found.get(session[1], {"explain": {}})["explain"].get(
        "session_lift", 0
    )
    assert all("session_lift" not in r["explain"] for r in body["results"][1:] if r["id"] not in session)


def test_session_options_are_validated():
    for bad in ({"session_context": 2}, {"session_sources": 0}, {"session_sources": 50}):
        with pytest.raises(ranking.RankingConfigError):
            ranking.merge(ranking.DEFAULTS, bad)


def _in(sequence, score: float) -> Hit:
    return Hit(id=uuid.uuid4(), row={"sequence_id": sequence}, score=score, explain={"boosts": {}})


def test_a_third_hit_of_one_session_gives_way_to_another_session():
    one, two = uuid.uuid4(), uuid.uuid4()
    first, second, third, other, loose = _in(one, 1.0), _in(one, 0.9), _in(one, 0.8), _in(two, 0.6), _in(None, 0.3)
    config = ranking.merge(ranking.DEFAULTS, {"session_spread": 0.5, "diversity_pool": 10})
    ranked = diversity.spread_sessions([first, second, third, other, loose], config)
    # The second of a session keeps 1 - 0.5 x 1/2, the third 1 - 0.5: 0.675 and 0.4, below the
    # other session's best; a hit without a sequence is never discounted.
    assert [h.id for h in ranked] == [first.id, second.id, other.id, third.id, loose.id]
    assert second.score == pytest.approx(0.675) and third.score == pytest.approx(0.4)
    assert other.score == 0.6 and loose.score == 0.3
    assert third.explain["boosts"]["session_spread"] == pytest.approx(0.5)
    assert "session_spread" not in first.explain["boosts"]


def test_the_rest_after_a_spread_pool_is_clamped_under_the_session_spread_label():
    one = uuid.uuid4()
    a, b, c = _in(one, 1.0), _in(one, 0.99), _in(one, 0.98)
    loose = [_in(None, 0.97 - n / 100) for n in range(7)]
    beyond = _in(None, 0.90)  # the first hit after the pool of ten
    config = ranking.merge(ranking.DEFAULTS, {"session_spread": 0.5, "diversity_pool": 10})
    ranked = diversity.spread_sessions([a, b, c, *loose, beyond], config)
    # b keeps 0.75 of its score, c 0.5 (0.49): the last of the pool; the hit after it, 0.90, is
    # held to 0.49, and explain names the step that did so.
    assert ranked[-3:] == [b, c, beyond]
    assert beyond.score == pytest.approx(0.49)
    assert beyond.explain["boosts"] == {"session_spread": pytest.approx(round(0.49 / 0.90, 4))}


def test_session_spread_runs_only_for_questions_that_ask_for_several_things():
    config = ranking.merge(ranking.DEFAULTS, {"session_spread": 0.3})
    assert diversity.spreads("Which books has Melanie read?", config)
    assert not diversity.spreads("What did Caroline research?", config)
    assert diversity.spreads("What did Caroline research?", dataclasses.replace(config, diversity_questions="all"))
    assert not diversity.spreads("Which books has Melanie read?", ranking.DEFAULTS)
    with pytest.raises(ranking.RankingConfigError):
        ranking.merge(ranking.DEFAULTS, {"session_spread": 1.5})
