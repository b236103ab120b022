"""Ratings in an export and an import: ``?feedback=true`` (``export_bucket --feedback``) adds one
``{"feedback": {...}}`` line per rating after the memories, naming its memory by the ``id`` of
that memory's line; an import stores each for the memory that line became, once (a file sent
twice does not rate twice), checks each line as the feedback route does (a bad one refuses the
import, nothing written), and holds a token held to agents to its agents' ratings."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from audit.services import Actor
from memories.models import Memory, MemoryVersion, SearchFeedback, VersionKind
from memories.services import memories_erase
from memories.services.buckets import bucket_create
from tests.factories import export_lines, import_lines, make_client, search, write

pytestmark = pytest.mark.django_db


def rate(api, memory_id, signal, query, **body):
    answer = api.post(f"/api/v1/memories/{memory_id}/feedback", {"signal": signal, "query": query, **body},
                      format="json")  # fmt: skip
    assert answer.status_code == 201, answer.content


def ratings_of(bucket) -> list[tuple]:
    """(content of the rated memory, signal, query, agent, run, created_at), in a stable order."""
    rows = SearchFeedback.objects.for_bucket(bucket).select_related("memory")
    return sorted((r.memory.content, r.signal, r.query, r.agent_id, r.run_id, r.created_at) for r in rows)


@pytest.fixture
def rated(api, bucket):
    tea, sister, noise = write(bucket, "Ana likes green tea.", "Ana's sister is called Marta.",
                               "The printer jams on Mondays.", api=api, sequence=False)  # fmt: skip
    rate(api, tea, "useful", "What does Ana drink?", agent_id="planner", run_id="chat-1")
    rate(api, noise, "irrelevant", "What does Ana drink?", agent_id="planner")
    rate(api, sister, "useful", "Who is Marta?")
    return bucket


def test_an_export_lists_the_ratings_after_the_memories_only_when_asked(api, rated):
    assert all("feedback" not in line for line in export_lines(api, rated))
    lines = export_lines(api, rated, feedback="true", blocks="true")
    memories = [line for line in lines if "content" in line]
    ratings = [line["feedback"] for line in lines if "feedback" in line]
    assert len(memories) == 3 and len(ratings) == 3 and "feedback" in lines[-1]
    by_content = {m["id"]: m["content"] for m in memories}
    first = ratings[0]
    assert by_content[first["memory_id"]] == "Ana likes green tea."
    assert (first["signal"], first["query"], first["agent_id"], first["run_id"]) == (
        "useful", "What does Ana drink?", "planner", "chat-1"
    )  # fmt: skip
    assert set(first) == {"id", "memory_id", "signal", "query", "agent_id", "run_id", "created_at"}


def test_ratings_round_trip_into_another_bucket_and_change_its_ranking(api, tenant, rated):
    lines = export_lines(api, rated, feedback="true")
    target = bucket_create(tenant=tenant, name="copy")
    answer = import_lines(api, target, lines)
    assert answer.status_code == 200, answer.content
    report = answer.json()
    assert (report["imported"], report["feedback_imported"], report["feedback_unchanged"]) == (3, 3, 0)
    assert ratings_of(target) == ratings_of(rated)  # the same ratings, at the same times, on the same texts
    # Each is in its memory's history, and lifts the memory as in the source bucket.
    assert MemoryVersion.objects.filter(bucket_id=target.pk, kind=VersionKind.RATED).count() == 3
    hit = search(api, target, "What does Ana drink?", explain=True)["results"][0]
    assert hit["content"] == "Ana likes green tea." and hit["explain"]["feedback"]["ratings"] >= 1


def test_importing_the_same_file_twice_does_not_double_the_ratings(api, tenant, rated):
    lines = export_lines(api, rated, feedback="true")
    target = bucket_create(tenant=tenant, name="copy")
    assert import_lines(api, target, lines).json()["feedback_imported"] == 3
    again = import_lines(api, target, lines).json()
    assert (again["deduplicated"], again["feedback_imported"], again["feedback_unchanged"]) == (3, 0, 3)
    assert SearchFeedback.objects.for_bucket(target).count() == 3
    # Into the bucket they came from: every rating is already there.
    assert import_lines(api, rated, lines).json()["feedback_unchanged"] == 3
    assert SearchFeedback.objects.for_bucket(rated).count() == 3


def test_an_imported_history_keeps_one_rated_version_per_rating_which_an_erasure_finds(api, tenant, rated):
    lines = export_lines(api, rated, feedback="true", versions="true")
    target = bucket_create(tenant=tenant, name="copy")
    assert import_lines(api, target, lines).json()["feedback_imported"] == 3
    rated_versions = MemoryVersion.objects.filter(bucket_id=target.pk, kind=VersionKind.RATED)
    assert rated_versions.count() == 3  # the histories' own, not one more per rating
    new_ids = set(SearchFeedback.objects.for_bucket(target).values_list("id", flat=True))
    assert {v.details["feedback_id"] for v in rated_versions} == new_ids
    # Erasing the agent that rated takes its ratings and the versions that quote them.
    memories_erase(tenant=tenant, fields={"agent_id": "planner"}, bucket=target, actor=Actor.system("test"))
    assert "What does Ana drink?" not in str(list(rated_versions.values_list("details", flat=True)))


@pytest.mark.parametrize(
    "bad, field",
    [
        ({"signal": "great"}, "signal"),
        ({"query": ""}, "query"),
        ({"query": "x" * 4001}, "query"),
        ({"memory_id": "no-such-line"}, "memory_id"),
        ({"agent_id": "a" * 201}, "agent_id"),
        ({"created_at": "yesterday"}, "created_at"),
        ({"extra": 1}, "extra"),
    ],
)
def test_a_bad_rating_line_refuses_the_import_and_writes_nothing(api, tenant, rated, bad, field):
    lines = export_lines(api, rated, feedback="true")
    position = next(n for n, line in enumerate(lines) if "feedback" in line)
    lines[position] = {"feedback": {**lines[position]["feedback"], **bad}}
    target = bucket_create(tenant=tenant, name="copy")
    answer = import_lines(api, target, lines)
    assert answer.status_code == 400, answer.content
    body = answer.json()
    assert body["code"] == "invalid_lines" and body["rejected"][0]["line"] == position + 1
    assert field in json.dumps(body["rejected"][0].get("errors", {})) or field in body["detail"]
    assert not SearchFeedback.objects.for_bucket(target).exists()
    assert not Memory.objects.for_bucket(target).exists()
    # With skip_invalid the other lines go in and the bad one is reported.
    skipped = import_lines(api, target, lines, skip_invalid="true").json()
    assert skipped["rejected_count"] == 1 and skipped["feedback_imported"] == 2


def test_a_token_held_to_an_agent_exports_and_imports_only_its_agents_ratings(api, tenant, bucket):
    alfa_memory, beta_memory = (
        write(bucket, "Alfa's note on the boat.", api=api, agent_id="alfa")[0],
        write(bucket, "Beta's note on the harbour.", api=api, agent_id="beta")[0],
    )
    shared = write(bucket, "The shared tide table.", api=api)[0]
    rate(api, alfa_memory, "useful", "the boat", agent_id="alfa")
    rate(api, beta_memory, "useful", "the harbour", agent_id="beta")
    rate(api, shared, "useful", "the tides", agent_id="beta")  # beta's rating of a shared memory
    rate(api, alfa_memory, "irrelevant", "the harbour", agent_id="beta")  # beta's rating of alfa's memory

    alfa = make_client(tenant, scopes=("read", "write"), agent_ids=["alfa"], include_shared=True)
    lines = export_lines(alfa, bucket, feedback="true")
    ratings = [line["feedback"] for line in lines if "feedback" in line]
    assert [(r["agent_id"], r["query"]) for r in ratings] == [("alfa", "the boat")]
    assert "beta" not in json.dumps(lines).lower()

    # Importing: a rating as another agent is refused like a memory line of another agent.
    target = bucket_create(tenant=tenant, name="alfa-copy")
    forged = [*lines, {"feedback": {**ratings[0], "agent_id": "beta"}}]
    refused = import_lines(alfa, target, forged)
    assert refused.status_code == 400 and refused.json()["rejected"][0]["errors"]["agent_id"]
    assert not SearchFeedback.objects.for_bucket(target).exists()
    assert import_lines(alfa, target, lines).json()["feedback_imported"] == 1
    assert [r[3] for r in ratings_of(target)] == ["alfa"]


def test_a_rating_of_a_text_another_agent_holds_is_skipped_not_given_to_its_memory(api, tenant, bucket):
    theirs = write(bucket, "The harbour closes at nine.", api=api, agent_id="beta")[0]
    alfa = make_client(tenant, scopes=("read", "write"), agent_ids=["alfa"])
    lines = [
        {"id": "m1", "content": "The harbour closes at nine.", "agent_id": "alfa"},
        {"feedback": {"memory_id": "m1", "signal": "useful", "query": "When does the harbour close?"}},
    ]
    report = import_lines(alfa, bucket, lines).json()
    assert report["deduplicated"] == 1 and report["feedback_skipped"] == 1 and report["feedback_imported"] == 0
    assert not SearchFeedback.objects.filter(memory_id=theirs).exists()


def test_another_tenants_export_holds_none_of_the_ratings(api, rated, outsider_api):
    assert outsider_api.get(f"/api/v1/buckets/{rated.pk}/export", {"feedback": "true"}).status_code == 404


def test_the_command_exports_the_ratings(api, rated):
    out = StringIO()
    call_command("export_bucket", str(rated.pk), "--feedback", "--no-progress", stdout=out)
    lines = [json.loads(line) for line in out.getvalue().splitlines() if line.strip()]
    assert sum("feedback" in line for line in lines) == 3
