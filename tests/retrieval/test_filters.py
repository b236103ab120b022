"""One filter definition (memories/filters.py): its SQL form (the search's signals) and its
ORM form (the listings) select the same rows; the API input is derived from it."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from memories.apis import search as apis
from memories.filters import MemoryFilters
from memories.models import Memory
from memories.serializers import SearchFiltersIn
from memories.services import MemoryInput, memories_ingest

pytestmark = pytest.mark.django_db

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def day(n: int) -> datetime:
    return T0 + timedelta(days=n)


METADATA = [
    {"project": "apollo", "sprint": 3},
    {"project": "zeus"},
    {},
    {"project": "apollo", "labels": ["urgent", "ui"], "owner": {"name": "Ana", "team": "core"}},
]


@pytest.fixture
def rows(bucket, other_bucket):
    """Twelve memories varying every filtered column, and one of another tenant's that
    matches every filter but the bucket."""
    items = [
        MemoryInput(
            content=f"Note {i} about the garden",
            agent_id=("chef", "buyer", None)[i % 3],
            run_id=("r1", "r2")[i % 2],
            attributed_to=("user", "assistant", None)[i % 3],
            hint_tags=[["food"], ["food", "morning"], ["places"], []][i % 4],
            created_at=day(10 * i),
            metadata=METADATA[i % 4],
        )
        for i in range(12)
    ]
    ids = [r.id for r in memories_ingest(bucket=bucket, items=items)]
    for i, memory_id in enumerate(ids):
        Memory.objects.filter(pk=memory_id).update(
            classified_scope=("specific", "general", None)[i % 3],
            classified_topic=("work", "home")[i % 2] if i % 5 else None,
            superseded_at=day(10 * i + 15) if i % 4 == 1 else None,
        )
    memories_ingest(
        bucket=other_bucket,
        items=[
            MemoryInput(
                content="Outsider note",
                agent_id="chef",
                run_id="r1",
                hint_tags=["food"],
                created_at=day(0),
                metadata=METADATA[3],
            )  # fmt: skip
        ],
    )
    return ids


FILTERS = [
    MemoryFilters(),
    MemoryFilters(agent_id="chef"),
    MemoryFilters(agent_id="chef", run_id="r2"),
    MemoryFilters(attributed_to="assistant", classified_scope="general"),
    MemoryFilters(classified_topic="home"),
    MemoryFilters(hint_tags=["food"]),
    MemoryFilters(hint_tags=["food", "morning"], run_id="r2"),
    MemoryFilters(hint_tags=[]),  # no tags given: no filter
    MemoryFilters(created_after=day(30), created_before=day(80)),
    MemoryFilters(created_after=day(30), agent_id="buyer"),
    MemoryFilters(as_of=day(55)),
    MemoryFilters(include_superseded=False),
    MemoryFilters(include_superseded=False, reference_time=day(40)),
    MemoryFilters(include_superseded=False, as_of=day(100), reference_time=day(40)),
    MemoryFilters(agent_id="nobody"),
    MemoryFilters(metadata={"project": "apollo"}),
    MemoryFilters(metadata={"owner": {"team": "core"}}),
    MemoryFilters(metadata={"labels": ["ui"]}),
    MemoryFilters(metadata={"project": "apollo", "sprint": 3}, run_id="r1"),
    MemoryFilters(metadata={}),  # an empty object: no filter
    MemoryFilters(metadata={"project": "hermes"}),
]


def sql_ids(bucket, filters: MemoryFilters) -> set:
    where, params = filters.sql(bucket)
    with connection.cursor() as cur:
        cur.execute(f"SELECT m.id FROM memories m WHERE {where}", params)
        return {row[0] for row in cur.fetchall()}


def orm_ids(bucket, filters: MemoryFilters) -> set:
    return set(Memory.objects.for_bucket(bucket).filter(filters.q()).values_list("id", flat=True))


@pytest.mark.parametrize("filters", FILTERS, ids=lambda f: repr(f)[len("MemoryFilters") :])
def test_the_sql_and_orm_forms_of_a_filter_select_the_same_rows(rows, bucket, filters):
    assert sql_ids(bucket, filters) == orm_ids(bucket, filters)


def test_the_filters_select_what_they_say(rows, bucket):
    """The comparison above cannot pass by both forms selecting everything (or nothing)."""
    index = {memory_id: i for i, memory_id in enumerate(rows)}

    def selected(filters):
        found = sql_ids(bucket, filters)
        assert found == orm_ids(bucket, filters)
        return sorted(index[memory_id] for memory_id in found)

    assert selected(MemoryFilters()) == list(range(12))  # not the other tenant's
    assert selected(MemoryFilters(agent_id="chef", run_id="r2")) == [3, 9]
    assert selected(MemoryFilters(hint_tags=["food", "morning"])) == [1, 5, 9]
    assert selected(MemoryFilters(created_after=day(30), created_before=day(80))) == [3, 4, 5, 6, 7]
    assert selected(MemoryFilters(as_of=day(55))) == [0, 1, 2, 3, 4, 5]
    # Superseded 15 days after it was written: 1 (day 25), 5 (65), 9 (105).
    assert selected(MemoryFilters(include_superseded=False)) == [0, 2, 3, 4, 6, 7, 8, 10, 11]
    later = MemoryFilters(include_superseded=False, reference_time=day(40))  # 5 and 9 were current then
    assert selected(later) == [i for i in range(12) if i != 1]
    past = MemoryFilters(include_superseded=False, as_of=day(100), reference_time=day(40))  # as_of decides
    assert selected(past) == [0, 2, 3, 4, 6, 7, 8, 9, 10]
    # metadata: containment — every key given with its value; nested objects and arrays contain.
    assert selected(MemoryFilters(metadata={"project": "apollo"})) == [0, 3, 4, 7, 8, 11]
    assert selected(MemoryFilters(metadata={"owner": {"team": "core"}})) == [3, 7, 11]
    assert selected(MemoryFilters(metadata={"labels": ["ui"]})) == [3, 7, 11]
    assert selected(MemoryFilters(metadata={"project": "apollo", "sprint": 3})) == [0, 4, 8]
    assert selected(MemoryFilters(metadata={"project": "apollo", "sprint": "3"})) == []  # a string is not 3
    assert selected(MemoryFilters(metadata={})) == list(range(12))


def test_every_pair_of_filters_selects_the_same_rows_in_both_forms(rows, bucket):
    single = [f for f in FILTERS if f != MemoryFilters()]
    for a, b in itertools.combinations(single, 2):
        merged = MemoryFilters(**{**_given(a), **_given(b)})
        assert sql_ids(bucket, merged) == orm_ids(bucket, merged), merged


def _given(filters: MemoryFilters) -> dict:
    defaults = MemoryFilters()
    return {name: value for name, value in vars(filters).items() if value != getattr(defaults, name)}


def test_the_search_endpoint_reads_its_filters_through_the_derived_input():
    """memories/serializers.py derives SearchFiltersIn from the filters' definition, and the
    search endpoint uses that one: every valid input is a filter, and limits hold."""
    assert apis.SearchFiltersIn is SearchFiltersIn
    valid = [
        {"hint_tags": ["a", "b", "a"], "agent_id": "x", "as_of": "2025-01-01T00:00:00Z"},
        {"attributed_to": "assistant"},
    ]
    for payload in valid:
        derived = SearchFiltersIn(data=payload)
        assert derived.is_valid(), derived.errors
        MemoryFilters(**derived.validated_data)  # every input field is a filter
    tags = SearchFiltersIn(data=valid[0])
    assert tags.is_valid() and tags.validated_data["hint_tags"] == ["a", "b"]  # de-duplicated, order kept
    for invalid in (
        {"attributed_to": "robot"}, {"include_superseded": "yes"}, {"agent_id": "x" * 201}, {"unknown": 1},
        {"metadata": ["project"]}, {"metadata": "project"}, {"metadata": {"_engram_links": 1}},
        {"metadata": {"a": "x\x00"}},
    ):  # fmt: skip
        assert not SearchFiltersIn(data=invalid).is_valid(), invalid


def test_a_search_and_a_listing_filter_by_metadata_through_the_api(api, bucket, outsider_api, other_bucket):
    from tests.factories import search, write

    write(bucket, {"content": "The Apollo launch slipped to May.", "metadata": {"project": "apollo", "sprint": 3}},
          {"content": "The Zeus launch slipped to June.", "metadata": {"project": "zeus"}}, api=api)  # fmt: skip
    write(
        other_bucket, {"content": "Another team's Apollo launch.", "metadata": {"project": "apollo"}}, api=outsider_api
    )
    found = search(api, bucket, "when is the launch", filters={"metadata": {"project": "apollo"}})
    assert [hit["content"] for hit in found["results"]] == ["The Apollo launch slipped to May."]
    listed = api.get(f"/api/v1/buckets/{bucket.pk}/memories", {"metadata": '{"project": "zeus"}'})
    assert listed.status_code == 200, listed.content
    assert [m["content"] for m in listed.json()["results"]] == ["The Zeus launch slipped to June."]


@pytest.mark.parametrize("value", ['{"project": ', '["apollo"]', '"apollo"', '{"_engram_x": 1}'])
def test_a_listing_refuses_a_metadata_filter_that_is_not_a_json_object(api, bucket, value):
    answer = api.get(f"/api/v1/buckets/{bucket.pk}/memories", {"metadata": value})
    assert answer.status_code == 400, answer.content
    assert "metadata" in answer.content.decode()


def test_a_search_refuses_a_metadata_filter_that_is_not_an_object(api, bucket):
    answer = api.post(
        f"/api/v1/buckets/{bucket.pk}/search", {"query": "launch", "filters": {"metadata": ["apollo"]}}, format="json"
    )
    assert answer.status_code == 400, answer.content


def test_the_metadata_filter_can_be_answered_by_its_partial_index(rows, bucket):
    """The SQL form repeats "metadata <> '{}'" so that idx_memories_metadata (rows with metadata
    only) answers it; without that half the planner could not use the partial index."""
    from memories.filters import in_buckets

    where, params = MemoryFilters(metadata={"project": "apollo"}).sql(bucket)
    scope, scope_params = in_buckets(bucket, "m")
    prefix = " AND ".join(scope) + " AND "
    assert where.startswith(prefix)
    # The filter's own clauses, without the bucket's (whose index a planner prefers on a small table).
    where, params = where[len(prefix) :], params[len(scope_params) :]
    with connection.cursor() as cur:
        cur.execute("SET LOCAL enable_seqscan = off")
        cur.execute(f"EXPLAIN SELECT m.id FROM memories m WHERE {where}", params)
        plan = "\n".join(row[0] for row in cur.fetchall())
    assert "idx_memories_metadata" in plan, plan
