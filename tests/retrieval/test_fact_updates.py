"""Facts that changed, at query time (memories/retrieval/updates.py), and query terms in their
other number form (retrieval.keyword.plural_variants): the rules on hand-made hits and vectors,
then through the search API, with explain, and with each turned off."""

from __future__ import annotations

import uuid
from datetime import timedelta

import numpy as np
import pytest
from django.utils import timezone

from memories import ranking
from memories.retrieval import updates
from memories.retrieval.hits import Hit
from memories.retrieval.keyword import plural_variants
from tests.factories import search, write

NOW = timezone.now()


def _hit(content: str, score: float, days_ago: float) -> Hit:
    row = {"content": content, "created_at": NOW - timedelta(days=days_ago)}
    return Hit(id=uuid.uuid4(), row=row, score=score, explain={"boosts": {}})


def _unit(*values: float) -> np.ndarray:
    vector = np.array(values, dtype=np.float32)
    return vector / np.linalg.norm(vector)


def _order(hits, query, similarity, vectors, **overrides):
    config = ranking.merge(ranking.DEFAULTS, overrides)
    ordered = updates.order_updates(hits, query, similarity, lambda ids: {i: vectors[i] for i in ids}, config)
    return [h.row["content"] for h in ordered]


@pytest.fixture
def madrid_london():
    old = _hit("Tom lives in Madrid.", 0.9, 600)
    job = _hit("Tom is a graphic designer.", 0.5, 600)
    new = _hit("Tom moved back to London in the summer.", 0.6, 60)
    vectors = {old.id: _unit(1, 0.6, 0), new.id: _unit(1, 0, 0.5), job.id: _unit(0, 1, 0)}
    return [old, new, job], vectors


def test_a_question_about_the_present_puts_the_newer_fact_first(madrid_london):
    hits, vectors = madrid_london
    similarity = {h.id: s for h, s in zip(hits, (0.79, 0.70, 0.6), strict=True)}
    assert _order(hits, "Where does Tom live?", similarity, vectors)[:2] == [
        "Tom moved back to London in the summer.",
        "Tom lives in Madrid.",
    ]
    moved = hits[1]
    assert moved.score > hits[0].score > hits[2].score  # scores still fall down the list
    assert moved.explain["fact_update"]["above"] == str(hits[0].id)
    assert moved.explain["fact_update"]["as"] == "newer"


def test_a_question_about_the_earlier_state_puts_the_older_fact_first(madrid_london):
    hits, vectors = madrid_london
    hits = [hits[1], hits[0], hits[2]]  # the question names London: the newer one leads
    hits[0].score, hits[1].score = 0.9, 0.8
    similarity = {hits[0].id: 0.82, hits[1].id: 0.68, hits[2].id: 0.5}
    assert _order(hits, "Where did Tom live before London?", similarity, vectors)[0] == "Tom lives in Madrid."
    # In the past tense alone, neither is the obvious answer: nothing moves.
    assert _order(hits, "Where did Tom live in the summer?", similarity, vectors)[0] == hits[0].row["content"]


def test_nothing_moves_without_a_change_a_time_gap_or_enough_of_the_question(madrid_london):
    hits, vectors = madrid_london
    similarity = {h.id: s for h, s in zip(hits, (0.79, 0.70, 0.6), strict=True)}
    first = hits[0].row["content"]
    # Turned off.
    assert _order(hits, "Where does Tom live?", similarity, vectors, newer_fact_ratio=0)[0] == first
    # Far less near the question than the older fact.
    weak = {**similarity, hits[1].id: 0.3}
    assert _order(hits, "Where does Tom live?", weak, vectors)[0] == first
    # Written the same day.
    hits[1].row["created_at"] = hits[0].row["created_at"]
    assert _order(hits, "Where does Tom live?", similarity, vectors)[0] == first
    # A later memory that states no change.
    hits[1].row.update(created_at=NOW, content="Tom likes London in the summer.")
    assert _order(hits, "Where does Tom live?", similarity, vectors)[0] == first


def test_a_newer_fact_passes_only_the_memory_most_like_it():
    # "Dana got a new number" updates the old number, not her workplace, although both are about Dana.
    work = _hit("Dana works at the city library.", 0.9, 200)
    number = _hit("Dana's phone number is 555-0142.", 0.8, 200)
    new = _hit("Dana got a new number: 555-0199.", 0.7, 3)
    vectors = {work.id: _unit(1, 0, 0.3), number.id: _unit(0, 1, 0.3), new.id: _unit(0.2, 1, 0.2)}
    similarity = {work.id: 0.80, number.id: 0.72, new.id: 0.60}
    assert _order([work, number, new], "Where does Dana work?", similarity, vectors) == [
        "Dana works at the city library.",
        "Dana got a new number: 555-0199.",
        "Dana's phone number is 555-0142.",
    ]


