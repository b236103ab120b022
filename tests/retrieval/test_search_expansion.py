"""Pseudo-relevance feedback (a second vector query towards the best hits) and the preference for
the newest statement in questions about what holds now. Real PostgreSQL, real model."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import numpy as np
import pytest

from memories import ranking
from memories.retrieval import current, expansion
from memories.retrieval.hits import Hit
from tests.factories import search, write

pytestmark = pytest.mark.django_db


# --- pseudo-relevance feedback -------------------------------------------------------------------


def test_the_feedback_query_moves_from_the_question_towards_its_sources():
    question = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    sources = [np.array([0.0, 1.0, 0.0], dtype=np.float32), np.array([0.0, 0.6, 0.8], dtype=np.float32)]
    moved = expansion.feedback_query(question * 3, sources, beta=0.5)
    assert float(np.linalg.norm(moved)) == pytest.approx(1.0, abs=1e-6)
    centroid = np.mean(sources, axis=0) / np.linalg.norm(np.mean(sources, axis=0))
    # Closer to the sources' mean than the question is, still mostly the question.
    assert float(moved @ centroid) > float(question @ centroid)
    assert float(moved @ question) > float(moved @ centroid)
    expected = question + 0.5 * centroid
    assert moved == pytest.approx(expected / np.linalg.norm(expected), abs=1e-6)
    assert expansion.feedback_query(question, [], beta=0.5) is None


INSTRUMENTS = [
    "Priya plays the sitar every evening after dinner.",
    # Like the sitar line, unlike the question (no word of it): outside both candidate lists.
    "She has been practising the tabla drums with her uncle on Sundays.",
    "Which instruments are easiest to learn as an adult?",
    "Which instruments does a string quartet use?",
    "What instruments do folk bands play?",
    "Which instrument should a beginner choose?",
    "Instruments should be tuned before every rehearsal.",
    "Which instruments are in a brass band?",
    "The kids asked which instruments the orchestra plays.",
    "What instruments do jazz musicians play most?",
    "Instruments played in a symphony orchestra, a list.",
    "Which instruments were popular in the 1980s?",
    "How many instruments can one person learn?",
]
NARROW = {"candidates": 10, "session_context": 0, "weights": {"vector_key": 0, "keyword_key": 0}}
FEEDBACK = {**NARROW, "prf": 1.0, "prf_sources": 1, "prf_beta": 1.5}


def test_feedback_finds_a_memory_like_the_best_hit_that_the_question_alone_misses(api, bucket):
    ids = write(bucket, *INSTRUMENTS, api=api, sequence=False)
    query = "Which instruments does Priya play?"
    plain = search(api, bucket, query, limit=20, ranking=NARROW)
    assert plain["results"][0]["id"] == ids[0]
    assert ids[1] not in [r["id"] for r in plain["results"]]
    body = search(api, bucket, query, limit=20, explain=True, ranking=FEEDBACK)
    found = {r["id"]: r for r in body["results"]}
    assert body["results"][0]["id"] == ids[0]
    assert ids[1] in found
    assert set(found[ids[1]]["explain"]["signals"]) == {expansion.SIGNAL}
    assert found[ids[1]]["explain"]["signals"][expansion.SIGNAL]["rank"] <= 3


def test_feedback_runs_only_for_questions_that_ask_for_several_things_unless_asked_for_all(api, bucket):
    write(bucket, *INSTRUMENTS, api=api, sequence=False)
    query = "Does Priya play the sitar in the evening?"
    assert not expansion.applies(query, ranking.merge(ranking.DEFAULTS, FEEDBACK))
    one = search(api, bucket, query, limit=20, explain=True, ranking=FEEDBACK)
    assert all(expansion.SIGNAL not in r["explain"]["signals"] for r in one["results"])
    every = search(api, bucket, query, limit=20, explain=True, ranking={**FEEDBACK, "prf_questions": "all"})
    assert any(expansion.SIGNAL in r["explain"]["signals"] for r in every["results"])


DISHES = [
    "Omar cooked a lamb tagine with apricots for the neighbours.",
    "Omar cooks a chicken tagine with preserved lemons most Fridays.",
    # Says nothing the question says: only the word the two above share finds it.
    "For Eid he served a vegetable tagine with couscous.",
    *(f"Reminder {n}: the recycling bins go out on day {n} of the month." for n in range(1, 60)),
]


def test_keyword_feedback_finds_a_memory_by_a_word_the_best_hits_share(api, bucket):
    ids = write(bucket, *DISHES, api=api, sequence=False)
    query = "Which dishes did Omar cook?"
    plain = search(api, bucket, query, mode="keyword", limit=20)
    assert ids[2] not in [r["id"] for r in plain["results"]]
    body = search(api, bucket, query, mode="keyword", limit=20, explain=True,
                  ranking={"prf_keyword": 1.0, "prf_sources": 2})  # fmt: skip
    found = {r["id"]: r for r in body["results"]}
    assert ids[2] in found
    assert set(found[ids[2]]["explain"]["signals"]) == {expansion.KEYWORD_SIGNAL}
    assert {r["id"] for r in body["results"][:2]} == {ids[0], ids[1]}


def test_expansion_terms_are_shared_by_two_sources_and_rare_in_the_bucket(bucket):
    ids = write(bucket, *DISHES, sequence=False)
    config = ranking.merge(ranking.DEFAULTS, {"prf_sources": 3, "prf_terms": 5})
    # "tagine" is in all three, "lamb" in one, "omar" and "cook" are the question's.
    assert expansion.expansion_terms(bucket, {ids[0]: 1.0, ids[1]: 0.9, ids[2]: 0.8}, ["cook", "omar"], config) == [
        "tagine"
    ]
    # "reminder", "bin", "recycling" are in every reminder: too common in the bucket to say anything.
    reminders = {memory_id: 1.0 for memory_id in ids[3:6]}
    assert expansion.expansion_terms(bucket, reminders, ["bin"], config) == []


def test_feedback_options_are_validated():
    for bad in ({"prf": 3}, {"prf_keyword": -1}, {"prf_terms": 0}, {"prf_sources": 0}, {"prf_sources": 11},
                {"prf_beta": -1}, {"prf_questions": "some"}):  # fmt: skip
        with pytest.raises(ranking.RankingConfigError):
            ranking.merge(ranking.DEFAULTS, bad)


# --- what holds now ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    ["Where do I live now?", "Who is on call these days?", "Do I still smoke?", "What's my current employer?",
     "What is my diet at the moment?"],
)  # fmt: skip
def test_questions_about_what_holds_now_are_recognised(query):
    assert current.asks_for_current(query)


@pytest.mark.parametrize("query", ["Where did I live in 2019?", "When did we move to Denver?", "Who is Zuri?"])
def test_other_questions_are_not(query):
    assert not current.asks_for_current(query)


def _hit(score: float, day: int) -> Hit:
    return Hit(id=uuid.uuid4(), row={"created_at": datetime(2025, 1, day, tzinfo=UTC)}, score=score,
               explain={"boosts": {}})  # fmt: skip


def test_the_newest_of_the_pool_gains_the_whole_boost_the_oldest_none():
    old, middle, new, below = _hit(1.0, 1), _hit(0.9, 11), _hit(0.8, 21), _hit(0.5, 30)
    config = ranking.merge(ranking.DEFAULTS, {"current_boost": 0.5, "current_pool": 3})
    ranked = current.favour_newest([old, middle, new, below], config)
    assert [h.id for h in ranked] == [new.id, middle.id, old.id, below.id]
    assert new.score == pytest.approx(0.8 * 1.5)
    assert middle.score == pytest.approx(0.9 * 1.25)
    assert old.score == 1.0 and "current" not in old.explain["boosts"]
    assert below.score == 0.5  # below the pool: untouched
    assert new.explain["boosts"]["current"] == 1.5


def test_a_pool_written_at_one_moment_is_left_as_it_was():
    hits = [_hit(1.0, 5), _hit(0.8, 5)]
    config = ranking.merge(ranking.DEFAULTS, {"current_boost": 1.0})
    assert [h.score for h in current.favour_newest(list(hits), config)] == [1.0, 0.8]


HOMES = [
    {"content": "I live in Boston, in a small flat near the harbour.", "created_at": "2024-01-10T10:00:00Z"},
    {"content": "In March we moved to Denver, to a house with a garden.", "created_at": "2025-04-02T10:00:00Z"},
    {"content": "Moving house is the most stressful thing we have done.", "created_at": "2025-03-01T10:00:00Z"},
    {"content": "The dentist appointment is on Friday.", "created_at": "2024-09-01T10:00:00Z"},
]
# Years later, so that recency hardly tells the two homes apart.
LATER = "2030-01-01T00:00:00Z"


def test_the_newer_statement_answers_a_question_about_now(api, bucket):
    ids = write(bucket, *HOMES, api=api, sequence=False)
    query = "Where do I live these days?"
    plain = search(api, bucket, query, limit=4, now=LATER, ranking={"current_boost": 0})
    assert plain["results"][0]["id"] == ids[0], [r["content"] for r in plain["results"]]
    body = search(api, bucket, query, limit=4, explain=True, now=LATER, ranking={"current_boost": 1.5})
    assert body["results"][0]["id"] == ids[1], [r["content"] for r in body["results"]]
    assert body["results"][0]["explain"]["boosts"]["current"] == 2.5
    scores = [r["score"] for r in body["results"]]
    assert scores == sorted(scores, reverse=True)
    # A question about the past is ranked as before.
    past = search(api, bucket, "Where did I live in Boston?", limit=4, now=LATER, ranking={"current_boost": 1.5})
    assert past["results"][0]["id"] == ids[0]


def test_current_options_are_validated():
    for bad in ({"current_boost": 3}, {"current_pool": 1}, {"current_boost": True}):
        with pytest.raises(ranking.RankingConfigError):
            ranking.merge(ranking.DEFAULTS, bad)
