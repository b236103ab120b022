"""Erasure (POST /api/v1/erasure, ``manage.py erase``): every memory of an identifier goes, with
everything kept about it, and nothing else does."""

from __future__ import annotations

import io
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from audit.models import AuditEvent
from audit.services import ERASED, Actor, audit_record, audit_scrub
from graph.models import Edge, Entity, Mention, Processed
from graph.services.extraction import graph_extract_memories
from maintenance.models import DuplicateCandidate
from memories.models import DeletedMemory, Memory, MemoryAccess, MemoryVersion
from memories.services import MemoryInput, memories_ingest
from memories.services.buckets import bucket_create
from memories.services.erasure import memories_erase
from memories.services.topics import topic_rename, topics_merge
from sources.models import Source, SourceChunk, SourceChunkMemory
from sources.services.process import source_process
from sources.services.submit import MessageInput, source_submit_conversation, source_submit_document
from tests.factories import make_client, write

pytestmark = pytest.mark.django_db

GONE = "agent-zed"  # the agent whose memories are erased
KEPT = "agent-keep"
NAME = "Zephyrine"  # in every text of the erased agent, and in nothing else


def at(year, month=1):
    return datetime(year, month, 1, tzinfo=UTC)


@dataclass
class World:
    main: object
    second: object
    outside: object  # another tenant's memory of an agent with the same id
    gone: list  # the erased agent's live memory ids
    kept: list  # other agents' memory ids in the tenant
    boston: object  # superseded by the erased agent's "moved to Seattle" until the erasure
    follower: object  # quotes an erased memory as its sequence context
    source: object  # a conversation submitted for the erased agent
    kept_source: object
    deleted: object  # the erased agent's deleted (restorable) memory
    kept_deleted: object
    events: list  # audit events quoting erased contents


