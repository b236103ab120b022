"""Fusion and the neighbour lift in a small bucket: a short list's floor, a lift that never passes
the neighbour it flows from and flows only between conversation turns, the first memory of a
batch in the keyword_context list. The suite of whole cases is test_first_five_minutes.py."""

from __future__ import annotations

import pytest

from memories import ranking, retrieval
from tests.factories import search, write

NO_NEW = {"short_list": 0, "neighbour_gap": False, "neighbour_turns_only": False, "keyword_context_stand_in": False}


def fused_with(lists, **overrides):
    return ranking.fuse(lists, ranking.merge(ranking.DEFAULTS, {"weights": {"vector_context": 0}, **overrides}))


def test_a_short_list_keeps_a_small_gap_small():
    # Two memories both matching one name, BM25 apart by their lengths; the vectors clearly
    # prefer the second. Min-max sent the keyword gap to 1 against 0 and it won.
    lists = {"keyword": [("peanuts", 0.485), ("porto", 0.459)], "vector": [("porto", 0.654), ("peanuts", 0.573)]}
    plain = fused_with(lists, short_list=0)
    assert plain["peanuts"] == pytest.approx(plain["porto"])  # 1 + 0 against 0 + 1
    short = fused_with(lists)
    assert short["porto"] > short["peanuts"]
    assert short["peanuts"] == pytest.approx((1 + (0.573 - 0.14) / (0.654 - 0.14)) / 2, rel=0.02)


def test_the_floor_moves_from_absolute_to_the_lists_own_with_its_length():
    config = ranking.DEFAULTS
    assert ranking.short_list_floor("keyword", 2.0, 1, config) == 0.0
    assert ranking.short_list_floor("vector", 0.5, 1, config) == pytest.approx(config.vector_floor)
    assert 0.0 < ranking.short_list_floor("keyword", 2.0, 5, config) < 2.0
    assert ranking.short_list_floor("keyword", 2.0, config.short_list, config) == 2.0
    # Never above the list's own floor: a list reaching below the absolute one keeps its own.
    assert ranking.short_list_floor("vector", 0.05, 2, config) == 0.05
    # Lists as long as the candidates, as in a large bucket, are min-max as before.
    scores = [("a", 3.0), ("b", 2.0), *((f"x{i}", 1.0) for i in range(20))]
    assert fused_with({"keyword": scores})["b"] == pytest.approx(0.5)


def test_with_neighbour_gap_a_lift_never_passes_the_neighbour_it_comes_from():
    position = {"q": ("s", 0), "a": ("s", 1), "far": ("s", 2)}
    at = {place: item for item, place in position.items()}
    fused = {"q": 0.9, "a": 0.85, "far": 0.0}
    turns = set(position)
    gap = ranking.merge(ranking.DEFAULTS, {"neighbour_gap": True})
    lifted, lifts = ranking.lift_neighbours(fused, position, at, gap, turns)
    assert "q" not in lifts  # nothing from a neighbour below it
    assert lifted["a"] == pytest.approx(0.85 + 0.5 * 0.05) and lifted["a"] < lifted["q"]
    assert lifted["far"] == pytest.approx(0.5 * 0.85)  # from "a" next to it
    # The default: a share of the neighbour's own score, both ways.
    lifted, _ = ranking.lift_neighbours(fused, position, at, ranking.DEFAULTS, turns)
    assert lifted["q"] == pytest.approx(0.9 + 0.5 * 0.85)
    assert lifted["a"] == pytest.approx(0.85 + 0.5 * 0.9)


def test_a_lift_flows_only_between_turns():
    position = {"q": ("s", 0), "a": ("s", 1)}
    at = {place: item for item, place in position.items()}
    fused = {"q": 0.9, "a": 0.0}
    _lifted, lifts = ranking.lift_neighbours(fused, position, at, ranking.DEFAULTS, {"q"})
    assert lifts == {}
    _lifted, lifts = ranking.lift_neighbours(fused, position, at, ranking.DEFAULTS, {"q", "a"})
    assert set(lifts) == {"a"}


@pytest.mark.django_db
def test_notes_of_one_batch_lift_nothing_and_turns_do(api, bucket):
    notes = write(bucket, "Maya is allergic to peanuts.", "The team standup is at 9:30 every weekday.", api=api)
    memory_only = {"weights": {"keyword_context": 0}}  # the standup's context holds "peanuts"
    body = search(api, bucket, "peanuts", mode="keyword", explain=True, ranking=memory_only)
    assert [r["id"] for r in body["results"]] == notes[:1]
    assert "neighbour_lift" not in body["results"][0]["explain"]
    body = search(api, bucket, "peanuts", mode="keyword", ranking={**memory_only, "neighbour_turns_only": False})
    assert [r["id"] for r in body["results"]] == notes  # the standup brought in and lifted

    turns = write(
        bucket,
        {"content": "Do you have any allergies?", "attributed_to": "assistant"},
        {"content": "Only hazelnuts, since childhood.", "attributed_to": "user"},
        api=api,
    )
    body = search(api, bucket, "any allergies", mode="keyword", explain=True, ranking=memory_only)
    found = {r["id"]: r["explain"] for r in body["results"]}
    assert found[turns[1]]["neighbour_lift"] > 0


