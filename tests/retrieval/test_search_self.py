"""Questions in the first person singular favour what the user said (``self_boost``). Real
PostgreSQL, real model."""

from __future__ import annotations

import pytest

from memories import ranking
from memories.retrieval.query import asks_about_self
from tests.factories import search, write

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("query", ["Can I mock the database?", "What's my salary?", "Tell me where we met."])
def test_first_person_questions_are_recognised(query):
    assert asks_about_self(query)


@pytest.mark.parametrize("query", ["Where does Maya live?", "Which API do we call?", "What is it called?"])
def test_other_questions_are_not(query):
    assert not asks_about_self(query)


# Scored last, so that min-max fusion does not send the second line to 0.
UNRELATED = "The team standup is at 9:30 every weekday."
RULES = [
    {"content": "You could move the query layer onto an ORM, SQLAlchemy's for example.", "attributed_to": "assistant"},
    {"content": "Rule for this service: the query layer stays hand-written SQL, no ORM.", "attributed_to": "user"},
]
TRANSCRIPT = [
    "Assistant: You could move the query layer onto an ORM, SQLAlchemy's for example.",
    "User: Rule for this service: the query layer stays hand-written SQL, no ORM.",
]


@pytest.mark.parametrize("lines", [RULES, TRANSCRIPT], ids=["attributed", "transcript"])
def test_a_question_about_the_asker_finds_what_the_user_said_first(api, bucket, lines):
    ids = write(bucket, *lines, UNRELATED, api=api, sequence=False)
    query = "Can I move the query layer onto an ORM?"
    plain = search(api, bucket, query, limit=3, ranking={"self_boost": 0})
    assert plain["results"][0]["id"] == ids[0], [r["content"] for r in plain["results"]]
    body = search(api, bucket, query, limit=3, explain=True, ranking={"self_boost": 1.0})
    assert body["results"][0]["id"] == ids[1], [r["content"] for r in body["results"]]
    assert body["results"][0]["explain"]["boosts"]["self"] == 2.0
    assert "self" not in body["results"][1]["explain"]["boosts"]
    # Asked about someone else: no boost.
    other = search(api, bucket, "Could the service move its query layer onto an ORM?", limit=3, explain=True,
                   ranking={"self_boost": 1.0})  # fmt: skip
    assert all("self" not in r["explain"]["boosts"] for r in other["results"])


def test_self_boost_is_validated():
    for bad in ({"self_boost": -0.1}, {"self_boost": 3}, {"self_boost": "yes"}):
        with pytest.raises(ranking.RankingConfigError):
            ranking.merge(ranking.DEFAULTS, bad)