@pytest.fixture
def world(tenant, other_tenant) -> World:
    main = bucket_create(tenant=tenant, name="main")
    second = bucket_create(tenant=tenant, name="second")
    elsewhere = bucket_create(tenant=other_tenant, name="main")

    boston, initech = write(
        main,
        {"content": "Alice lives in Boston.", "created_at": at(2021, 3)},
        {"content": "Initech is headquartered in Austin.", "created_at": at(2022)},
        agent_id=KEPT,
        sequence=False,
    )
    seattle, sister = write(
        main,
        {"content": "Alice moved to Seattle.", "created_at": at(2024, 2)},
        {"content": f"My sister {NAME} Quill works at Initech.", "created_at": at(2024, 3), "attributed_to": "user"},
        agent_id=GONE,
        sequence=False,
    )
    # One run, two agents: the second memory's context is the first one's text.
    sandwich = memories_ingest(
        bucket=main,
        items=[
            MemoryInput(content=f"{NAME} Quill adores marmalade sandwiches.", agent_id=GONE, run_id="shared"),
            MemoryInput(content="The sandwich preference was noted by the assistant.", agent_id=KEPT, run_id="shared"),
        ],
    )
    theremin = write(second, f"{NAME} Quill plays the theremin on Sundays.", agent_id=GONE, sequence=False)[0]
    garden = write(second, "The garden needs watering on Fridays.", agent_id=KEPT, sequence=False)[0]
    outside = write(elsewhere, f"{NAME} Quill sails to Lisbon.", agent_id=GONE, sequence=False)[0]

    source = source_submit_conversation(
        bucket=main, agent_id=GONE, title="moving",
        messages=[
            MessageInput(role="user", content=f"My friend {NAME} Quill is moving to Lisbon next month."),
            MessageInput(role="assistant", content=f"Lisbon is lovely in spring; {NAME} will enjoy the trams."),
        ],
    ).source  # fmt: skip
    assert source_process(source_id=source.pk).status == "done"
    kept_source = source_submit_document(bucket=main, title="dog", text="Biscuit the dog loves the beach.").source
    assert source_process(source_id=kept_source.pk).status == "done"

    distilled = SourceChunkMemory.objects.filter(source=source).values_list("memory_id", flat=True)
    gone = [seattle, sister, sandwich[0].id, theremin, *distilled]
    assert Memory.objects.filter(pk__in=gone, agent_id=GONE).count() == len(gone) > 4
    kept = [boston, initech, sandwich[1].id, garden,
            *SourceChunkMemory.objects.filter(source=kept_source).values_list("memory_id", flat=True)]  # fmt: skip
    everything = Memory.objects.filter(tenant_id=tenant.pk).values_list("pk", flat=True)
    assert not graph_extract_memories(memory_ids=list(everything)).errors

    deleted = DeletedMemory.objects.create(
        id=uuid.uuid4(), tenant_id=tenant.pk, bucket_id=second.pk,
        content=f"{NAME} Quill once lived in Oslo.",
        row={"agent_id": GONE, "run_id": None, "content": f"{NAME} Quill once lived in Oslo.", "sequence_id": None},
    )  # fmt: skip
    kept_deleted = DeletedMemory.objects.create(
        id=uuid.uuid4(), tenant_id=tenant.pk, bucket_id=second.pk, content="The shed was painted green.",
        row={"agent_id": KEPT, "content": "The shed was painted green."},
    )  # fmt: skip
    for memory_id, old in ((theremin, f"{NAME} Quill played the cello."), (garden, "The garden needs water.")):
        MemoryVersion.objects.create(
            memory_id=memory_id, tenant_id=tenant.pk, bucket_id=second.pk, kind="edited", previous={"content": old},
            actor_kind="token",
        )  # fmt: skip
    MemoryAccess.objects.create(memory_id=theremin, accessed_at=timezone.now())
    MemoryAccess.objects.create(memory_id=garden, accessed_at=timezone.now())
    a, b = sorted([theremin, garden])
    DuplicateCandidate.objects.create(tenant_id=tenant.pk, bucket_id=second.pk, memory_a_id=a, memory_b_id=b,
                                      similarity=0.97)  # fmt: skip
    operator = Actor.system("console")
    sister_text = Memory.objects.get(pk=sister).content
    events = [
        # An operator's delete quotes the first contents; a duplicate merge the removed one.
        audit_record(
            actor=operator, action="memory.delete", tenant=tenant, object_type="memory",
            object_ids=[sister, initech, deleted.pk],
            details={"contents": [sister_text[:200], "Initech is headquartered in Austin.", deleted.content]},
        ),
        audit_record(
            actor=operator, action="duplicate.merge", tenant=tenant, object_type="memory",
            object_ids=[garden, theremin],
            details={"removed": {"content": f"{NAME} Quill plays the theremin on Sundays."}},
        ),
    ]  # fmt: skip
    assert Entity.objects.filter(tenant_id=tenant.pk, normalized_name__contains=NAME.lower()).exists()
    assert Memory.objects.get(pk=boston).superseded_by == seattle
    follower = Memory.objects.get(pk=sandwich[1].id)
    assert follower.context_text and NAME in follower.context_text
    return World(main=main, second=second, outside=outside, gone=gone, kept=kept, boston=boston,
                 follower=follower.pk, source=source, kept_source=kept_source, deleted=deleted,
                 kept_deleted=kept_deleted, events=events)  # fmt: skip


TABLES = ["memories", "memories_deleted", "memory_versions", "memory_access", "graph_entities", "graph_mentions",
          "graph_edges", "graph_processed", "sources", "source_chunks", "source_chunk_memories",
          "duplicate_candidates", "conflict_candidates", "audit_events"]  # fmt: skip


def snapshot() -> dict:
    state = {}
    with connection.cursor() as cur:
        for table in TABLES:
            cur.execute(f"SELECT count(*), coalesce(md5(string_agg(md5(t::text), ',' ORDER BY md5(t::text))), '') "
                        f"FROM {table} t")  # fmt: skip
            state[table] = cur.fetchone()
    return state


def erase(client, **body):
    return client.post("/api/v1/erasure", body, format="json")


