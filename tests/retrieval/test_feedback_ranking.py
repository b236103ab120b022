"""Feedback in the ranking (memories/retrieval/feedback.py): a memory rated useful rises for
paraphrases of the question it answered, one rated irrelevant stops winning it, other questions
are ranked as before; bounded, decaying, held to the token's agents, named by explain."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from memories import ranking
from memories.models import SearchFeedback
from memories.retrieval.feedback import rating_weight
from tests.factories import make_client, search, write

pytestmark = pytest.mark.django_db

FACTS = [
    "Maya is allergic to peanuts and carries an EpiPen.",
    "Maya's favourite dish is pad thai with extra peanuts on top.",
    "Tom works at the harbour office on Quay Street.",
    "The vault password is written on the blue card in the drawer.",
    "Grandma's birthday is on the third of May.",
    "The car needs new tyres before winter.",
    "Leo plays the cello in the city orchestra.",
    "The wifi at the cabin is called LakeHouse5G.",
    "Priya moved to Lisbon last spring.",
    "The dentist appointment is on Tuesday at 4pm.",
    "Sam prefers green tea to coffee.",
    "The garden shed key hangs behind the kitchen door.",
]
ASKED = "What food is Maya allergic to?"
PARAPHRASE = "Maya is allergic to which food?"
UNRELATED = "Where does Tom work?"


def rate(api, memory_id, signal, query, **body):
    response = api.post(
        f"/api/v1/memories/{memory_id}/feedback", {"signal": signal, "query": query, **body}, format="json"
    )
    assert response.status_code == 201, response.content


def hits(api, bucket, query, **params):
    return {h["id"]: h for h in search(api, bucket, query, explain=True, **params)["results"]}


@pytest.fixture
def facts(api, bucket):
    return write(bucket, *FACTS, api=api, sequence=False)


def test_useful_lifts_and_irrelevant_demotes_for_a_paraphrase(api, bucket, facts):
    allergy, pad_thai = facts[0], facts[1]
    before = hits(api, bucket, PARAPHRASE)
    rate(api, allergy, "useful", ASKED)
    rate(api, pad_thai, "irrelevant", ASKED)
    after = hits(api, bucket, PARAPHRASE)
    assert after[allergy]["score"] > before[allergy]["score"]
    assert after[allergy]["explain"]["feedback"]["lift"] > 0 and after[allergy]["explain"]["feedback"]["useful"] > 0
    assert after[pad_thai]["score"] < before[pad_thai]["score"]
    assert 0 < after[pad_thai]["explain"]["boosts"]["feedback"] < 1
    assert next(iter(after)) == allergy


def test_an_unrelated_question_is_ranked_exactly_as_before(api, bucket, facts):
    before = hits(api, bucket, UNRELATED)
    rate(api, facts[0], "useful", ASKED)
    rate(api, facts[2], "irrelevant", ASKED)
    after = hits(api, bucket, UNRELATED)
    assert [(i, h["score"]) for i, h in after.items()] == [(i, h["score"]) for i, h in before.items()]
    assert not any("feedback" in h["explain"] for h in after.values())


def test_a_memory_rated_useful_joins_the_candidates_when_no_signal_finds_it(api, bucket, facts):
    write(bucket, *[f"Reminder {n}: water the plants on the balcony and check the alarm." for n in range(12)],
          api=api, sequence=False)  # fmt: skip
    [digits] = write(bucket, "4471 then 2290.", api=api, sequence=False)
    question, asked = "what is the code for the alarm?", "What's the alarm code?"
    narrow = {"ranking": {"candidates": 10}, "limit": 100}
    assert digits not in hits(api, bucket, question, **narrow)  # no signal's 10 candidates hold it
    rate(api, digits, "useful", asked)
    found = hits(api, bucket, question, **narrow)
    assert found[digits]["explain"]["signals"] == {} and found[digits]["explain"]["feedback"]["lift"] > 0


def test_the_lift_is_bounded_by_the_weight_and_the_best_fused_score(api, bucket, facts):
    rate(api, facts[0], "useful", ASKED)
    found = hits(api, bucket, ASKED)  # the same question: similarity 1, full weight
    lift = found[facts[0]]["explain"]["feedback"]["lift"]
    best_fused = max(h["explain"]["fused"] for h in found.values())
    assert 0 < lift <= ranking.DEFAULTS.feedback_weight * best_fused + 1e-6
    # Turned off per request: no lift, and nothing read.
    off = hits(api, bucket, ASKED, ranking={"feedback_weight": 0, "feedback_demotion": 0})
    assert "feedback" not in off[facts[0]]["explain"]


def test_a_rating_decays_with_its_age(api, bucket, facts):
    rate(api, facts[0], "useful", ASKED)
    fresh = hits(api, bucket, ASKED)[facts[0]]["explain"]["feedback"]["useful"]
    half_life = ranking.DEFAULTS.feedback_half_life_days
    SearchFeedback.objects.for_bucket(bucket).update(created_at=timezone.now() - timedelta(days=2 * half_life))
    aged = hits(api, bucket, ASKED)[facts[0]]["explain"]["feedback"]["useful"]
    assert aged == pytest.approx(fresh / 4, rel=0.01)


def test_rating_weight_is_zero_at_the_similarity_floor_and_halves_per_half_life():
    config = ranking.DEFAULTS
    floor, half = config.feedback_similarity, config.feedback_half_life_days
    assert rating_weight(floor, 0, config) == 0 and rating_weight(floor - 0.1, 0, config) == 0
    assert rating_weight(1.0, 0, config) == 1.0
    assert rating_weight(1.0, half, config) == pytest.approx(0.5)
    assert rating_weight((1 + floor) / 2, 0, config) == pytest.approx(0.5)


def test_another_agents_rating_does_not_move_a_token_held_to_its_agent(tenant, api, bucket):
    [allergy] = write(bucket, {"content": FACTS[0]}, api=api, sequence=False)
    write(bucket, *FACTS[1:], api=api, sequence=False)
    alfa = make_client(tenant, agent_ids=["alfa"], include_shared=True)
    rate(api, allergy, "useful", ASKED, agent_id="beta")
    assert "feedback" not in hits(alfa, bucket, ASKED)[allergy]["explain"]
    assert "feedback" in hits(api, bucket, ASKED)[allergy]["explain"]
    rate(alfa, allergy, "useful", ASKED)
    assert hits(alfa, bucket, ASKED)[allergy]["explain"]["feedback"]["ratings"] == 1


def test_keyword_mode_reads_no_feedback(api, bucket, facts):
    rate(api, facts[1], "irrelevant", ASKED)
    found = hits(api, bucket, ASKED, mode="keyword")
    assert all("feedback" not in h["explain"] and "feedback" not in h["explain"]["boosts"] for h in found.values())