@pytest.mark.django_db
def test_the_first_memory_of_a_batch_ranks_in_the_keyword_context_list(api, bucket):
    first, second, _third = write(
        bucket, "Ravi is my cousin from Toronto.", "Ravi works at a bank.", "Ravi's wedding is in July in Goa.", api=api
    )
    body = search(api, bucket, "where is Ravi from", explain=True)
    signals = {r["id"]: r["explain"]["signals"] for r in body["results"]}
    assert "keyword_context" in signals[first]
    # On the context list's own scale (its statistics), not at its memory-side score.
    assert signals[first]["keyword_context"]["score"] != signals[first]["keyword"]["score"]
    assert body["results"][0]["id"] == first
    body = search(api, bucket, "where is Ravi from", explain=True, ranking={"keyword_context_stand_in": False})
    assert "keyword_context" not in {r["id"]: r["explain"]["signals"] for r in body["results"]}[first]
    assert second in [r["id"] for r in body["results"]]


def test_plural_weekdays_and_clock_times_are_time_expressions():
    assert retrieval.has_time_expression("Piano lessons are on Tuesdays.")
    assert retrieval.has_time_expression("The standup is at 9:30.")
    assert retrieval.has_time_expression("Pickup at 3pm")
    assert not retrieval.has_time_expression("It cost 12.50 and version 2.10 fixed it.")
    assert not retrieval.has_time_expression("I am here")


def test_the_options_are_validated():
    for bad in ({"short_list": -1}, {"vector_floor": 2}, {"neighbour_gap": 1}, {"neighbour_turns_only": "yes"},
                {"keyword_context_stand_in": None}, {"keyword_plurals": 1}, {"keyword_short_ceiling": "no"},
                {"question_weight": 1.5}, {"newer_fact_ratio": -0.1}, {"newer_fact_pool": 0}):  # fmt: skip
        with pytest.raises(ranking.RankingConfigError):
            ranking.merge(ranking.DEFAULTS, bad)
    assert ranking.merge(ranking.DEFAULTS, NO_NEW).short_list == 0


def test_one_short_keyword_match_counts_its_share_of_the_question():
    # "What car do I drive?": "drive" in one memory, "car" in none; the vectors prefer the Civic.
    lists = {"keyword": [("drive", 2.443)], "vector": [("civic", 0.544), ("drive", 0.383), ("dog", 0.05)]}
    mass = 6.0  # the IDF of "car" (no memory holds it) and of "drive"
    whole = fused_with(lists, keyword_short_ceiling=False)
    on = {"weights": {"vector_context": 0}, "keyword_short_ceiling": True}
    share = ranking.fuse(lists, ranking.merge(ranking.DEFAULTS, on), {"keyword": mass})
    assert whole["drive"] - share["drive"] == pytest.approx((1 - 2.443 / mass) / 2)
    assert share["civic"] == whole["civic"]
    # From short_list candidates on, the list's own best is its top, as before.
    long = {"keyword": [(f"m{i}", 3.0 - i * 0.1) for i in range(ranking.DEFAULTS.short_list)]}
    config = ranking.merge(ranking.DEFAULTS, {"keyword_short_ceiling": True})
    assert ranking.fuse(long, config, {"keyword": 10.0}) == ranking.fuse(long, config)
    assert ranking.short_list_ceiling(2.0, 1.0, 1, config) == 2.0  # never below the best score


@pytest.mark.django_db
def test_a_question_turn_keeps_its_share_of_the_score(api, bucket):
    turns = write(
        bucket,
        {"content": "Any concerts coming up?", "attributed_to": "assistant"},
        {"content": "I have tickets for Brad Mehldau in November.", "attributed_to": "user"},
        api=api,
    )
    plain = search(api, bucket, "What concert is the user going to?", explain=True, ranking={"question_weight": 1})
    weighted = search(api, bucket, "What concert is the user going to?", explain=True, ranking={"question_weight": 0.5})
    before = {r["id"]: r for r in plain["results"]}
    after = {r["id"]: r for r in weighted["results"]}
    assert "question" not in before[turns[0]]["explain"]["boosts"]
    assert after[turns[0]]["explain"]["boosts"]["question"] == 0.5
    assert after[turns[0]]["score"] == pytest.approx(before[turns[0]]["score"] * 0.5, rel=1e-3)
    assert "question" not in after[turns[1]]["explain"]["boosts"]