def test_an_erasure_leaves_nothing_of_the_agent_anywhere_and_touches_nothing_else(
    world, tenant, admin_api, django_user_model, client
):
    api = make_client(tenant, scopes=("read",))
    # The edit recorded above, and what the graph's supersession recorded.
    versions = MemoryVersion.objects.filter(memory_id__in=world.gone).count()
    assert versions >= 1
    before = snapshot()
    preview = erase(admin_api, agent_id=GONE, dry_run=True)
    assert preview.status_code == 200, preview.content
    assert snapshot() == before, "a dry run changed the database"

    done = erase(admin_api, agent_id=GONE)
    assert done.status_code == 200, done.content
    counts = done.json()
    assert {**preview.json(), "dry_run": False} == counts
    assert counts["dry_run"] is False and counts["bucket_id"] is None
    assert counts["memories"] == len(world.gone)
    assert (counts["deleted_memories"], counts["versions"], counts["access_times"]) == (1, versions, 1)
    assert (counts["contexts_cleared"], counts["duplicate_candidates"], counts["sources"]) == (1, 1, 1)
    assert counts["source_chunks"] == 2 and counts["audit_events_scrubbed"] == 2
    assert counts["graph_mentions"] and counts["graph_edges"] and counts["graph_entities"]

    # The API: no memory, list, search, graph or source shows any of it.
    for memory_id in world.gone:
        assert api.get(f"/api/v1/memories/{memory_id}").status_code == 404
    for bucket in (world.main, world.second):
        listed = api.get(f"/api/v1/buckets/{bucket.pk}/memories", {"page_size": 500})
        assert listed.status_code == 200 and NAME not in listed.content.decode()
        assert api.get(f"/api/v1/buckets/{bucket.pk}/memories", {"agent_id": GONE}).json()["results"] == []
        for mode in ("hybrid", "keyword", "vector", "graph"):
            query = {"query": f"{NAME} Quill theremin sandwiches Seattle Lisbon", "mode": mode, "explain": True}
            found = api.post(f"/api/v1/buckets/{bucket.pk}/search", query, format="json")
            assert found.status_code == 200 and NAME not in found.content.decode(), mode
            assert not {r["id"] for r in found.json()["results"]} & {str(i) for i in world.gone}, mode
        for path in ("entities", "edges", "sources"):
            page = api.get(f"/api/v1/buckets/{bucket.pk}/{path}", {"limit": 500} if path != "sources" else {})
            assert page.status_code == 200 and NAME not in page.content.decode(), path
    assert api.get(f"/api/v1/buckets/{world.main.pk}/entities", {"q": NAME.lower()}).json()["results"] == []
    assert "Seattle" not in api.get(f"/api/v1/buckets/{world.main.pk}/edges").content.decode()
    assert api.get(f"/api/v1/sources/{world.source.pk}").status_code == 404

    # The tables.
    assert not Memory.objects.filter(tenant_id=tenant.pk, agent_id=GONE).exists()
    assert not Memory.objects.filter(tenant_id=tenant.pk, content__contains=NAME).exists()
    assert not DeletedMemory.objects.filter(pk=world.deleted.pk).exists()
    assert not MemoryVersion.objects.filter(memory_id__in=world.gone).exists()
    assert not MemoryAccess.objects.filter(memory_id__in=world.gone).exists()
    assert not Mention.objects.filter(memory_id__in=world.gone).exists()
    assert not Edge.objects.filter(source_memory_id__in=world.gone).exists()
    assert not Processed.objects.filter(memory_id__in=world.gone).exists()
    assert not Entity.objects.filter(tenant_id=tenant.pk, normalized_name__contains=NAME.lower()).exists()
    assert not Entity.objects.filter(tenant_id=tenant.pk, normalized_name="seattle").exists()
    assert not Source.objects.filter(pk=world.source.pk).exists()
    assert not SourceChunk.objects.filter(source_id=world.source.pk).exists()
    assert not DuplicateCandidate.objects.filter(tenant_id=tenant.pk).exists()
    for event in AuditEvent.objects.filter(tenant_id=tenant.pk):
        assert NAME not in str(event.details) and GONE not in str(event.details), event.action
    delete_event = AuditEvent.objects.get(pk=world.events[0].pk)
    assert delete_event.details["contents"] == [ERASED, "Initech is headquartered in Austin.", ERASED]

    # What others wrote is all there, and as it was before the erased agent touched it.
    assert Memory.objects.filter(pk__in=world.kept).count() == len(world.kept)
    assert Memory.objects.filter(pk=world.outside).exists()
    assert DeletedMemory.objects.filter(pk=world.kept_deleted.pk).exists()
    assert MemoryVersion.objects.filter(memory_id__in=world.kept, kind="edited").count() == 1
    assert MemoryAccess.objects.filter(memory_id__in=world.kept).count() == 1
    assert Source.objects.filter(pk=world.kept_source.pk).exists()
    assert Entity.objects.filter(tenant_id=tenant.pk, normalized_name__in=["alice", "initech", "boston"]).count() == 3
    boston = Memory.objects.get(pk=world.boston)
    assert boston.superseded_at is None and boston.superseded_by is None
    assert Edge.objects.get(source_memory_id=world.boston, predicate="lives_in").valid_to is None
    follower = api.get(f"/api/v1/memories/{world.follower}").json()
    assert follower["context"] is None and follower["content"].startswith("The sandwich preference")

    # One event records the erasure: counts and the field's name, not its value.
    [event] = AuditEvent.objects.filter(action="memory.erase")
    assert event.tenant_id == tenant.pk and event.actor_id == str(admin_api.token.pk)
    assert event.details == {"fields": ["agent_id"], "bucket_id": None, "counts": {
        k: v for k, v in counts.items() if k not in ("dry_run", "bucket_id")}}  # fmt: skip
    assert event.object_count == len(world.gone) + 1 and GONE not in str(event.object_ids)

    # The console: its memory search finds nothing, its audit log quotes nothing.
    client.force_login(django_user_model.objects.create_superuser("root", password="x"))
    page = client.get("/admin/memories/memory/", {"q": NAME})
    assert page.status_code == 200 and [m.pk for m in page.context["cl"].result_list] == [world.outside]
    log = client.get(f"/admin/audit/auditevent/{world.events[0].pk}/change/")
    assert log.status_code == 200 and NAME not in log.content.decode()


