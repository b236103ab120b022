"""Questions in the first person singular favour what the user said (``self_boost``). Real
PostgreSQL, real model."""

from __future__ import annotations

import pytest

from memories import ranking
from memories.retrieval.query import asks_about_self, asks_for_action
from tests.factories import search, write

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("query", ["Can I mock the database?", "What's my salary?", "Tell me where we met."])
def test_first_person_questions_are_recognised(query):
    assert asks_about_self(query)


@pytest.mark.parametrize("query", ["Where does Maya live?", "Which API do we call?", "What is it called?"])
def test_other_questions_are_not(query):
    assert not asks_about_self(query)


# The three boosts for the user's lines off; each test turns on the one it checks.
OFF = {"self_boost": 0, "user_boost": 0, "rule_boost": 0}
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
    plain = search(api, bucket, query, limit=3, ranking=OFF)
    assert plain["results"][0]["id"] == ids[0], [r["content"] for r in plain["results"]]
    body = search(api, bucket, query, limit=3, explain=True, ranking={**OFF, "self_boost": 1.0})
    assert body["results"][0]["id"] == ids[1], [r["content"] for r in body["results"]]
    assert body["results"][0]["explain"]["boosts"]["self"] == 2.0
    assert "self" not in body["results"][1]["explain"]["boosts"]
    # Asked about someone else: no boost.
    other = search(api, bucket, "Could the service move its query layer onto an ORM?", limit=3, explain=True,
                   ranking={**OFF, "self_boost": 1.0})  # fmt: skip
    assert all("self" not in r["explain"]["boosts"] for r in other["results"])


def test_self_boost_is_validated():
    for bad in ({"self_boost": -0.1}, {"self_boost": 3}, {"self_boost": "yes"}):
        with pytest.raises(ranking.RankingConfigError):
            ranking.merge(ranking.DEFAULTS, bad)


@pytest.mark.parametrize("lines", [RULES, TRANSCRIPT], ids=["attributed", "transcript"])
def test_user_boost_favours_what_the_user_said_for_other_questions(api, bucket, lines):
    ids = write(bucket, *lines, UNRELATED, api=api, sequence=False)
    query = "Could the query layer move onto an ORM such as SQLAlchemy?"
    plain = search(api, bucket, query, limit=3, ranking=OFF)
    assert plain["results"][0]["id"] == ids[0], [r["content"] for r in plain["results"]]
    body = search(api, bucket, query, limit=3, explain=True, ranking={**OFF, "user_boost": 1.0})
    assert body["results"][0]["id"] == ids[1], [r["content"] for r in body["results"]]
    assert body["results"][0]["explain"]["boosts"]["self"] == 2.0
    # Asked what the assistant said: no boost.
    asked = search(api, bucket, "Which ORM did you suggest for the query layer?", limit=3, explain=True,
                   ranking={**OFF, "user_boost": 1.0})  # fmt: skip
    assert all("self" not in r["explain"]["boosts"] for r in asked["results"])
    # A first-person question keeps self_boost.
    mine = search(api, bucket, "Can I move the query layer onto an ORM?", limit=3, explain=True,
                  ranking={**OFF, "user_boost": 1.0, "self_boost": 0.25})  # fmt: skip
    user_line = next(r for r in mine["results"] if r["id"] == ids[1])
    assert user_line["explain"]["boosts"]["self"] == 1.25


def test_user_boost_is_validated():
    for bad in ({"user_boost": -0.1}, {"user_boost": 3}, {"user_boost": "yes"}):
        with pytest.raises(ranking.RankingConfigError):
            ranking.merge(ranking.DEFAULTS, bad)


@pytest.mark.parametrize(
    "query", ["Can we take the bus up to the temple?", "Write a reminder SMS for patients.", "Should I apply?"]
)
def test_requests_are_recognised(query):
    assert asks_for_action(query)


@pytest.mark.parametrize("query", ["Where does Maya live?", "What did we decide about the index?"])
def test_other_questions_are_no_requests(query):
    assert not asks_for_action(query)


def test_rule_boost_favours_a_rule_the_user_laid_down_for_a_request(api, bucket):
    ids = write(
        bucket,
        {"content": "Docker is a good way to run a throwaway Postgres for tests.", "attributed_to": "assistant"},
        {"content": "Our servers run natively under systemd; please never suggest Docker.", "attributed_to": "user"},
        {"content": "The staging Postgres is at 10.0.0.20.", "attributed_to": "user"},
        UNRELATED,
        api=api,
        sequence=False,
    )
    query = "Can I use Docker for a throwaway test database?"
    # The asker's own lines count a little (self_boost 0.5): not enough to pass the assistant's.
    plain = search(api, bucket, query, limit=4, ranking={**OFF, "self_boost": 0.5})
    assert plain["results"][0]["id"] == ids[0], [r["content"] for r in plain["results"]]
    body = search(api, bucket, query, limit=4, explain=True, ranking={**OFF, "self_boost": 0.5, "rule_boost": 1.0})
    rule = next(r for r in body["results"] if r["id"] == ids[1])
    assert rule["explain"]["boosts"]["rule"] == 2.0
    assert all("rule" not in r["explain"]["boosts"] for r in body["results"] if r["id"] != ids[1])
    assert body["results"][0]["id"] == ids[1], [r["content"] for r in body["results"]]
    # Not a request: no boost.
    other = search(
        api, bucket, "Where is the staging Postgres?", limit=4, explain=True, ranking={**OFF, "rule_boost": 1.0}
    )
    assert all("rule" not in r["explain"]["boosts"] for r in other["results"])
    with pytest.raises(ranking.RankingConfigError):
        ranking.merge(ranking.DEFAULTS, {"rule_boost": 2.5})
