"""Names in the knowledge graph: a first name or a surname is the full name the bucket knows,
whether it was written before or after; a description ("Lena's dog", "the dog of Lena Ortiz",
"the CTO of Finlytics") is never an entity, but edges of the entities it describes; operators'
corrections hold."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest
from django.db import connection, connections, transaction

from audit.services import Actor
from engram_site.scoping import in_this_context
from graph import corrections
from graph.models import Edge, Entity, Mention
from graph.services.extraction import graph_extract_memories, graph_rebuild
from graph.services.locks import bucket_lock
from memories.models import Memory
from tests.factories import make_operator, write, write_extracted
from tests.support import wait_for
from tests.support.db import graph_facts, graph_snapshot

pytestmark = pytest.mark.django_db

HIRED = "Marco Rossi, the CTO of Finlytics, hired Priya last spring."
PRIYA = "Priya Natarajan joined the data team in Leeds."


def daily(*contents, start=1) -> list[dict]:
    """One memory per content, a day apart (their order is their created_at order)."""
    return [{"content": c, "created_at": datetime(2025, 1, start + i, tzinfo=UTC)} for i, c in enumerate(contents)]


def names(bucket) -> set[str]:
    return set(Entity.objects.for_bucket(bucket).values_list("name", flat=True))


def mentioned(bucket, key) -> set:
    entity = Entity.objects.for_bucket(bucket).get(normalized_name=key)
    return set(Mention.objects.filter(entity=entity).values_list("memory_id", flat=True))


def graph_search(api, bucket, query) -> list[dict]:
    response = api.post(
        f"/api/v1/buckets/{bucket.pk}/search", {"query": query, "mode": "graph", "explain": True}, format="json"
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["mode_used"] == "graph", body
    return body["results"]


def assert_no_description_entities(bucket):
    described = [n for n in names(bucket) if " of " in n or "'s" in n or n.lower().startswith(("the ", "a "))]
    assert not described, described


# --- first names and surnames, written before or after the full name ------------------------------------


@pytest.mark.parametrize("order", ["full name first", "full name later", "one batch, full name later"])
def test_who_hired_priya_answers_with_the_marco_rossi_memory(api, bucket, order):
    if order == "full name first":
        write_extracted(bucket, *daily(PRIYA))
        [hired] = write_extracted(bucket, *daily(HIRED, start=2))
    elif order == "full name later":
        [hired] = write_extracted(bucket, *daily(HIRED))
        write_extracted(bucket, *daily(PRIYA, start=2))
    else:
        hired, _priya = write_extracted(bucket, *daily(HIRED, PRIYA))
    assert ("Marco Rossi", "hired", "Priya Natarajan") in graph_facts(bucket)
    assert {("Marco Rossi", "role", "cto"), ("Marco Rossi", "works_at", "Finlytics")} <= graph_facts(bucket)
    assert "Priya" not in names(bucket) and hired in mentioned(bucket, "priya natarajan")
    assert_no_description_entities(bucket)

    results = graph_search(api, bucket, "Who hired Priya?")
    assert results[0]["id"] == str(hired), [r["content"] for r in results]
    assert "hired" in results[0]["explain"]["graph_path"]
    # The entity API shows the edge on Priya Natarajan.
    priya = Entity.objects.for_bucket(bucket).get(normalized_name="priya natarajan")
    detail = api.get(f"/api/v1/entities/{priya.pk}").json()
    assert "hired" in str(detail), detail


def test_a_later_full_name_takes_the_first_names_edges_and_timelines(bucket):
    denver, seattle, _full = write_extracted(
        bucket, *daily("Alice moved to Denver.", "Alice moved to Seattle.", "Alice Chen joined Initech.")
    )
    facts = graph_facts(bucket)
    assert {("Alice Chen", "lives_in", "Denver"), ("Alice Chen", "lives_in", "Seattle")} <= facts
    assert "Alice" not in names(bucket)
    # The two homes are one timeline of Alice Chen's: the move superseded the first.
    edge = Edge.objects.for_bucket(bucket).get(object_entity__normalized_name="denver")
    assert edge.subject.normalized_name == "alice chen" and edge.valid_to is not None
    assert Memory.objects.get(pk=denver).superseded_by == seattle


def test_a_second_full_name_makes_the_first_name_ambiguous_again(bucket):
    [alone] = write_extracted(bucket, *daily("Priya moved to Denver."))
    write_extracted(bucket, *daily(PRIYA, start=2))
    assert ("Priya Natarajan", "lives_in", "Denver") in graph_facts(bucket)
    write_extracted(bucket, *daily("Priya Shah joined Globex.", start=3))
    facts = graph_facts(bucket)
    assert ("Priya", "lives_in", "Denver") in facts
    assert not {("Priya Natarajan", "lives_in", "Denver"), ("Priya Shah", "lives_in", "Denver")} & facts
    assert mentioned(bucket, "priya") == {alone}


def test_two_full_names_of_one_first_name_are_never_merged(bucket):
    write_extracted(bucket, *daily("Priya moved to Denver.", PRIYA, "Priya Shah joined Globex."))
    facts = graph_facts(bucket)
    assert ("Priya", "lives_in", "Denver") in facts
    assert {"Priya", "Priya Natarajan", "Priya Shah"} <= names(bucket)


def test_a_pet_keeps_its_name_when_a_person_of_that_first_name_arrives(bucket):
    write_extracted(bucket, *daily("My dog Max loves the park."))
    write_extracted(bucket, *daily("Max Weber joined Initech.", "Max loves bones.", start=2))
    facts = graph_facts(bucket)
    assert {("User", "owns_pet", "Max"), ("Max", "likes", "park"), ("Max", "likes", "bone")} <= facts
    assert not {f for f in facts if f[0] == "Max Weber" and f[1] == "likes"}


@pytest.mark.parametrize("later", [False, True])
def test_a_surname_alone_is_the_one_person_of_that_surname(bucket, later):
    items = daily("Natarajan moved to Leeds.", "Priya Natarajan joined Finlytics.")
    if later:
        write_extracted(bucket, items[0])
        write_extracted(bucket, items[1])
    else:
        write_extracted(bucket, *reversed(items))
    assert ("Priya Natarajan", "lives_in", "Leeds") in graph_facts(bucket)
    assert "Natarajan" not in names(bucket)


def test_a_surname_shared_by_two_people_stays_apart(bucket):
    write_extracted(bucket, *daily("Priya Natarajan joined Finlytics.", "Raj Natarajan joined Globex."))
    write_extracted(bucket, *daily("Natarajan moved to Leeds.", start=3))
    assert ("Natarajan", "lives_in", "Leeds") in graph_facts(bucket)


def test_the_graph_read_in_any_order_and_rebuilt_is_the_same(bucket, other_bucket):
    contents = daily(
        HIRED, "Priya moved to Leeds.", PRIYA, "Lena Ortiz's dog is a beagle.", "My sister lives in Denver.",
        "My sister Anna is a nurse.", "Lena Ortiz's dog Biscuit loves walks.", "Mel moved to Porto.",
        "My brother's wife is a pilot.", "Melanie Chen joined Initech.", "My brother's wife Rosa loves jazz.",
    )  # fmt: skip
    for item in contents:
        write_extracted(bucket, item)  # one write at a time, as they arrive
    incremental = graph_snapshot(bucket)
    write_extracted(other_bucket, *contents)  # at once
    graph_rebuild(bucket=bucket)
    rebuilt = graph_snapshot(bucket)
    assert rebuilt[1:] == incremental[1:]
    assert sorted(e[:2] for e in rebuilt[0]) == sorted(e[:2] for e in incremental[0])
    assert [e[:2] for e in graph_snapshot(other_bucket)[0]] == [e[:2] for e in rebuilt[0]]
    assert {("Priya Natarajan", "lives_in", "Leeds"), ("Anna", "lives_in", "Denver"),
            ("Biscuit", "is_a", "beagle"), ("Lena Ortiz", "owns_pet", "Biscuit"), ("Melanie Chen", "lives_in", "Porto"),
            ("Rosa", "is_a", "pilot")} <= graph_facts(bucket)  # fmt: skip
    assert_no_description_entities(bucket)


# --- short forms: "Mel" is the one Melanie -----------------------------------------------------------------


@pytest.mark.parametrize("order", ["full name first", "short form first", "one batch"])
@pytest.mark.parametrize("full", ["Melanie Chen", "Melanie"])
def test_a_short_form_is_the_one_person_whose_first_name_it_begins(bucket, order, full):
    said = f"{full} joined Initech." if " " in full else "Melanie: I joined Initech."
    items = daily("Caroline: Mel moved to Boston, she loves it.", said)
    if order == "full name first":
        write_extracted(bucket, items[1])
        write_extracted(bucket, items[0])
    elif order == "short form first":
        write_extracted(bucket, items[0])
        write_extracted(bucket, items[1])
    else:
        write_extracted(bucket, *items)
    assert (full, "lives_in", "Boston") in graph_facts(bucket)
    assert "Mel" not in names(bucket)


def test_graph_mode_reads_a_short_form_in_the_question(api, bucket):
    boston, _paint, _caroline = write_extracted(
        bucket, *daily("Melanie moved to Boston.", "Melanie: I painted a lake.", "Caroline moved to Porto.")
    )
    [hit, *_] = graph_search(api, bucket, "Where does Mel live?")
    assert hit["id"] == str(boston), hit["content"]


def test_a_short_form_of_two_first_names_is_nobody_of_them(bucket):
    [mel] = write_extracted(bucket, *daily("Mel moved to Boston."))
    write_extracted(bucket, *daily("Melanie Chen joined Initech.", start=2))
    assert ("Melanie Chen", "lives_in", "Boston") in graph_facts(bucket)
    # A second first name that "Mel" begins: the memory is read again, and Mel is Mel.
    write_extracted(bucket, *daily("Melissa Grant joined Globex.", start=3))
    facts = graph_facts(bucket)
    assert ("Mel", "lives_in", "Boston") in facts
    assert not {("Melanie Chen", "lives_in", "Boston"), ("Melissa Grant", "lives_in", "Boston")} & facts
    assert mentioned(bucket, "mel") == {mel}
    # Two people of one first name: the short form is neither of them.
    write_extracted(bucket, *daily("Dan moved to Porto.", "Daniela Costa joined Acme.", "Daniela Reis joined Umbrella.",
                                   start=4))  # fmt: skip
    assert ("Dan", "lives_in", "Porto") in graph_facts(bucket)


@pytest.mark.parametrize(
    "short, full",
    [("Al", "Alice Chen"), ("Max", "Maxine Hart"), ("Jon", "Jonas Berg"), ("Melanie", "Mel Brooks")],
    ids=["two letters", "a common word", "two letters short of the name", "longer than the name"],
)
def test_what_is_no_short_form(bucket, short, full):
    write_extracted(bucket, *daily(f"{full} joined Initech.", f"{short} moved to Boston."))
    assert (short, "lives_in", "Boston") in graph_facts(bucket)


def test_a_short_form_is_never_a_pet_or_a_place(bucket):
    write_extracted(bucket, *daily("Melanie Chen joined Initech.", "My dog Mel loves the park.", "I visited Mel."))
    facts = graph_facts(bucket)
    assert {("User", "owns_pet", "Mel"), ("Mel", "likes", "park")} <= facts
    assert not {f for f in facts if f[0] == "Melanie Chen" and f[1] == "likes"}


# --- extractions of one bucket at once ----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)  # each extraction commits in its own thread and connection
@pytest.mark.parametrize("first", ["first name", "full name"])
def test_extractions_that_run_at_once_resolve_the_first_name_either_way(bucket, first):
    """The worker runs extraction tasks in parallel. The two memories are extracted by two
    threads that wait on the bucket's graph lock together (held here), so both read their
    memories before either writes; whichever takes the lock first, Priya is Priya Natarajan."""
    hired, full = write(bucket, *daily(HIRED, PRIYA), sequence=False)
    order = [hired, full] if first == "first name" else [full, hired]
    reports, errors = [], []

    def extract(memory_id):
        try:
            reports.append(graph_extract_memories(memory_ids=[memory_id]))
        except Exception as exc:  # the assertion below names it
            errors.append(exc)
        finally:
            connections.close_all()

    with transaction.atomic():
        bucket_lock(bucket)
        threads = []
        for memory_id in order:
            thread = threading.Thread(target=in_this_context(extract), args=(memory_id,))
            thread.start()
            threads.append(thread)
            _wait_for_lock_waiters(len(threads))
    for thread in threads:
        thread.join(timeout=120)
    assert not errors and len(reports) == 2, (errors, reports)
    assert ("Marco Rossi", "hired", "Priya Natarajan") in graph_facts(bucket)
    assert "Priya" not in names(bucket)
    assert {hired, full} <= mentioned(bucket, "priya natarajan")


def _wait_for_lock_waiters(count: int, timeout: float = 60) -> None:
    """Poll until ``count`` sessions wait for an advisory lock (the bucket's graph lock)."""

    def waiting() -> bool:
        with connection.cursor() as cur:
            cur.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
            return cur.fetchone()[0] >= count

    wait_for(waiting, timeout=timeout, interval=0.05, what=f"{count} extractions waiting for the graph lock")


# --- descriptions are edges, not entities -------------------------------------------------------------------


def test_a_pet_or_relative_without_a_name_is_an_attribute_of_its_owner(api, bucket):
    barks, beagle, walk = write_extracted(
        bucket, *daily("Lena Ortiz's dog barks at night.", "Lena's dog is a beagle.", "I walked the dog of Lena Ortiz.")
    )
    assert_no_description_entities(bucket)
    facts = graph_facts(bucket)
    assert {("Lena Ortiz", "has", "dog"), ("Lena Ortiz", "dog_is_a", "beagle")} <= facts
    assert {barks, beagle, walk} <= mentioned(bucket, "lena ortiz")
    listed = api.get(f"/api/v1/buckets/{bucket.pk}/entities").json()
    assert not [e["name"] for e in listed["results"] if " of " in e["name"]], listed


def test_a_pet_named_later_takes_what_was_said_of_it(bucket):
    write_extracted(bucket, *daily("Lena Ortiz's dog is a beagle.", "My sister lives in Denver."))
    write_extracted(bucket, *daily("The dog of Lena Ortiz is called Biscuit.", "My sister Anna is a nurse.", start=3))
    facts = graph_facts(bucket)
    assert {("Lena Ortiz", "owns_pet", "Biscuit"), ("Biscuit", "is_a", "beagle"), ("Anna", "lives_in", "Denver"),
            ("User", "sibling_of", "Anna")} <= facts  # fmt: skip
    # The attributes the unnamed ones were are gone with the memories read again.
    assert not {f for f in facts if f[1] in {"has", "dog_is_a", "sister_lives_in"}}
    assert_no_description_entities(bucket)


@pytest.mark.parametrize("named_later", [False, True])
def test_a_relative_of_a_relative_is_an_edge_of_the_one_with_a_name(bucket, named_later):
    """ "my sister's husband": the user has a sister, the sister a husband; no entity is named
    "husband of sister of User", nor is it the object of an edge."""
    if named_later:
        write_extracted(bucket, *daily("My sister's husband is a pilot."))
        write_extracted(bucket, *daily("My sister's husband Tom loves jazz.", start=2))
        facts = graph_facts(bucket)
        assert {("Tom", "is_a", "pilot"), ("Tom", "likes", "jazz"), ("User", "sister_spouse_of", "Tom")} <= facts
        assert not {f for f in facts if f[1] in {"sister_has", "sister_husband_is_a"}}
    else:
        said = ("My sister's husband is a pilot.", "Lena's brother's dog barks at night.", "The wife of my son sings.")
        write_extracted(bucket, *daily(*said))
        facts = graph_facts(bucket)
        assert {("User", "has", "sister"), ("User", "sister_has", "husband"), ("User", "sister_husband_is_a", "pilot"),
                ("Lena", "has", "brother"), ("Lena", "brother_has", "dog"),
                ("User", "son_has", "wife")} <= facts  # fmt: skip
        assert not {f for f in facts if " of " in str(f[2])}, facts
    assert_no_description_entities(bucket)


def test_a_title_is_a_role_and_an_employer_not_an_entity(bucket):
    write_extracted(bucket, *daily(HIRED, "Acme's CEO, Jane Doe, spoke first.", "The CTO of Finlytics hired Omar."))
    facts = graph_facts(bucket)
    expected = {("Jane Doe", "role", "ceo"), ("Jane Doe", "works_at", "Acme"), ("Marco Rossi", "works_at", "Finlytics")}
    assert expected <= facts
    assert not {n for n in names(bucket) if n.lower() in {"cto", "ceo", "the cto", "cto of finlytics"}}
    assert_no_description_entities(bucket)


# --- operators' corrections hold ----------------------------------------------------------------------------


@pytest.fixture
def actor(tenant):
    return Actor.operator(make_operator("names-operator", tenant))


def test_a_split_first_name_is_not_merged_back(bucket, actor):
    [alone] = write_extracted(bucket, *daily("Priya moved to Denver."))
    write_extracted(bucket, *daily(PRIYA, start=2))
    natarajan = Entity.objects.for_bucket(bucket).get(normalized_name="priya natarajan")
    assert alone in mentioned(bucket, "priya natarajan")
    corrections.entity_split(entity=natarajan, name="Priya", memory_ids=[alone], actor=actor)
    write_extracted(bucket, *daily("Priya Natarajan moved to York.", start=3))
    assert mentioned(bucket, "priya") == {alone}
    graph_rebuild(bucket=bucket)
    assert mentioned(bucket, "priya") == {alone}
    assert ("Priya", "lives_in", "Denver") in graph_facts(bucket)


def test_an_operators_merge_of_a_first_name_holds_when_another_full_name_arrives(bucket, actor):
    write_extracted(bucket, *daily("Priya moved to Denver.", "Priya Shah joined Globex.", "Priya Nair joined Acme."))
    priya = Entity.objects.for_bucket(bucket).get(normalized_name="priya")  # ambiguous: two Priyas
    shah = Entity.objects.for_bucket(bucket).get(normalized_name="priya shah")
    corrections.entities_merge(source=priya, target=shah, actor=actor)
    write_extracted(bucket, *daily(PRIYA, "Priya loves jazz.", start=4))
    facts = graph_facts(bucket)
    assert {("Priya Shah", "lives_in", "Denver"), ("Priya Shah", "likes", "jazz")} <= facts
    graph_rebuild(bucket=bucket)
    assert {("Priya Shah", "lives_in", "Denver"), ("Priya Shah", "likes", "jazz")} <= graph_facts(bucket)


def test_graph_mode_answers_about_a_relative_without_a_name(api, bucket):
    ohio, _dad, _jazz, _texas = write_extracted(
        bucket, *daily("My mom lives in Ohio.", "My dad is a carpenter.", "I love jazz.", "Tim's mom lives in Texas.")
    )
    [hit, *_] = graph_search(api, bucket, "Where does my mom live?")
    assert hit["id"] == str(ohio), hit["content"]
    assert hit["explain"]["graph_path"] == "User —mom_lives_in→ Ohio"
    assert graph_search(api, bucket, "Where does Tim's mom live?")[0]["content"] == "Tim's mom lives in Texas."


def test_a_word_capitalised_only_by_opening_its_sentence_is_not_an_entity(bucket):
    """ "Things", "Good", "Summer" open sentences all the time; the small tagger calls them proper
    nouns, and the graph filled with entities named by common words. A name that is also a
    word stays a name where the sentence says what it names."""
    write_extracted(
        bucket,
        *daily(
            "Melanie: Good to hear that, Caroline! Things have been busy here.",
            "Caroline: Things are going well with the kids.",
            "Summer is my favourite season.",
            "Buddy is my dog.",
            "Grace moved to Porto.",
        ),
    )
    assert {"Good", "Things", "Summer"}.isdisjoint(names(bucket))
    assert {"Melanie", "Caroline", "Buddy", "Grace", "Porto"} <= names(bucket)


def test_she_in_a_later_turn_is_the_person_its_sequence_named(bucket):
    """A memory's sequence context (the turns before it) is parsed only for a memory that says
    he, she or they, to find who that is; the others' is not read."""
    write_extracted(
        bucket,
        *daily("I had lunch with Alice Chen today.", "She moved to Denver last year.", "Bob Martinez lives in Oslo."),
        sequence=True,
    )
    facts = graph_facts(bucket)
    assert {("Alice Chen", "lives_in", "Denver"), ("Bob Martinez", "lives_in", "Oslo")} <= facts
