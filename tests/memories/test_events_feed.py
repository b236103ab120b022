"""The change feed (GET /api/v1/buckets/{id}/events): every kind of change, in order, resumable
from a cursor without gaps or repeats (also under concurrent writers), erased memories without
content, and a 410 for a cursor behind what the retention trim deleted."""

from __future__ import annotations

import random
import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from audit.services import Actor
from engram_site.scoping import in_this_context
from memories import feed_reader
from memories.models import Memory, MemoryEvent
from memories.services import MemoryInput, memories_erase, memories_ingest
from memories.services.buckets import bucket_create
from memories.services.feed_writer import ERASED_AGENT, events_expire, events_trim
from memories.services.supersession import memory_supersede
from tenants import services as tenant_services
from tests.factories import write


def _events(api, bucket, **params) -> dict:
    response = api.get(f"/api/v1/buckets/{bucket.pk}/events", params)
    assert response.status_code == 200, response.content
    return response.json()


@pytest.mark.django_db
def test_feed_records_every_kind_of_change_in_order(api, admin_api, bucket):
    first = write(bucket, "Ana moved to Lisbon in March.", api=api, agent_id="agent-ana")[0]
    second = write(bucket, "Ana moved to Porto in October.", api=api, agent_id="agent-ana")[0]
    assert (
        api.patch(f"/api/v1/memories/{first}", {"content": "Ana moved to Lisbon in May."}, format="json").status_code
        == 200
    )
    memory_supersede(memory_id=first, at=timezone.now(), by=second, previous_by=None)
    assert api.delete(f"/api/v1/memories/{second}").status_code == 204
    assert api.post(f"/api/v1/memories/{second}/restore").status_code == 200
    third = write(bucket, "The lease on the flat ends soon.", api=api)[0]
    Memory.objects.filter(pk=third).update(expires_at=timezone.now() - timedelta(minutes=1))
    assert events_expire() == 1
    assert events_expire() == 0  # once per expiry

    events = _events(api, bucket)["events"]
    assert [(e["kind"], e["memory_id"]) for e in events] == [
        ("created", first), ("created", second), ("updated", first), ("superseded", first),
        ("deleted", second), ("restored", second), ("created", third), ("expired", third),
    ]  # fmt: skip
    assert events[0]["data"] == {"content": "Ana moved to Lisbon in March."}
    assert events[2]["data"] == {"fields": ["content"], "content": "Ana moved to Lisbon in May."}
    assert events[3]["data"]["superseded_by"] == second
    assert events[4]["data"] == {"reason": "deleted"}
    assert events[5]["data"] == {"content": "Ana moved to Porto in October."}
    assert "expires_at" in events[7]["data"]
    assert [e["id"] for e in events] == sorted(e["id"] for e in events)

    # The erasure: an erased event without content, and the content gone from the earlier ones.
    memories_erase(tenant=bucket.tenant, fields={"agent_id": "agent-ana"}, actor=Actor.system("test"))
    after = _events(api, bucket)["events"]
    erased = [e for e in after if e["kind"] == "erased"]
    assert sorted(e["memory_id"] for e in erased) == sorted([first, second])
    assert all(e["data"] == {} for e in erased)
    for event in after:
        if event["memory_id"] in (first, second) and event["kind"] != "erased":
            assert "content" not in event["data"] and event["data"]["erased"] is True
    assert "Ana" not in str(after)
    # The erased agent id is gone from the events too; they stay held to an agent (an empty id no
    # token is held to), so a token held to other agents does not see them (issue 46, item 5).
    agents = set(MemoryEvent.objects.filter(memory_id__in=[first, second]).values_list("agent_id", flat=True))
    assert agents == {ERASED_AGENT}


