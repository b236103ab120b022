"""Ranking levers beyond fusion: sequence positions and the neighbour lift, the speaker of a
transcript line, time cues in "when" questions. Real PostgreSQL, real model."""

from __future__ import annotations

import pytest

from memories import ranking, retrieval, text
from memories.models import Memory
from tests.factories import search, write

pytestmark = pytest.mark.django_db


def positions(ids):
    rows = {str(m.pk): (m.sequence_id, m.sequence_index) for m in Memory.objects.filter(pk__in=ids)}
    return [rows[str(i)] for i in ids]


def test_a_batch_is_one_sequence_in_order_and_a_run_continues_across_requests(api, bucket):
    first = positions(write(bucket, "Alpha one.", "Alpha two.", "Alpha three.", api=api))
    assert len({sequence for sequence, _ in first}) == 1 and first[0][0] is not None
    assert [index for _, index in first] == [0, 1, 2]
    other = positions(write(bucket, "Beta one.", "Beta two.", api=api))
    assert other[0][0] != first[0][0] and [index for _, index in other] == [0, 1]

    run_a = positions(write(bucket, {"content": "Run step one.", "run_id": "r1"}, api=api))
    run_b = positions(
        write(
            bucket,
            {"content": "Run step two.", "run_id": "r1"},
            {"content": "Run step three.", "run_id": "r1"},
            api=api,
        )
    )
    assert {sequence for sequence, _ in run_a + run_b} == {run_a[0][0]}
    assert [index for _, index in run_a + run_b] == [0, 1, 2]

    unrelated = positions(write(bucket, "Gamma one.", "Gamma two.", api=api, sequence=False))
    assert unrelated == [(None, None), (None, None)]


# The memory's own BM25 only: the context documents of the next two turns hold the question's words too.
ONLY_MEMORY = {"weights": {"keyword_context": 0}}
TURNS = [
    "Anna: Do you still keep those turtles of yours?",
    "Ben: Three years now, they are the calmest pets I know.",
    "Anna: I should visit the aquarium downtown.",
    "Ben: Let me know how the sharks look.",
]


def test_the_turn_after_a_matching_question_is_brought_in_by_the_neighbour_lift(api, bucket):
    ids = write(bucket, *TURNS, api=api)
    plain = search(api, bucket, "turtles", mode="keyword", ranking={**ONLY_MEMORY, "neighbour_weight": 0})
    assert [r["id"] for r in plain["results"]] == [ids[0]]  # no other turn holds the word

    lifted = search(
        api, bucket, "turtles", mode="keyword", explain=True, ranking={**ONLY_MEMORY, "neighbour_weight": 0.5}
    )
    found = [r["id"] for r in lifted["results"]]
    assert found[:2] == [ids[0], ids[1]]  # the answer right after the question, then turns two away
    assert set(found) <= set(ids[:3])  # reach 2: the fourth turn is three places away
    assert lifted["results"][1]["explain"]["neighbour_lift"] > 0
    assert "neighbour_lift" not in lifted["results"][0]["explain"]  # its neighbours scored nothing

    reach_one = search(
        api, bucket, "turtles", mode="keyword", ranking={**ONLY_MEMORY, "neighbour_weight": 0.5, "neighbour_reach": 1}
    )
    assert [r["id"] for r in reach_one["results"]] == [ids[0], ids[1]]


def test_a_neighbour_outside_the_filters_is_not_brought_in(api, bucket):
    ids = write(
        bucket,
        {"content": TURNS[0], "agent_id": "a1", "run_id": "s1"},
        {"content": TURNS[1], "agent_id": "a2", "run_id": "s1"},
        api=api,
    )
    body = search(api, bucket, "turtles", mode="keyword", filters={"agent_id": "a1"}, ranking=ONLY_MEMORY)
    assert [r["id"] for r in body["results"]] == [ids[0]]


def test_the_neighbour_lift_stays_inside_its_bucket(api, bucket, tenant):
    from memories.services.buckets import bucket_create

    other = bucket_create(tenant=tenant, name="other")
    write(other, *TURNS, api=api)
    ids = write(bucket, TURNS[0], "Ben: something else entirely.", api=api)
    # Same texts, other bucket: the positions (sequence, index) of the other bucket are never read.
    body = search(api, bucket, "turtles", mode="keyword", ranking={"weights": {"keyword_context": 0}})
    assert [r["id"] for r in body["results"]] == ids