def test_a_bucket_narrows_the_erasure_to_it(world, tenant, admin_api):
    counts = erase(admin_api, agent_id=GONE, bucket_id=str(world.second.pk)).json()
    assert counts["bucket_id"] == str(world.second.pk)
    assert (counts["memories"], counts["deleted_memories"], counts["sources"]) == (1, 1, 0)
    assert Memory.objects.filter(bucket_id=world.main.pk, agent_id=GONE).count() == len(world.gone) - 1
    assert Source.objects.filter(pk=world.source.pk).exists()


def test_a_token_restricted_to_a_bucket_erases_in_that_bucket_only(world, tenant):
    restricted = make_client(tenant, scopes=("admin",), bucket=world.second)
    assert erase(restricted, agent_id=GONE, bucket_id=str(world.main.pk)).status_code == 404
    counts = erase(restricted, agent_id=GONE).json()
    assert counts["bucket_id"] == str(world.second.pk) and counts["memories"] == 1
    assert Memory.objects.filter(bucket_id=world.main.pk, agent_id=GONE).exists()


def test_all_given_fields_must_match(tenant, bucket, admin_api):
    ids = [r.id for r in memories_ingest(bucket=bucket, items=[
        MemoryInput(content="I like tea.", agent_id="a", run_id="r1", attributed_to="user"),
        MemoryInput(content="I like coffee.", agent_id="a", run_id="r2", attributed_to="user"),
        MemoryInput(content="Noted.", agent_id="a", run_id="r1", attributed_to="assistant"),
    ], sequence=False)]  # fmt: skip
    counts = erase(admin_api, agent_id="a", run_id="r1", attributed_to="user").json()
    assert counts["memories"] == 1
    assert list(Memory.objects.filter(tenant_id=tenant.pk).order_by("content").values_list("pk", flat=True)) == [
        ids[1], ids[2]]  # fmt: skip


def test_a_source_submitted_for_the_agent_goes_even_before_it_is_processed(tenant, bucket, admin_api):
    pending = source_submit_conversation(
        bucket=bucket, messages=[MessageInput(role="user", content="Call me Zed.", name="zed-42")]
    ).source
    other = source_submit_conversation(
        bucket=bucket, messages=[MessageInput(role="user", content="Call me Al.")]
    ).source
    counts = erase(admin_api, source_actor_id="zed-42").json()
    assert (counts["memories"], counts["sources"], counts["source_chunks"]) == (0, 1, 1)
    assert list(Source.objects.values_list("pk", flat=True)) == [other.pk] and pending.pk != other.pk