@pytest.mark.django_db
def test_cursor_resumes_after_the_last_event_read(api, bucket):
    ids = [write(bucket, f"Fact number {n} about the harbour.", api=api)[0] for n in range(5)]
    page = _events(api, bucket, limit=2)
    assert [e["memory_id"] for e in page["events"]] == ids[:2] and page["has_more"] is True
    page = _events(api, bucket, limit=2, after=page["next_cursor"])
    assert [e["memory_id"] for e in page["events"]] == ids[2:4]
    page = _events(api, bucket, limit=2, after=page["next_cursor"])
    assert [e["memory_id"] for e in page["events"]] == ids[4:] and page["has_more"] is False
    last = page["next_cursor"]
    empty = _events(api, bucket, after=last)
    assert empty["events"] == [] and empty["next_cursor"] == last
    newer = write(bucket, "A later fact about the harbour.", api=api)[0]
    assert [e["memory_id"] for e in _events(api, bucket, after=last)["events"]] == [newer]


@pytest.mark.django_db
def test_kind_keeps_only_the_kinds_named_and_its_cursor_resumes_the_filtered_read(api, bucket):
    ids = [write(bucket, f"Fact number {n} about the lighthouse.", api=api)[0] for n in range(4)]
    for memory_id in ids[:3]:
        assert api.delete(f"/api/v1/memories/{memory_id}").status_code == 204
    assert api.put(f"/api/v1/buckets/{bucket.pk}/blocks/persona", {"content": "Terse."}, format="json").status_code in (
        200, 201,
    )  # fmt: skip
    everything = _events(api, bucket)["events"]
    assert [e["kind"] for e in everything] == ["created"] * 4 + ["deleted"] * 3 + ["block_created"]

    deleted = _events(api, bucket, kind="deleted", limit=2)
    assert [(e["kind"], e["memory_id"]) for e in deleted["events"]] == [("deleted", ids[0]), ("deleted", ids[1])]
    assert deleted["has_more"] is True
    rest = _events(api, bucket, kind="deleted", limit=2, after=deleted["next_cursor"])
    assert [(e["kind"], e["memory_id"]) for e in rest["events"]] == [("deleted", ids[2])]
    assert rest["has_more"] is False

    several = _events(api, bucket, kind="block_created, deleted")["events"]
    assert [e["kind"] for e in several] == ["deleted"] * 3 + ["block_created"]
    assert [e["id"] for e in several] == [e["id"] for e in everything if e["kind"] in {"deleted", "block_created"}]
    assert _events(api, bucket, kind="restored")["events"] == []


@pytest.mark.django_db
@pytest.mark.parametrize("kind", ["created,nonsense", "CREATED", ",", ""])
def test_an_unknown_or_empty_kind_answers_400_naming_it(api, bucket, kind):
    write(bucket, "A fact about the lighthouse.", api=api)
    response = api.get(f"/api/v1/buckets/{bucket.pk}/events", {"kind": kind})
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == "invalid" and list(body["errors"]) == ["kind"]
    if kind == "created,nonsense":
        assert "nonsense" in body["detail"]
    assert _events(api, bucket)["events"][0]["kind"] == "created"  # the feed itself is as it was


@pytest.mark.django_db
@pytest.mark.parametrize("params", [{"after": "12"}, {"after": "x.y"}, {"limit": 0}, {"limit": 5000}, {"other": 1}])
def test_bad_feed_parameters_answer_400(api, bucket, params):
    response = api.get(f"/api/v1/buckets/{bucket.pk}/events", params)
    assert response.status_code == 400
    assert response.json()["code"] in {"invalid", "invalid_cursor"}


@pytest.mark.django_db
def test_feed_shows_only_the_bucket_asked_for(api, bucket, tenant):
    other = bucket_create(tenant=tenant, name="elsewhere")
    write(other, "Written in another bucket.", api=api)[0]
    mine = write(bucket, "Written in this bucket.", api=api)[0]
    assert [e["memory_id"] for e in _events(api, bucket)["events"]] == [mine]


