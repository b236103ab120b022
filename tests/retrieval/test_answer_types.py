"""The answer-type prior (memories/retrieval/answers.py): a question asking for a kind of value
favours, among the best hits, those that hold one."""

from __future__ import annotations

import uuid

import pytest

from memories import ranking
from memories.retrieval import answers
from memories.retrieval.hits import Hit
from tests.factories import search, write


@pytest.mark.parametrize(
    ("query", "kind"),
    [
        ("how old is Tom", "count"),
        ("How many guests are coming?", "count"),
        ("At what age did Nate start climbing?", "count"),
        ("So how much is the rent?", "amount"),
        ("How long is my commute?", "duration"),
        ("How often do I water the cactus?", "frequency"),
        ("What time is standup?", "clock"),
        ("At what time does the band rehearse?", "clock"),
        ("Roughly how many rows were in the table?", "count"),
        ("For how long has Nate had his turtles?", "duration"),
        # A value asked in a later clause: the opening's answer comes first.
        ("Which café buys my mugs, and how many did they order?", None),
        # The time cue's questions, and others, ask for no value here.
        ("How long ago did we move?", None),
        ("When is swimming?", None),
        ("What time zone is Hiro in?", None),
        ("What does my partner do?", None),
        ("Where does Maya live now?", None),
    ],
)
def test_the_kind_of_value_a_question_asks_for(query, kind):
    assert answers.kind_of_answer(query) == kind


@pytest.mark.parametrize(
    ("content", "kind", "expected"),
    [
        ("Our son Tom is 7 and loves dinosaurs.", "count", True),
        ("We have 120 guests confirmed.", "count", True),
        ("Carla has two kids.", "count", True),
        ("I'm thirty-four years old.", "count", True),
        ("Tom is allergic to cats.", "count", False),
        # A year, a day of a date and a time of day count nothing.
        ("We moved to Porto in 2019.", "count", False),
        ("Laura's birthday is on June 14.", "count", False),
        ("Dinner is on the 3rd of May.", "count", False),
        ("The standup is at 9:30.", "count", False),
        ("Pickup is at 5pm.", "count", False),
        ("Rent is 1,450 euros, due on the 1st.", "amount", True),
        ("The jacket was $80.", "amount", True),
        ("The rent is too high.", "amount", False),
        ("My commute is 40 minutes by train.", "duration", True),
        ("I've lived here for a year.", "duration", True),
        ("The kitchen island is 2.4 m long.", "duration", True),
        ("The manuscript is at 95,000 words.", "duration", True),
        ("I take the train to work.", "duration", False),
        ("The cactus needs water once a month.", "frequency", True),
        ("I run three times a week.", "frequency", True),
        ("Piano lessons are on Tuesdays.", "frequency", True),
        ("I water the cactus.", "frequency", False),
        ("My flight lands at 18:40 on Sunday.", "clock", True),
        ("Dentist appointment at 10am.", "clock", True),
        ("Lunch at noon.", "clock", True),
        ("My flight lands on Sunday.", "clock", False),
        ("I ran 5 km in 2024.", "clock", False),
    ],
)
def test_a_memory_holds_a_value_of_the_kind(content, kind, expected):
    assert answers.carries(content, kind) is expected


def _hit(score: float, content: str) -> Hit:
    return Hit(id=uuid.uuid4(), row={"content": content}, score=score, explain={"boosts": {}})


def test_the_pool_hits_holding_a_value_are_raised_and_reordered():
    allergy, age, birthday, below = (
        _hit(1.0, "Tom is allergic to cats."),
        _hit(0.9, "Our son Tom is 7."),
        _hit(0.5, "Laura's birthday is on June 14."),
        _hit(0.4, "Emma is 5."),
    )
    config = ranking.merge(ranking.DEFAULTS, {"answer_type_boost": 0.5, "answer_type_pool": 3})
    ranked = answers.favour_values([allergy, age, birthday, below], "count", config)
    assert [h.id for h in ranked] == [age.id, allergy.id, birthday.id, below.id]
    assert age.score == pytest.approx(0.9 * 1.5)
    assert age.explain["boosts"]["answer_type"] == 1.5 and age.explain["answer_type"] == "count"
    assert allergy.score == 1.0 and "answer_type" not in allergy.explain["boosts"]
    assert birthday.score == 0.5  # a day of a date is no count
    assert below.score == 0.4  # below the pool: untouched, however it reads


def test_a_pool_without_such_a_value_is_left_as_it_was():
    hits = [_hit(1.0, "Tom is allergic to cats."), _hit(0.8, "Tom loves dinosaurs.")]
    config = ranking.merge(ranking.DEFAULTS, {"answer_type_boost": 1.0})
    assert [h.score for h in answers.favour_values(list(hits), "count", config)] == [1.0, 0.8]


def test_the_prior_is_off_at_0_and_the_options_are_validated():
    assert answers.wanted("how old is Tom", ranking.DEFAULTS) == "count"
    assert answers.wanted("how old is Tom", ranking.merge(ranking.DEFAULTS, {"answer_type_boost": 0})) is None
    for bad in ({"answer_type_boost": 3}, {"answer_type_pool": 1}, {"answer_type_boost": True}):
        with pytest.raises(ranking.RankingConfigError):
            ranking.merge(ranking.DEFAULTS, bad)


FAMILY = [
    "My wife Laura is a pediatric nurse.",
    "Our son Tom is 7 and loves dinosaurs.",
    "Our daughter Emma started kindergarten this year.",
    "Laura's birthday is on June 14.",
    "We have a golden retriever named Biscuit.",
    "Tom is allergic to cats.",
]
ASKED_AT = "2026-11-24T15:00:00Z"


@pytest.mark.django_db
def test_how_old_finds_the_memory_that_states_an_age(api, bucket):
    ids = write(bucket, *({"content": c, "created_at": "2026-11-24T14:00:00Z"} for c in FAMILY), api=api,
                sequence=False)  # fmt: skip
    query = "how old is Tom"
    plain = search(api, bucket, query, explain=True, now=ASKED_AT, ranking={"answer_type_boost": 0})
    # Both notes are about Tom; the model leans to the allergy, and BM25 sees only the name.
    assert plain["results"][0]["id"] == ids[5], [r["content"] for r in plain["results"]]
    assert all("answer_type" not in r["explain"]["boosts"] for r in plain["results"])
    body = search(api, bucket, query, explain=True, now=ASKED_AT, ranking={"answer_type_boost": 0.3})
    assert body["results"][0]["id"] == ids[1], [r["content"] for r in body["results"]]
    assert body["results"][0]["explain"]["boosts"]["answer_type"] == 1.3
    assert body["results"][0]["explain"]["answer_type"] == "count"
    scores = [r["score"] for r in body["results"]]
    assert scores == sorted(scores, reverse=True)
    # A question asking for no value is ranked as without the option.
    other = "Is Tom allergic to anything?"
    with_option = search(api, bucket, other, now=ASKED_AT, ranking={"answer_type_boost": 0.3})["results"]
    assert [r["id"] for r in with_option] == [r["id"] for r in search(api, bucket, other, now=ASKED_AT)["results"]]