def test_conversation_turns_take_part_only_when_asked(madrid_london):
    hits, vectors = madrid_london
    similarity = {h.id: s for h, s in zip(hits, (0.79, 0.70, 0.6), strict=True)}
    for hit in hits:
        hit.row["attributed_to"] = "user"
    assert _order(hits, "Where does Tom live?", similarity, vectors)[0] == "Tom lives in Madrid."
    assert _order(hits, "Where does Tom live?", similarity, vectors, newer_fact_turns=True)[0].startswith("Tom moved")


def test_what_a_question_asks_for():
    assert updates.wanted("Where do I work now?") == "newer"
    assert updates.wanted("What's Dana's phone number?") == "newer"
    assert updates.wanted("Where did I work before?") == "older"
    assert updates.wanted("What was Dana's old number?") == "older"
    assert updates.wanted("When did I start at Globex?") is None
    assert updates.wanted("What did we do in 2023?") is None


def test_plural_variants():
    assert plural_variants(["standup", "fridays"]) == {"standups": "standup", "friday": "fridays"}
    # Not after s, u, i; not numbers or short words; not a form the query holds already.
    assert plural_variants(["class", "bus", "paris", "2024", "go"]) == {}
    assert plural_variants(["cat", "cats"]) == {}


@pytest.mark.django_db
def test_the_search_puts_a_changed_fact_first_and_explains_it(api, bucket):
    def days_ago(days):
        return (timezone.now() - timedelta(days=days)).isoformat()

    write(bucket, {"content": "I live at 12 Elm Street, Springfield.", "created_at": days_ago(500)}, api=api)
    write(bucket, {"content": "My landlord is Mr. Peters.", "created_at": days_ago(500)}, api=api)
    write(bucket, {"content": "We moved to 48 Harbor Road, Portland last week.", "created_at": days_ago(7)}, api=api)
    answer = search(api, bucket, "Which city do I live in now?", explain=True)["results"]
    assert answer[0]["content"].startswith("We moved")
    assert answer[0]["explain"]["fact_update"]["as"] == "newer"
    assert answer[0]["explain"]["fact_update"]["above"] == answer[1]["id"]
    off = search(api, bucket, "Which city do I live in now?", ranking={"newer_fact_ratio": 0})["results"]
    assert off[0]["content"].startswith("I live at")
    before = search(api, bucket, "Which city did I live in before?", explain=True)["results"]
    assert before[0]["content"].startswith("I live at")


@pytest.mark.django_db
def test_a_successor_takes_the_place_of_the_fact_it_superseded(
    api, bucket, celery_eager, django_capture_on_commit_callbacks
):
    def days_ago(days):
        return (timezone.now() - timedelta(days=days)).isoformat()

    # Written, then enriched as the worker does it: the graph closes the iPhone's edge with the
    # Pixel's (both the user's phone), and the older memory is superseded by the newer.
    with django_capture_on_commit_callbacks(execute=True):
        old, plan, new = (
            write(bucket, {"content": content, "created_at": days_ago(days)}, api=api)[0]
            for content, days in (
                ("My phone is an iPhone 12.", 400),
                ("My phone plan is 20 GB a month.", 390),
                ("I switched to a Pixel 8 last month.", 30),
            )
        )
    on, off = {"successor_takes_place": True}, {"successor_takes_place": False}
    question = "What phone do I have?"
    # Demoted, the iPhone leaves the first place to the plan, which holds "phone" too.
    assert search(api, bucket, question, ranking=off)["results"][0]["id"] == plan
    first = search(api, bucket, question, ranking=on, explain=True)["results"][0]
    assert first["id"] == new and first["explain"]["successor_of"]["id"] == old
    # A question about the earlier state leaves the successor its own score.
    before = search(api, bucket, "What phone did I have before the Pixel?", ranking=on, explain=True)["results"]
    assert before[0]["id"] == old and all("successor_of" not in hit["explain"] for hit in before)


@pytest.mark.django_db
def test_a_query_word_finds_its_other_number_form(api, bucket):
    # Written on a Wednesday: a memory's weekday is one of its words.
    wednesday = "2026-11-25T12:00:00+00:00"
    notes = ("Friday standups are async in Slack.", "The team meets in room 4.")
    write(bucket, *notes, created_at=wednesday, sequence=False, api=api)
    plurals = {"keyword_plurals": True}  # an option, off by default (docs/RETRIEVAL.md)
    found = search(api, bucket, "standup on Fridays", mode="keyword", ranking=plurals)["results"]
    assert [r["content"] for r in found] == ["Friday standups are async in Slack."]
    assert not search(api, bucket, "standup on Fridays", mode="keyword")["results"]
