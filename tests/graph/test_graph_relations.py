"""Relations in the knowledge graph: possessives, appositions, copulas, the speaker of a
"Name:" line, first names resolved to the bucket's full names, and graph-mode questions
that follow them ("who manages Alice?", "where does Bob's sister live?")."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from graph.extract import normalize_name, split_speaker
from graph.models import Edge, Entity
from graph.services.extraction import graph_rebuild
from memories import text
from memories.models import Memory
from tests.factories import write_extracted

pytestmark = pytest.mark.django_db


def daily(*contents, attributed_to=None) -> list[dict]:
    """One memory per content, a day apart (so their order is their created_at order)."""
    return [
        {"content": c, "created_at": datetime(2025, 1, 1 + i, tzinfo=UTC), "attributed_to": attributed_to}
        for i, c in enumerate(contents)
    ]


def facts(bucket):
    edges = Edge.objects.for_bucket(bucket).select_related("subject", "object_entity")
    return {(e.subject.name, e.predicate, e.object_entity.name if e.object_entity else e.object_literal) for e in edges}


def entities(bucket):
    return set(Entity.objects.for_bucket(bucket).values_list("name", "type"))


def search(api, bucket, query, **params):
    response = api.post(f"/api/v1/buckets/{bucket.pk}/search", {"query": query, **params}, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def first_result(api, bucket, query):
    body = search(api, bucket, query, mode="graph", explain=True)
    assert body["mode_used"] == "graph" and body["results"], body
    return body["results"][0]


# --- extraction -------------------------------------------------------------------------------


def test_a_possessive_manager_is_an_edge_between_clean_names(bucket):
    write_extracted(bucket, *daily("Bob Martinez is Alice Chen's manager at TechCo."))
    assert {("Bob Martinez", "PERSON"), ("Alice Chen", "PERSON"), ("TechCo", "ORG")} <= entities(bucket)
    assert not [name for name, _ in entities(bucket) if "'s" in name or name[-1] in ".,;:!?"]
    assert {("Bob Martinez", "manager_of", "Alice Chen"), ("Bob Martinez", "works_at", "TechCo")} <= facts(bucket)


def test_appositions_and_copulas_name_the_relation(bucket):
    write_extracted(
        bucket,
        *daily(
            "Anna, my sister, works at Google.",
            "Priya Nair, the founder of Brightline, lives in Leeds.",
            "Rex is my dog.",
            "Liam's mother, Grace, is a retired pilot.",
            "Carlos is a nurse.",
        ),
    )
    assert {
        ("User", "sibling_of", "Anna"),
        ("Anna", "works_at", "Google"),
        ("Priya Nair", "role", "founder"),
        ("Priya Nair", "works_at", "Brightline"),
        ("User", "owns_pet", "Rex"),
        ("Grace", "parent_of", "Liam"),
        ("Grace", "is_a", "retired pilot"),
        ("Carlos", "is_a", "nurse"),
    } <= facts(bucket)
    assert ("Rex", "ANIMAL") in entities(bucket)
    assert "user sister" in Entity.objects.for_bucket(bucket).get(normalized_name="anna").aliases


def test_an_unnamed_relative_is_an_attribute_of_the_owner_not_an_entity(bucket):
    write_extracted(bucket, *daily("Rachel's husband is a firefighter."))
    assert entities(bucket) == {("Rachel", "PERSON")}
    assert facts(bucket) == {("Rachel", "has", "husband"), ("Rachel", "husband_is_a", "firefighter")}


def test_a_name_given_by_an_apposition_names_the_pet(bucket):
    write_extracted(bucket, *daily("I got a rescue dog, a greyhound called Dash."))
    assert ("Dash", "ANIMAL") in entities(bucket)
    assert {("User", "owns_pet", "Dash"), ("Dash", "is_a", "greyhound")} <= facts(bucket)
    assert "user rescue dog" in Entity.objects.for_bucket(bucket).get(normalized_name="dash").aliases


def test_a_common_word_opening_a_sentence_is_a_name_only_where_the_bucket_knows_it(bucket, other_bucket):
    # "Dash" (a word too) opening a sentence: the bucket's Dash, once it knows a Dash.
    write_extracted(bucket, *daily("I got a rescue dog, a greyhound called Dash.", "Dash is scared of thunderstorms."))
    assert ("Dash", "scared_of", "thunderstorm") in facts(bucket)
    dash = Entity.objects.for_bucket(bucket).get(normalized_name="dash")
    assert dash.mention_count == 2
    # Where no Dash was named, the word is no entity and says nothing.
    write_extracted(other_bucket, *daily("Dash is scared of thunderstorms.", "Things have been busy at work."))
    assert entities(other_bucket) == set() and facts(other_bucket) == set()


def test_negated_relations_assert_nothing(bucket):
    write_extracted(
        bucket, *daily("Bob is not my brother.", "Kevin isn't Laura's husband.", "Maybe Sara works at IBM.")
    )
    assert facts(bucket) == set()


def test_a_first_name_is_the_buckets_only_person_of_that_name(bucket):
    write_extracted(
        bucket,
        *daily("Alice Chen joined Initech.", "Alice moved to Denver.", "Robert Diaz plays chess.", "Bob loves jazz."),
    )
    assert {("Alice Chen", "lives_in", "Denver"), ("Robert Diaz", "likes", "jazz")} <= facts(bucket)
    names = {name for name, _ in entities(bucket)}
    assert "Alice" not in names and "Bob" not in names


def test_a_first_name_shared_by_two_people_stays_apart(bucket):
    write_extracted(bucket, *daily("Alice Chen joined Initech.", "Alice Wong joined Globex.", "Alice moved to Denver."))
    assert ("Alice", "lives_in", "Denver") in facts(bucket)
    assert not {("Alice Chen", "lives_in", "Denver"), ("Alice Wong", "lives_in", "Denver")} & facts(bucket)


def test_a_rebuild_resolves_first_names_the_same_way(bucket):
    write_extracted(
        bucket, *daily("Alice Chen joined Initech.", "Alice moved to Denver.", "Bob Martinez is Alice's manager.")
    )
    before = facts(bucket)
    graph_rebuild(bucket=bucket)
    assert facts(bucket) == before
    assert ("Bob Martinez", "manager_of", "Alice Chen") in before


# --- the speaker of a "Name:" line ----------------------------------------------------------------


TRICKY_PREFIXES = [
    "Caroline: I went to a support group.", "Dr. Lee: take two a day", "O’Brien: I moved to Cork.",
    "Mary Jane Watson: hey", "Mary Jane Watson Parker: four words are not a name", "Caroline : spaced colon",
    "  Bob: leading space", "Caroline:\tI tabbed", "Note: buy milk", "note: buy milk", "Note to self: buy milk",
    "Update: I moved.", "Q: what time?", "Monday: gym", "March: taxes", "User: I moved.", "Me: fine",
    "Assistant: I can help.", "I moved to Austin at 10:30: fun.", "I love it: really", "Nate:", "Nate:   ",
    "Ünal: not an ASCII capital", "Dr.: a title alone", "Caroline's: odd", "A" * 40 + ": a very long word",
]  # fmt: skip


@pytest.mark.parametrize("line", TRICKY_PREFIXES)
def test_the_graph_and_the_memories_read_a_speaker_prefix_alike(line):
    # memories.text holds the one parser; the graph reads its answer. Both must agree on where the
    # prefix ends (what is embedded and what is parsed) and on who, if anyone, is speaking.
    ref, rest = split_speaker(line)
    assert text.embedding_text(line, None) == rest, line
    speaker = text.transcript_speaker(line)
    if ref.type == "PERSON":
        assert speaker is not None and normalize_name(speaker) == ref.key, line
    else:
        assert speaker is None or speaker.casefold() in ("user", "me", "assistant"), (line, speaker)


def test_split_speaker_reads_a_leading_name_as_the_speaker():
    speaker, text = split_speaker("Caroline: I went to a support group yesterday.")
    assert (speaker.name, speaker.type, text) == ("Caroline", "PERSON", "I went to a support group yesterday.")
    assert split_speaker("Sam Lee: I graduated.")[0].key == "sam lee"
    for labelled in ("Note: I moved.", "Update: I moved.", "Monday: gym", "User: I moved."):
        assert split_speaker(labelled)[0].key == "user", labelled
    assert split_speaker("Assistant: I can help.")[0].key == "assistant"
    # An attributed memory keeps its attribution; the label is still not part of the sentence.
    assert split_speaker("Caroline: I moved.", attributed_to="assistant") == (
        split_speaker("", attributed_to="assistant")[0],
        "I moved.",
    )
    assert split_speaker("I moved to Austin at 10:30: fun.")[1] == "I moved to Austin at 10:30: fun."


def test_first_person_in_a_speaker_line_is_the_speaker(bucket):
    write_extracted(
        bucket,
        *daily(
            "Caroline: I went to a support group yesterday.",
            "Caroline: My sister Tess is a dentist.",
            "Melanie: I moved to Boston in 2018.",
            "Note: I work at Starbucks.",
        ),
    )
    got = facts(bucket)
    assert {
        ("Caroline", "visited", "support group"),
        ("Caroline", "sibling_of", "Tess"),
        ("Tess", "is_a", "dentist"),
        ("Melanie", "lives_in", "Boston"),
        ("User", "works_at", "Starbucks"),
    } <= got
    assert not {f for f in got if f[0] == "User" and f[2] in {"support group", "Tess", "Boston"}}
    assert ("Caroline", "PERSON") in entities(bucket)


# --- graph-mode questions ----------------------------------------------------------------------------


@pytest.fixture
def office(bucket):
    contents = [
        "Alice Chen lives in Boston.",
        "Alice Chen's favourite food is ramen.",
        "Bob Martinez is Alice Chen's manager at TechCo.",
        "Bob Martinez plays tennis on Sundays.",
        "TechCo is based in Austin.",
        "Alice Chen started yoga classes.",
    ]
    return dict(zip(contents, write_extracted(bucket, *daily(*contents)), strict=True))


@pytest.mark.parametrize("query", ["Who manages Alice?", "who manages Alice Chen?", "Who is Alice Chen's manager?",
                                   "Who is Alice's boss?"])  # fmt: skip
def test_who_manages_alice_finds_the_manager_first(api, bucket, office, query):
    hit = first_result(api, bucket, query)
    assert hit["id"] == str(office["Bob Martinez is Alice Chen's manager at TechCo."]), hit["content"]
    assert "manager_of" in hit["explain"]["graph_path"]


@pytest.fixture
def family(bucket):
    contents = [
        "Bob Martinez is my brother.",
        "Bob lives in Chicago.",
        "Bob has a sister, Carol.",
        "Carol moved to Denver in 2022.",
        "Bob works at TechCo.",
        "Carol loves hiking.",
    ]
    return dict(zip(contents, write_extracted(bucket, *daily(*contents)), strict=True))


def test_where_does_bobs_sister_live_walks_bob_sibling_place(api, bucket, family):
    hit = first_result(api, bucket, "Where does Bob's sister live?")
    assert hit["id"] == str(family["Carol moved to Denver in 2022."]), hit["content"]
    assert "lives_in" in hit["explain"]["graph_path"]


def test_a_sister_named_in_the_same_memory_is_found_by_alias(api, bucket):
    answer, _chicago = write_extracted(
        bucket, *daily("My brother Bob has a sister, Carol, who lives in Denver.", "Bob lives in Chicago.")
    )
    assert {("User", "sibling_of", "Bob"), ("Bob", "sibling_of", "Carol"), ("Carol", "lives_in", "Denver")} <= facts(
        bucket
    )
    assert first_result(api, bucket, "Where does Bob's sister live?")["id"] == str(answer)


def test_an_outsider_cannot_ask_the_buckets_graph(outsider_api, bucket, office):
    query = {"query": "Who manages Alice?", "mode": "graph"}
    response = outsider_api.post(f"/api/v1/buckets/{bucket.pk}/search", query, format="json")
    assert response.status_code == 404
    assert Memory.objects.filter(bucket=bucket).count() == len(office)