def test_refused_requests_change_nothing(tenant, bucket, admin_api, outsider_api, other_bucket):
    write(bucket, "I like tea.", agent_id=GONE, sequence=False)
    before = snapshot()
    for scopes in (("read",), ("write",), ("read", "write")):
        assert erase(make_client(tenant, scopes=scopes), agent_id=GONE).status_code == 403
    for body in ({}, {"dry_run": True}, {"bucket_id": str(bucket.pk)}, {"agent_id": ""}, {"agent_id": "   "},
                 {"agent_id": 5}, {"agent_id": None}, {"attributed_to": "robot"}, {"agent_id": GONE, "tenant": "x"},
                 {"agent_id": GONE, "dry_run": "yes"}, {"agent_id": "x" * 201}):  # fmt: skip
        response = erase(admin_api, **body)
        assert response.status_code == 400 and response.json()["code"] == "invalid", body
    # Another tenant's bucket, a malformed id: 404, like a missing bucket.
    for bucket_id in (str(other_bucket.pk), "not-an-id", str(bucket.pk).upper()):
        assert erase(admin_api, agent_id=GONE, bucket_id=bucket_id).status_code == 404
    assert erase(outsider_api, agent_id=GONE, bucket_id=str(bucket.pk)).status_code == 404
    assert snapshot() == before
    # The outsider's tenant-wide erasure is its own tenant's: nothing of this one goes.
    assert erase(outsider_api, agent_id=GONE).json()["memories"] == 0
    assert Memory.objects.filter(tenant_id=tenant.pk, agent_id=GONE).count() == 1


def test_the_erase_command_counts_refuses_and_erases(world, tenant):
    def run(*args):
        out = io.StringIO()
        call_command("erase", "--tenant", tenant.slug, "--agent-id", GONE, *args, stdout=out)
        return out.getvalue()

    before = snapshot()
    with pytest.raises(CommandError, match="--yes"):
        run()
    counted = run("--dry-run")
    assert "Would erase" in counted and f"memories: {len(world.gone)}" in counted
    assert snapshot() == before
    with pytest.raises(CommandError, match="No tenant"):
        call_command("erase", "--tenant", "nobody", "--agent-id", GONE, "--yes")
    out = io.StringIO()
    # A bucket is found by its name regardless of case, as names are unique (tenants.models.Bucket).
    call_command("erase", "--tenant", tenant.name, "--bucket", "SECOND", "--agent-id", GONE, "--yes", stdout=out)
    assert "Erased" in out.getvalue() and "(bucket second)" in out.getvalue() and "memories: 1" in out.getvalue()
    assert f"memories: {len(world.gone) - 1}" in run("--yes")
    assert not Memory.objects.filter(tenant_id=tenant.pk, agent_id=GONE).exists()
    assert Memory.objects.filter(pk=world.outside).exists()
    actions = list(AuditEvent.objects.filter(action="memory.erase").values_list("actor_label", flat=True))
    assert actions == ["manage.py erase", "manage.py erase"]


def test_an_erasure_scrubs_topic_names_only_its_memories_carried_from_topic_renames(tenant, bucket):
    gone = write(bucket, f"{NAME} Quill plays the theremin.", f"{NAME} Quill gardens on Sundays.", agent_id=GONE)
    kept = write(bucket, "The team meets on Mondays.", "The garden needs watering.", agent_id=KEPT)
    for memory_id, topic in zip([*gone, *kept], ["zephyrine music", "hobbies", "work", "hobbies"], strict=True):
        Memory.objects.filter(pk=memory_id).update(classified_topic=topic)
    actor = Actor.system("console")
    topic_rename(bucket=bucket, topic="zephyrine music", new_name="Zephyrine's theremin", actor=actor)
    topic_rename(bucket=bucket, topic="hobbies", new_name="pastimes", actor=actor)
    topics_merge(bucket=bucket, topics=["work", "Zephyrine's theremin"], into="misc", actor=actor)
    memories_erase(tenant=tenant, fields={"agent_id": GONE}, actor=actor)
    renames = {e.details["to"]: e.details for e in AuditEvent.objects.filter(action="topic.rename")}
    # Names no memory left carries are scrubbed; a topic other memories still carry is not theirs alone.
    assert renames[ERASED]["from"] == ERASED
    assert renames["pastimes"]["from"] == "hobbies"
    merge = AuditEvent.objects.get(action="topic.merge").details
    assert merge["from"] == ["work", ERASED] and merge["to"] == "misc"
    for event in AuditEvent.objects.filter(tenant_id=tenant.pk):
        assert "zephyrine" not in str(event.details).lower(), event.action