def test_a_transcript_line_of_the_person_asked_about_is_boosted(api, bucket):
    ids = write(
        bucket,
        "Melanie: Caroline loves hiking in the hills every weekend.",
        "Caroline: I love hiking in the hills every weekend.",
        api=api,
        sequence=False,
    )
    question = "Does Caroline love hiking in the hills?"
    # Rank fusion: two candidates, whose min-max scores would be 1 and 0 whatever the boost.
    body = search(api, bucket, question, mode="keyword", explain=True, ranking={"fusion": "rrf", "speaker_boost": 0.5})
    assert body["results"][0]["id"] == ids[1]
    assert body["results"][0]["explain"]["boosts"]["speaker"] == 1.5
    assert "speaker" not in body["results"][1]["explain"]["boosts"]
    # An attributed memory's speaker is its attribution, not a name at its start.
    Memory.objects.filter(pk=ids[1]).update(attributed_to="assistant")
    body = search(api, bucket, question, mode="keyword", explain=True, ranking={"fusion": "rrf", "speaker_boost": 0.5})
    assert all("speaker" not in r["explain"]["boosts"] for r in body["results"])


def test_when_questions_favour_memories_that_carry_a_time(api, bucket):
    ids = write(
        bucket,
        "Jon: I opened the dance studio and it felt amazing.",
        "Jon: I opened the dance studio last May, it felt amazing.",
        api=api,
        sequence=False,
    )
    body = search(api, bucket, "When did Jon open the dance studio?", mode="keyword", explain=True,
                  ranking={"fusion": "rrf", "date_cue_boost": 0.3})  # fmt: skip
    assert body["results"][0]["id"] == ids[1]
    assert body["results"][0]["explain"]["boosts"]["date_cue"] == 1.3
    body = search(api, bucket, "Did Jon open the dance studio?", mode="keyword", explain=True,
                  ranking={"fusion": "rrf", "date_cue_boost": 0.3})  # fmt: skip
    assert all("date_cue" not in r["explain"]["boosts"] for r in body["results"])


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("When did Caroline go to the support group?", True),
        ("In what year did Nate adopt a dog?", True),
        ("How long ago was the trip?", True),
        ("What did Caroline research?", False),
        ("How long has Nate had turtles?", False),
    ],
)
def test_asks_when(query, expected):
    assert retrieval.asks_when(query) is expected


def test_time_expressions_and_transcript_speakers_are_recognised():
    assert retrieval.has_time_expression("I went there yesterday")
    assert retrieval.has_time_expression("We moved in 2019.")
    assert retrieval.has_time_expression("Back on Tuesday")
    assert not retrieval.has_time_expression("I love hiking")
    assert text.transcript_speaker("Caroline: I went to a group") == "Caroline"
    assert text.transcript_speaker("Dr. Lee: take two a day") == "Dr. Lee"
    assert text.transcript_speaker("I love it: really") is None
    assert text.transcript_speaker("note: buy milk") is None


def test_a_transcript_line_is_embedded_without_its_speaker_unless_attributed():
    assert text.embedding_text("Nate: You too!", None) == "You too!"
    assert text.embedding_text("Nate: You too!", "user") == "Nate: You too!"
    assert text.embedding_text("Note to self: buy milk", None) == "Note to self: buy milk"
    assert text.embedding_text("Nate:", None) == "Nate:"  # nothing would be left


def test_the_stored_vector_of_a_transcript_line_is_that_of_its_words(api, bucket):
    from engram_site.providers import embedding

    line, attributed = write(
        bucket, "Nate: I love my turtles.", {"content": "Nate: I walk my turtles.", "attributed_to": "user"}, api=api
    )
    vectors = {str(m.pk): m.embedding for m in Memory.objects.filter(pk__in=[line, attributed])}
    assert vectors[line] == pytest.approx(embedding.embed_texts(["I love my turtles."])[0], abs=1e-5)
    assert vectors[attributed] == pytest.approx(embedding.embed_texts(["Nate: I walk my turtles."])[0], abs=1e-5)


def test_a_possessive_in_the_question_names_the_person():
    assert retrieval.named_people("What is Caroline's identity?") == ["Caroline"]
    assert retrieval.named_people("Where did Jon\u2019s studio open?") == ["Jon"]


def test_neighbour_options_are_validated():
    with pytest.raises(ranking.RankingConfigError):
        ranking.merge(ranking.DEFAULTS, {"neighbour_reach": 9})
    with pytest.raises(ranking.RankingConfigError):
        ranking.merge(ranking.DEFAULTS, {"neighbour_weight": 2})