@pytest.mark.django_db
def test_cursor_behind_trimmed_events_answers_410(api, bucket, settings):
    settings.ENGRAM_EVENTS_RETENTION_DAYS = 7
    old = [write(bucket, f"An old fact {n}.", api=api)[0] for n in range(3)]
    start = _events(api, bucket, limit=1)["next_cursor"]  # read only the first event
    read_all = _events(api, bucket)["next_cursor"]
    MemoryEvent.objects.filter(memory_id__in=old).update(at=timezone.now() - timedelta(days=8))
    fresh = write(bucket, "A fresh fact.", api=api)[0]
    assert events_trim() == 3

    gone = api.get(f"/api/v1/buckets/{bucket.pk}/events", {"after": start})
    assert gone.status_code == 410 and gone.json()["code"] == "cursor_expired"
    # A reader that had read everything the trim deleted missed nothing.
    assert [e["memory_id"] for e in _events(api, bucket, after=read_all)["events"]] == [fresh]
    # Without a cursor: from the oldest event kept.
    assert [e["memory_id"] for e in _events(api, bucket)["events"]] == [fresh]


@pytest.mark.django_db
def test_an_expiry_moved_later_that_passes_again_is_recorded_again(bucket):
    [result] = memories_ingest(bucket=bucket, items=[MemoryInput(content="The offer ends soon.")])
    Memory.objects.filter(pk=result.id).update(expires_at=timezone.now() - timedelta(minutes=5))
    assert events_expire() == 1
    Memory.objects.filter(pk=result.id).update(expires_at=timezone.now() + timedelta(minutes=5))
    assert events_expire() == 0
    assert events_expire(now=timezone.now() + timedelta(minutes=10)) == 1


# --- concurrent writers -------------------------------------------------------------------------------

WRITERS = 4
WRITES_PER_WRITER = 6


@pytest.mark.django_db(transaction=True)
def test_feed_resumes_without_gaps_or_repeats_under_concurrent_writes():
    """Writers whose transactions take their event ids early and commit late, in a shuffled
    order, while a reader polls with its cursor: the union of the pages is every event exactly
    once. (A reader of ``id > cursor`` loses events here: a later id commits first.)"""
    tenant = tenant_services.tenant_create(name="Feed race")
    bucket = bucket_create(tenant=tenant, name="race")
    done = threading.Event()
    errors: list[BaseException] = []
    read: list[int] = []
    positions: list[tuple[int, int]] = []

    def writer(n: int) -> None:
        rng = random.Random(n)
        try:
            for i in range(WRITES_PER_WRITER):
                with transaction.atomic():
                    # Without the model (vectors left to the sweep): the transactions are what is tested.
                    items = [MemoryInput(content=f"writer {n} fact {i}")]
                    memories_ingest(bucket=bucket, items=items, sequence=False, embed=False)
                    # sleep-ok: jitter, not a synchronisation. Holding the commit a random while
                    # lets a later event commit first, the disorder the feed must survive.
                    time.sleep(rng.uniform(0, 0.04))
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    def reader() -> None:
        cursor = None
        try:
            while True:
                finished = done.is_set()
                page = feed_reader.events_feed(
                    tenant=tenant, bucket_id=bucket.pk, principal=None, after=cursor, limit=3
                )
                read.extend(e.id for e in page.events)
                positions.extend((e.xid, e.id) for e in page.events)
                cursor = page.next_cursor
                if finished and not page.has_more and not page.events:
                    return
                if not page.events:
                    done.wait(0.005)  # a poller's pace; ends at once when the writers are done
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=in_this_context(writer), args=(n,)) for n in range(WRITERS)]
    polling = threading.Thread(target=in_this_context(reader))
    polling.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    polling.join(timeout=60)
    assert not errors, errors
    every = list(MemoryEvent.objects.filter(bucket_id=bucket.pk).order_by("id").values_list("id", flat=True))
    assert len(every) == WRITERS * WRITES_PER_WRITER
    assert len(read) == len(set(read)), "an event was served twice"
    assert sorted(read) == every, "an event was never served"
    assert positions == sorted(positions), "the feed went backwards"
    connection.close()