def test_the_audit_scrub_replaces_whole_and_cut_quotes_only(tenant):
    text = "Zephyrine Quill keeps bees on the roof of the old library in town."
    event = audit_record(
        actor=Actor.system("t"), action="memory.delete", tenant=tenant, object_type="memory", object_ids=["m1"],
        details={"contents": [text, text[:40], text[:10], "user"], "nested": {"removed": [text]}, "count": 3},
    )  # fmt: skip
    untouched = audit_record(
        actor=Actor.system("t"), action="memory.delete", tenant=tenant, object_type="memory", object_ids=["m2"],
        details={"contents": [text]},
    )  # fmt: skip
    assert audit_scrub(tenant=tenant, object_ids=["m1"], texts=[text, "user x"]) == 1
    event.refresh_from_db()
    assert event.details == {"contents": [ERASED, ERASED, text[:10], "user"], "nested": {"removed": [ERASED]},
                             "count": 3}  # fmt: skip
    untouched.refresh_from_db()
    assert untouched.details == {"contents": [text]}


def _event_memories(client, bucket) -> dict:
    """{memory id: [event kinds]} of the bucket's feed as ``client`` reads it."""
    response = client.get(f"/api/v1/buckets/{bucket.pk}/events", {"limit": 500})
    assert response.status_code == 200, response.content
    seen: dict = {}
    for event in response.json()["events"]:
        seen.setdefault(event["memory_id"], []).append(event["kind"])
    return seen


def test_an_erased_agents_feed_events_stay_out_of_other_agents_sight(tenant, bucket, admin_api):
    """Issue 46, item 5: erasing an agent set the agent of its memories' events to null and
    wrote the erased events without one, so a token held to another agent that may read shared
    memories saw their ids, kinds, changed fields and times in the feed."""
    [gone] = write(bucket, "Erase-me keeps a diary.", agent_id="erase-me", sequence=False)
    [kept] = write(bucket, "Alfa likes tea.", agent_id="alfa", sequence=False)
    [shared] = write(bucket, "The office opens at nine.", sequence=False)
    assert admin_api.patch(f"/api/v1/memories/{gone}", {"importance": 0.9}, format="json").status_code == 200
    other = make_client(tenant, scopes=("read",), agent_ids=["alfa"], include_shared=True)
    whole = make_client(tenant, scopes=("read",))
    assert str(gone) not in _event_memories(other, bucket)

    assert erase(admin_api, agent_id="erase-me").status_code == 200
    seen = _event_memories(other, bucket)
    assert str(gone) not in seen
    assert set(seen) == {str(kept), str(shared)}
    # A reader of the whole bucket learns of the erasure (a replica must drop the memory).
    assert _event_memories(whole, bucket)[str(gone)] == ["created", "updated", "erased"]


def test_erasing_by_run_keeps_the_events_held_to_their_agent(tenant, bucket, admin_api):
    [memory] = [r.id for r in memories_ingest(
        bucket=bucket, items=[MemoryInput(content="Alfa ran a survey.", agent_id="alfa", run_id="run-9")]
    )]  # fmt: skip
    alfa = make_client(tenant, scopes=("read",), agent_ids=["alfa"])
    beta = make_client(tenant, scopes=("read",), agent_ids=["beta"], include_shared=True)
    assert erase(admin_api, run_id="run-9").status_code == 200
    assert _event_memories(alfa, bucket) == {str(memory): ["created", "erased"]}
    assert str(memory) not in _event_memories(beta, bucket)
