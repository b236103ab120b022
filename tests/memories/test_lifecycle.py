"""A memory's life: history, restorable deletes, expiry, importance, the purge job."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from audit.models import AuditEvent
from audit.services import Actor
from memories.models import DeletedMemory, Memory, MemoryVersion
from memories.retrieval import MODES
from memories.services import memories_purge
from memories.services.buckets import bucket_create
from memories.services.merge import memories_absorb
from memories.services.supersession import memory_supersede
from memories.services.topics import topic_rename
from tests.factories import make_client, write

pytestmark = pytest.mark.django_db


def history(api, memory_id):
    response = api.get(f"/api/v1/memories/{memory_id}/history")
    assert response.status_code == 200, response.content
    return response.json()


def search(api, bucket, query, mode="hybrid", **body):
    response = api.post(f"/api/v1/buckets/{bucket.pk}/search", {"query": query, "mode": mode, **body}, format="json")
    assert response.status_code == 200, response.content
    return [hit["id"] for hit in response.json()["results"]]


def listed(api, bucket, query=""):
    response = api.get(f"/api/v1/buckets/{bucket.pk}/memories{query}")
    assert response.status_code == 200, response.content
    return [m["id"] for m in response.json()["results"]]


# --- history -------------------------------------------------------------------------------


def test_an_edit_records_the_previous_values_and_the_token(api, bucket):
    [memory_id] = write(bucket, {"content": "I drive a red Toyota", "hint_tags": ["cars"]}, api=api, sequence=False)
    assert history(api, memory_id)["versions"] == []
    api.patch(f"/api/v1/memories/{memory_id}", {"content": "I drive a blue Tesla", "hint_tags": ["cars"]},
              format="json")  # fmt: skip
    [version] = history(api, memory_id)["versions"]
    assert version["kind"] == "edited" and version["version"] == 1
    # Only what changed: the tags were sent again unchanged.
    assert version["changed"] == ["content"] and version["previous"] == {"content": "I drive a red Toyota"}
    assert version["actor"]["kind"] == "token" and version["actor"]["label"].startswith("egm_")


def test_a_patch_that_changes_nothing_records_nothing(api, bucket):
    [memory_id] = write(bucket, {"content": "Tea with milk", "importance": 0.5}, api=api, sequence=False)
    api.patch(f"/api/v1/memories/{memory_id}", {"importance": 0.5}, format="json")
    assert history(api, memory_id)["versions"] == []


def test_reclassification_by_patch_and_by_topic_rename_is_recorded(api, bucket):
    [memory_id] = write(bucket, {"content": "Standup is at nine"}, api=api, sequence=False)
    api.patch(f"/api/v1/memories/{memory_id}", {"classified_topic": "work"}, format="json")
    topic_rename(bucket=bucket, topic="work", new_name="meetings", actor=Actor.system("test operator"))
    first, second = history(api, memory_id)["versions"]
    assert (first["kind"], first["previous"]) == ("reclassified", {"classified_topic": None})
    assert (second["kind"], second["previous"]) == ("reclassified", {"classified_topic": "work"})
    assert second["actor"] == {"kind": "system", "label": "test operator"}


def test_supersession_is_recorded_with_the_successor(api, bucket):
    old, new = write(bucket, "I live in Paris", "I moved to Berlin", api=api, sequence=False)
    at = timezone.now()
    memory_supersede(memory_id=uuid.UUID(old), at=at, by=uuid.UUID(new), previous_by=None)
    [version] = history(api, old)["versions"]
    assert version["kind"] == "superseded" and version["details"] == {"by": new}
    assert version["previous"] == {"superseded_at": None, "superseded_by": None}
    assert version["actor"]["kind"] == "system"
    # Asked to record the same state again: nothing changed, nothing recorded.
    memory_supersede(memory_id=uuid.UUID(old), at=at, by=uuid.UUID(new), previous_by=uuid.UUID(new))
    assert len(history(api, old)["versions"]) == 1


def test_a_merge_records_both_sides_and_keeps_the_absorbed_memory_restorable(api, bucket):
    kept, gone = write(
        bucket,
        {"content": "My dog is Rex"},
        {"content": "Our dog is called Rex", "hint_tags": ["pets"]},
        api=api,
        sequence=False,
    )
    memories_absorb(mapping={gone: kept}, actor=Actor.system("reviewer"))
    assert api.get(f"/api/v1/memories/{gone}").status_code == 404
    gone_history = history(api, gone)
    assert gone_history["state"] == "deleted"
    assert [(v["kind"], v["details"]) for v in gone_history["versions"]] == [("merged", {"into": kept})]
    [kept_version] = history(api, kept)["versions"]
    assert kept_version["kind"] == "edited" and kept_version["previous"] == {"hint_tags": None}
    assert kept_version["details"] == {"absorbed": [gone]}
    assert DeletedMemory.objects.get(pk=gone).reason == "merged"


# --- delete and restore --------------------------------------------------------------------


def test_delete_then_restore_brings_back_the_same_memory_in_every_mode(api, bucket, celery_eager):
    beagle = {
        "content": "Biscuit the beagle loves carrots",
        "hint_tags": ["pets"],
        "metadata": {"k": 1},
        "importance": 0.7,
    }
    memory_id, _other = write(bucket, beagle, "The car needs new tyres", api=api, sequence=False)
    before = api.get(f"/api/v1/memories/{memory_id}").json()
    stored = Memory.objects.get(pk=memory_id)
    assert api.delete(f"/api/v1/memories/{memory_id}").status_code == 204
    assert api.get(f"/api/v1/memories/{memory_id}").status_code == 404
    assert memory_id not in listed(api, bucket)
    for mode in MODES:
        assert memory_id not in search(api, bucket, "beagle carrots", mode=mode), mode
    deleted = api.get(f"/api/v1/buckets/{bucket.pk}/deleted").json()["results"]
    assert [(d["id"], d["reason"]) for d in deleted] == [(memory_id, "deleted")]

    response = api.post(f"/api/v1/memories/{memory_id}/restore")
    assert response.status_code == 200, response.content
    after = response.json()
    assert after == {**before, "last_accessed_at": after["last_accessed_at"]}
    restored = Memory.objects.get(pk=memory_id)
    assert list(restored.embedding) == list(stored.embedding) and restored.text_lemmatized == stored.text_lemmatized
    assert restored.created_at == stored.created_at and restored.importance == 0.7
    for mode in ("hybrid", "keyword", "vector"):
        assert search(api, bucket, "beagle carrots", mode=mode)[0] == memory_id, mode
    assert [v["kind"] for v in history(api, memory_id)["versions"]] == ["deleted", "restored"]
    assert not DeletedMemory.objects.filter(pk=memory_id).exists()
    assert AuditEvent.objects.filter(action="memory.restore", object_ids__contains=[memory_id]).exists()
    # Restored once: nothing left to restore.
    assert api.post(f"/api/v1/memories/{memory_id}/restore").status_code == 404


def test_writing_a_deleted_text_makes_a_new_memory_and_restoring_the_old_one_is_409(api, bucket):
    [old] = write(bucket, "Dentist on Friday", api=api, sequence=False)
    api.delete(f"/api/v1/memories/{old}")
    [new] = write(bucket, "dentist on friday!", api=api, sequence=False)
    assert new != old
    response = api.post(f"/api/v1/memories/{old}/restore")
    assert response.status_code == 409
    assert response.json()["code"] == "duplicate_content" and response.json()["existing_id"] == new
    assert DeletedMemory.objects.filter(pk=old).exists()  # still restorable once the new one goes
    api.delete(f"/api/v1/memories/{new}")
    assert api.post(f"/api/v1/memories/{old}/restore").status_code == 200


def test_restore_and_history_are_refused_outside_the_tenant_and_to_a_write_only_token(
    api, bucket, outsider_api, tenant
):
    [memory_id] = write(bucket, "Private note", api=api, sequence=False)
    api.delete(f"/api/v1/memories/{memory_id}")
    assert outsider_api.post(f"/api/v1/memories/{memory_id}/restore").status_code == 404
    assert outsider_api.get(f"/api/v1/memories/{memory_id}/history").status_code == 404
    writer = make_client(tenant, scopes=("write",))
    assert writer.get(f"/api/v1/memories/{memory_id}/history").status_code == 403
    # A write-only token may restore, and learns only the id.
    response = writer.post(f"/api/v1/memories/{memory_id}/restore")
    assert response.status_code == 200 and response.json() == {"id": memory_id}
    reader = make_client(tenant, scopes=("read",))
    assert reader.post(f"/api/v1/memories/{memory_id}/restore").status_code == 403


def test_a_bucket_restricted_token_cannot_restore_another_buckets_memory(api, tenant, bucket):
    other = bucket_create(tenant=tenant, name="other")
    [memory_id] = write(other, "Elsewhere", api=api, sequence=False)
    api.delete(f"/api/v1/memories/{memory_id}")
    narrow = make_client(tenant, bucket=bucket)
    assert narrow.post(f"/api/v1/memories/{memory_id}/restore").status_code == 404
    assert narrow.get(f"/api/v1/memories/{memory_id}/history").status_code == 404


def test_the_purge_job_removes_deleted_memories_past_the_window_with_their_history(api, bucket):
    first, second = write(bucket, "Gone soon", "Gone later", api=api, sequence=False)
    api.delete(f"/api/v1/memories/{first}")
    api.delete(f"/api/v1/memories/{second}")
    DeletedMemory.objects.filter(pk=first).update(deleted_at=timezone.now() - timedelta(days=31))
    DeletedMemory.objects.filter(pk=second).update(deleted_at=timezone.now() - timedelta(days=29))
    assert memories_purge().as_dict() == {"deleted": 1, "expired": 0}
    assert api.post(f"/api/v1/memories/{first}/restore").status_code == 404
    assert api.get(f"/api/v1/memories/{first}/history").status_code == 404
    assert not MemoryVersion.objects.filter(memory_id=first).exists()
    # Within the window: still there. A bucket with a shorter window purges it.
    assert DeletedMemory.objects.filter(pk=second).exists()
    response = api.patch(f"/api/v1/buckets/{bucket.pk}", {"retention_days": 7}, format="json")
    assert response.status_code == 200 and response.json()["retention_days"] == 7
    assert memories_purge().as_dict() == {"deleted": 1, "expired": 0}
    assert not DeletedMemory.objects.filter(pk=second).exists()


# --- expiry --------------------------------------------------------------------------------


def test_expired_memories_leave_search_and_lists_unless_asked_for(api, bucket, celery_eager):
    soon, later, never = write(
        bucket,
        {"content": "The parking code is 4417", "ttl_seconds": 60},
        {"content": "The gate code is 4417 too", "expires_at": "2199-01-01T00:00:00Z"},
        "The office code is 4417 as well",
        api=api,
        sequence=False,
    )
    assert Memory.objects.get(pk=soon).expires_at > timezone.now()
    for mode in MODES:
        if mode != "graph":
            assert soon in search(api, bucket, "code 4417", mode=mode), mode
    Memory.objects.filter(pk=soon).update(expires_at=timezone.now() - timedelta(seconds=1))
    for mode in MODES:
        assert soon not in search(api, bucket, "code 4417", mode=mode), mode
    assert soon in search(api, bucket, "code 4417", mode="keyword", filters={"include_expired": True})
    assert soon not in listed(api, bucket) and {later, never} <= set(listed(api, bucket))
    assert soon in listed(api, bucket, "?include_expired=true")
    assert api.get(f"/api/v1/memories/{soon}").json()["expires_at"] is not None  # read by id still works
    # PATCH moves the expiry: null is never.
    api.patch(f"/api/v1/memories/{soon}", {"expires_at": None}, format="json")
    assert soon in listed(api, bucket)
    [version] = history(api, soon)["versions"]
    assert version["changed"] == ["expires_at"]


def test_the_purge_job_deletes_memories_expired_longer_than_the_window(api, bucket):
    old, recent = write(bucket, "Expired long ago", "Expired yesterday", api=api, sequence=False)
    Memory.objects.filter(pk=old).update(expires_at=timezone.now() - timedelta(days=40))
    Memory.objects.filter(pk=recent).update(expires_at=timezone.now() - timedelta(days=1))
    api.patch(f"/api/v1/memories/{old}", {"hint_tags": ["x"]}, format="json")  # a version to purge with it
    assert memories_purge().as_dict() == {"deleted": 0, "expired": 1}
    assert not Memory.objects.filter(pk=old).exists() and not MemoryVersion.objects.filter(memory_id=old).exists()
    assert not DeletedMemory.objects.filter(pk=old).exists()
    assert Memory.objects.filter(pk=recent).exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"content": "x", "ttl_seconds": 60, "expires_at": "2199-01-01T00:00:00Z"}, "ttl_seconds"),
        ({"content": "x", "ttl_seconds": 0}, "ttl_seconds"),
        ({"content": "x", "ttl_seconds": "60"}, "ttl_seconds"),
        ({"content": "x", "expires_at": "9999-01-01T00:00:00Z"}, "expires_at"),
        ({"content": "x", "importance": 1.5}, "importance"),
        ({"content": "x", "importance": -0.1}, "importance"),
        ({"content": "x", "importance": "0.5"}, "importance"),
        ({"content": "x", "importance": True}, "importance"),
    ],
)
def test_bad_expiry_or_importance_is_a_400_and_writes_nothing(api, bucket, body, field):
    response = api.post(f"/api/v1/buckets/{bucket.pk}/memories", body, format="json")
    assert response.status_code == 400 and field in response.content.decode()
    assert not Memory.objects.filter(bucket=bucket).exists()


def test_bad_retention_days_is_a_400(api, bucket):
    for value in (-1, 100_000, "30"):
        response = api.patch(f"/api/v1/buckets/{bucket.pk}", {"retention_days": value}, format="json")
        assert response.status_code == 400, value


# --- importance ----------------------------------------------------------------------------


def test_importance_lifts_a_memory_only_when_set(api, bucket):
    days = ["Monday", "Tuesday", "Wednesday", "Thursday"]
    ids = write(
        bucket,
        *[f"Note {i}: the team lunch is at the Thai place on {d}" for i, d in enumerate(days)],
        api=api,
        sequence=False,
    )
    body = {"query": "team lunch Thai place", "limit": 4, "explain": True}
    hits = api.post(f"/api/v1/buckets/{bucket.pk}/search", body, format="json").json()["results"]
    baseline = [hit["id"] for hit in hits]
    assert set(baseline) == set(ids)
    assert all("importance" not in hit["explain"]["boosts"] for hit in hits)
    # A memory below the first that importance 1 (x1.5 by default) can lift above it.
    runner_up = next(hit["id"] for hit in hits[1:] if hit["score"] * 1.5 > hits[0]["score"] * 1.01)
    api.patch(f"/api/v1/memories/{runner_up}", {"importance": 1.0}, format="json")
    lifted = search(api, bucket, "team lunch Thai place", limit=4)
    assert lifted[0] == runner_up
    # The others keep their order among themselves: nothing else moved.
    assert [i for i in lifted if i != runner_up] == [i for i in baseline if i != runner_up]
    # Switched off per request: the baseline again.
    assert search(api, bucket, "team lunch Thai place", limit=4, ranking={"importance_boost": 0}) == baseline


def test_importance_is_filterable(api, bucket):
    low, high, unset = write(
        bucket,
        {"content": "Low one", "importance": 0.2},
        {"content": "High one", "importance": 0.9},
        "Unset one",
        api=api,
        sequence=False,
    )
    assert listed(api, bucket, "?importance_min=0.5") == [high]
    assert search(api, bucket, "one", mode="keyword", filters={"importance_min": 0.1}) == [high, low]
    assert api.get(f"/api/v1/buckets/{bucket.pk}/memories?importance_min=2").status_code == 400
    assert unset in listed(api, bucket)


def test_a_candidate_below_the_read_cut_is_still_read_when_it_has_importance(api, bucket):
    from memories import ranking
    from memories.retrieval import fusion, rows

    top, second, important, plain = (uuid.UUID(i) for i in write(bucket, "a", "b", "c", "d", api=api, sequence=False))
    api.patch(f"/api/v1/memories/{important}", {"importance": 1.0}, format="json")
    fused = {top: 1.0, second: 0.9, important: 0.05, plain: 0.05}
    cues = fusion.query_cues("anything", ranking.DEFAULTS)
    read = rows.fetch_contenders(bucket, fused, ranking.DEFAULTS, 1, cues)
    # The cut leaves out the two weak candidates, but reads the one whose importance may lift it.
    assert set(read) == {top, second, important}
    no_boost = ranking.merge(ranking.DEFAULTS, {"importance_boost": 0})
    assert set(rows.fetch_contenders(bucket, fused, no_boost, 1, cues)) == {top, second}


def test_a_forced_reclassification_records_only_labels_it_changes(api, bucket):
    from memories.services.classification import memories_label

    labelled, same, unlabelled = write(bucket, "Standup at nine", "Rent is due", "Buy milk", api=api, sequence=False)
    api.patch(f"/api/v1/memories/{labelled}", {"classified_topic": "work", "classified_scope": "specific"},
              format="json")  # fmt: skip
    api.patch(f"/api/v1/memories/{same}", {"classified_topic": "home", "classified_scope": "specific"}, format="json")
    ids = [uuid.UUID(i) for i in (labelled, same, unlabelled)]
    changed = memories_label(ids=ids, scopes=["general", "specific", "general"], topics=["meetings", "home", "shop"],
                             by=["classifier"] * 3, force=True)  # fmt: skip
    assert changed == 3
    last = history(api, labelled)["versions"][-1]
    assert (last["kind"], last["previous"], last["details"]) == (
        "reclassified",
        {"classified_scope": "specific", "classified_topic": "work"},
        {"by": "classifier"},
    )
    assert [v["kind"] for v in history(api, same)["versions"]] == ["reclassified"]  # the PATCH only
    assert history(api, unlabelled)["versions"] == []


def test_a_candidate_below_the_read_cut_is_read_when_a_superseded_contender_can_fall_below_it(api, bucket):
    """The cut assumes a contender keeps at least its fused score x the least boost. A superseded
    memory found with its successor is capped at ``superseded_weight`` x the successor's score,
    which can be far lower: a weaker candidate the cut left unread may then deserve its place."""
    from datetime import timedelta

    from django.utils import timezone

    from memories import ranking
    from memories.retrieval import fusion, rows

    old, best, successor, weak = (
        uuid.UUID(i)
        for i in write(bucket, "old value", "clear winner", "new value", "weaker one", api=api, sequence=False)
    )
    Memory.objects.filter(pk=old).update(superseded_at=timezone.now() - timedelta(days=1), superseded_by=successor)
    # Without the user's-lines boost, which would lower the cut for "anything" (a question not in
    # the first person) by its 1.3.
    config = ranking.merge(ranking.DEFAULTS, {"user_boost": 0})
    cues = fusion.query_cues("anything", config)
    # Top 2 by fused score: old and best; the cut is 0.5 x 0.35 (the least boost) = 0.175.
    fused = {old: 1.0, best: 0.5, successor: 0.2, weak: 0.17}
    read = rows.fetch_contenders(bucket, fused, config, 2, cues)
    # old is capped below its successor (at most 0.5 x its score, <= 0.1), and the successor can
    # score as little as 0.2 x 0.7 (recency) = 0.14: weak, up to 0.17, may be second.
    assert weak in read
    # Without a superseded contender the cut holds, and weak is not read.
    Memory.objects.filter(pk=old).update(superseded_at=None, superseded_by=None)
    assert weak not in rows.fetch_contenders(bucket, fused, config, 2, cues)
