"""A memory's life in the console: its history on its page, importance and expiry, pinning,
the deleted memories (restore, conflicts), a bucket's retention window — for a tenant operator,
and never across tenants."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django import forms
from django.contrib.auth.models import Permission
from django.utils import timezone

from audit.models import AuditEvent
from audit.services import Actor
from memories.models import DeletedMemory, Memory, MemoryVersion
from memories.services import memory_delete, memory_update
from memories.services.buckets import bucket_update
from memories.services.merge import memories_absorb
from tenants.models import Bucket
from tests.factories import make_client, make_operator, write

pytestmark = pytest.mark.django_db

SCRIPT = "<script>window.__engram_xss = 1;</script>"
MEMORIES = "/admin/memories/memory/"
DELETED = "/admin/memories/deletedmemory/"


@pytest.fixture
def operator(client, tenant):
    client.force_login(make_operator("acme-operator", tenant))
    return client


def change_form_data(client, memory_id, **changes) -> dict:
    """The memory page's form as the browser would post it, with ``changes``."""
    form = client.get(f"{MEMORIES}{memory_id}/change/").context["adminform"].form
    data = {}
    for name, field in form.fields.items():
        value = changes[name] if name in changes else form[name].value()
        if isinstance(field, forms.SplitDateTimeField):
            value = timezone.localtime(value) if value else None
            data[f"{name}_0"] = value.strftime("%Y-%m-%d") if value else ""
            data[f"{name}_1"] = value.strftime("%H:%M:%S.%f") if value else ""
        else:
            data[name] = "" if value is None else value
    return data


def history_rows(client, memory_id) -> list:
    response = client.get(f"{MEMORIES}{memory_id}/change/", follow=True)
    assert response.status_code == 200
    return response.context["memory_history"].rows


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


# --- history ----------------------------------------------------------------------------------


def test_history_shows_edits_delete_and_restore_newest_first_with_who_made_them(operator, bucket, tenant):
    [memory_id] = write(bucket, "I drive a red Toyota.", sequence=False)
    api = make_client(tenant)
    edit = api.patch(f"/api/v1/memories/{memory_id}", {"content": "I drive a blue Tesla."}, format="json")
    assert edit.status_code == 200
    response = operator.post(f"{MEMORIES}{memory_id}/change/", change_form_data(operator, memory_id, importance="0.4"))
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert operator.post(f"{MEMORIES}{memory_id}/delete/", {"post": "yes"}).status_code == 302
    assert DeletedMemory.objects.filter(pk=memory_id).exists()
    restored = operator.post(f"{DELETED}{memory_id}/restore/")
    assert restored.status_code == 302 and restored["Location"] == f"{MEMORIES}{memory_id}/change/"

    rows = history_rows(operator, memory_id)
    assert [(r.number, r.kind) for r in rows] == [(4, "restored"), (3, "deleted"), (2, "edited"), (1, "edited")]
    assert [(r.actor_kind, r.actor_label) for r in rows] == [
        ("operator", "acme-operator"), ("operator", "acme-operator"), ("operator", "acme-operator"),
        ("token", api.token.prefix),
    ]  # fmt: skip
    assert [(f.name, f.value) for f in rows[2].fields] == [("importance", "(empty)")]
    assert [(f.name, f.value) for f in rows[3].fields] == [("content", "I drive a red Toyota.")]
    assert rows[0].notes[0].text.startswith("had been deleted on ")
    page = operator.get(f"{MEMORIES}{memory_id}/change/").content.decode()
    assert 'id="memory-history"' in page and "acme-operator" in page and api.token.prefix in page
    assert "I drive a red Toyota." in page and "History (4)" in page
    assert AuditEvent.objects.filter(action="memory.restore", actor_label="acme-operator").exists()


def test_history_shows_a_rating_with_its_signal_query_and_agent(operator, bucket, tenant):
    [memory_id] = write(bucket, "Maya is allergic to peanuts.", sequence=False)
    api = make_client(tenant)
    rated = api.post(f"/api/v1/memories/{memory_id}/feedback",
                     {"signal": "irrelevant", "query": "What does Maya drink?", "agent_id": "planner"},
                     format="json")  # fmt: skip
    assert rated.status_code == 201
    [row] = history_rows(operator, memory_id)
    assert (row.kind, row.kind_label, row.fields) == ("rated", "rated by feedback", [])
    assert [n.text for n in row.notes] == ["irrelevant for the query: What does Maya drink?", "agent_id: planner"]


def test_history_links_a_merge_both_ways_and_shortens_long_values(operator, bucket):
    long_text = "The lighthouse keeper's log, " + "wind and tide; " * 20
    kept, gone = write(bucket, long_text, "The keeper keeps a log.", sequence=False)
    memory_update(memory=Memory.objects.get(pk=gone), hint_tags=["log"])  # for the survivor to take
    memory_update(memory=Memory.objects.get(pk=kept), content="The keeper's log, in short.")
    memories_absorb(mapping={gone: kept}, actor=Actor.system("test"))
    [absorbed, edited] = history_rows(operator, kept)[:2]
    assert absorbed.notes[0].text == "absorbed" and absorbed.notes[0].memory_ids == (gone,)
    [content] = edited.fields
    assert content.full == long_text and content.value.endswith("…") and len(content.value) == 160
    # The absorbed memory's old address leads to its page among the deleted memories.
    response = operator.get(f"{MEMORIES}{gone}/change/")
    assert response.status_code == 302 and response["Location"] == f"{DELETED}{gone}/change/"
    [merged, _tagged] = operator.get(response["Location"]).context["memory_history"].rows
    assert merged.kind == "merged" and merged.notes[0].memory_ids == (kept,)


# --- importance, expiry, pinning --------------------------------------------------------------


def test_pin_and_unpin_from_the_page_and_the_list_are_recorded(operator, bucket):
    first, second = write(bucket, "I like green tea.", "I run on Saturdays.", sequence=False)
    page = operator.get(f"{MEMORIES}{first}/change/").content.decode()
    assert 'id="pin-memory"' in page and "not pinned" in page
    response = operator.post(f"{MEMORIES}{first}/pin/", {"action": "pin"})
    assert response.status_code == 302 and Memory.objects.get(pk=first).importance == 1.0
    assert 'id="unpin-memory"' in operator.get(f"{MEMORIES}{first}/change/").content.decode()
    listed = operator.get(MEMORIES, {"importance": "pinned"})
    assert [m.pk for m in listed.context["cl"].result_list] == [first] and "pinned" in listed.content.decode()

    operator.post(MEMORIES, {"action": "pin", "_selected_action": [first, second], "index": 0})
    assert set(Memory.objects.filter(importance=1.0).values_list("pk", flat=True)) == {first, second}
    operator.post(MEMORIES, {"action": "unpin", "_selected_action": [first, second], "index": 0})
    assert not Memory.objects.filter(importance__isnull=False).exists()
    rows = history_rows(operator, first)
    assert [(r.kind, r.actor_label, [(f.name, f.value) for f in r.fields]) for r in rows] == [
        ("edited", "acme-operator", [("importance", "1.0")]),
        ("edited", "acme-operator", [("importance", "(empty)")]),
    ]  # the second pin changed nothing and recorded nothing
    assert operator.get(f"{MEMORIES}{first}/pin/").status_code == 405


def test_importance_and_expiry_are_edited_shown_and_filtered(operator, bucket):
    expired, later, never = write(
        bucket, "The old wifi password.", "The parking permit.", "My name is Ana.", sequence=False
    )
    soon = timezone.now() + timedelta(days=3)
    memory_update(memory=Memory.objects.get(pk=expired), expires_at=timezone.now() - timedelta(hours=1))
    data = change_form_data(operator, later, importance="0.7", expires_at=soon)
    assert operator.post(f"{MEMORIES}{later}/change/", data).status_code == 302
    memory = Memory.objects.get(pk=later)
    assert memory.importance == 0.7 and abs(memory.expires_at - soon) < timedelta(seconds=1)
    [version] = MemoryVersion.objects.filter(memory_id=later)
    assert set(version.previous) == {"importance", "expires_at"} and version.actor_label == "acme-operator"

    def shown(**query):
        return {m.pk for m in operator.get(MEMORIES, query).context["cl"].result_list}

    assert shown(expired="yes") == {expired} and shown(expired="no") == {later, never}
    assert shown(expired="later") == {later}
    assert shown(importance="set") == {later} and shown(importance="unset") == {expired, never}
    listing = operator.get(MEMORIES).content.decode()
    assert "expired</strong>" in listing and "0.70" in listing
    assert "out of searches and lists, purged after" in operator.get(f"{MEMORIES}{expired}/change/").content.decode()

    refused = operator.post(f"{MEMORIES}{never}/change/", change_form_data(operator, never, importance="1.5"))
    assert refused.status_code == 200 and "importance" in refused.context["adminform"].form.errors
    far = timezone.now().replace(year=2300)
    refused = operator.post(f"{MEMORIES}{never}/change/", change_form_data(operator, never, expires_at=far))
    assert refused.status_code == 200 and "expires_at" in refused.context["adminform"].form.errors
    assert Memory.objects.get(pk=never).importance is None and not MemoryVersion.objects.filter(memory_id=never)


# --- deleted memories -------------------------------------------------------------------------


def test_deleted_memories_are_listed_searched_and_restored_in_bulk(operator, bucket):
    bucket_update(bucket=bucket, retention_days=10)
    ids = write(bucket, "I parked on level 3.", "The meeting moved to Tuesday.", "Still here.")
    for memory_id in ids[:2]:
        memory_delete(memory=Memory.objects.get(pk=memory_id))
    response = operator.get(DELETED)
    deleted = {d.pk: d for d in response.context["cl"].result_list}
    assert set(deleted) == set(ids[:2])
    page = response.content.decode()
    assert "I parked on level 3." in page and "Still here." not in page
    purge = timezone.localtime(deleted[ids[0]].deleted_at + timedelta(days=10)).strftime("%Y-%m-%d %H:%M")
    assert purge in page
    assert [d.pk for d in operator.get(DELETED, {"q": "level 3"}).context["cl"].result_list] == [ids[0]]
    assert [d.pk for d in operator.get(DELETED, {"q": str(ids[1])}).context["cl"].result_list] == [ids[1]]
    view = operator.get(f"{DELETED}{ids[0]}/change/")
    assert view.status_code == 200 and 'id="restore-memory"' in view.content.decode()
    assert [r.kind for r in view.context["memory_history"].rows] == ["deleted"]

    done = operator.post(DELETED, {"action": "restore", "_selected_action": ids[:2], "index": 0}, follow=True)
    assert "Restored 2 memories." in messages_of(done)
    assert Memory.objects.filter(pk__in=ids).count() == 3 and not DeletedMemory.objects.exists()
    # No adding, editing or deleting of deleted memories: read-only, restore only.
    memory_delete(memory=Memory.objects.get(pk=ids[2]))
    assert operator.get(f"{DELETED}add/").status_code == 403
    assert operator.post(f"{DELETED}{ids[2]}/delete/", {"post": "yes"}).status_code == 403
    operator.post(f"{DELETED}{ids[2]}/change/", {"content": "overwritten"})
    assert DeletedMemory.objects.get(pk=ids[2]).content == "Still here."


def test_a_restore_that_would_duplicate_a_live_memory_names_it(operator, bucket):
    [old] = write(bucket, "The spare key is under the mat.", sequence=False)
    memory_delete(memory=Memory.objects.get(pk=old))
    [new] = write(bucket, "The spare key is under the mat.", sequence=False)
    response = operator.post(f"{DELETED}{old}/restore/", follow=True)
    assert response.status_code == 200 and response.redirect_chain[0][0] == f"{DELETED}{old}/change/"
    [message] = messages_of(response)
    assert "was not restored" in message and str(new) in message
    assert f'href="{MEMORIES}{new}/change/"' in response.content.decode()
    bulk = operator.post(DELETED, {"action": "restore", "_selected_action": [old], "index": 0}, follow=True)
    assert any(str(new) in m for m in messages_of(bulk))
    assert DeletedMemory.objects.filter(pk=old).exists() and Memory.objects.filter(pk=new).exists()


def test_restoring_takes_the_permission_to_delete_memories(client, tenant, bucket):
    viewer = make_operator("viewer", tenant, group=False)
    viewer.user_permissions.add(Permission.objects.get(codename="view_memory"))
    client.force_login(viewer)
    [memory_id] = write(bucket, "I keep bees.", sequence=False)
    memory_delete(memory=Memory.objects.get(pk=memory_id))
    assert [d.pk for d in client.get(DELETED).context["cl"].result_list] == [memory_id]
    view = client.get(f"{DELETED}{memory_id}/change/").content.decode()
    assert 'id="restore-memory"' not in view
    assert client.post(f"{DELETED}{memory_id}/restore/").status_code == 403
    assert (
        'id="pin-memory"'
        not in client.get(f"{MEMORIES}{write(bucket, 'Bees!', sequence=False)[0]}/change/").content.decode()
    )
    assert DeletedMemory.objects.filter(pk=memory_id).exists()


def test_an_operator_of_another_tenant_cannot_see_or_restore(client, bucket, other_tenant):
    [memory_id] = write(bucket, "Acme's secret recipe.", sequence=False)
    memory_update(memory=Memory.objects.get(pk=memory_id), importance=0.5)
    memory_delete(memory=Memory.objects.get(pk=memory_id))
    client.force_login(make_operator("outsider", other_tenant))
    listing = client.get(DELETED)
    assert list(listing.context["cl"].result_list) == [] and "secret recipe" not in listing.content.decode()
    for url in (f"{DELETED}{memory_id}/change/", f"{MEMORIES}{memory_id}/change/", f"{DELETED}{memory_id}/"):
        assert client.get(url, follow=True).status_code == 404, url
    assert client.post(f"{DELETED}{memory_id}/restore/").status_code == 404
    selection = {"action": "restore", "_selected_action": [memory_id], "index": 0}
    assert client.post(DELETED, selection).status_code == 404
    assert DeletedMemory.objects.filter(pk=memory_id).exists()
    assert MemoryVersion.objects.filter(memory_id=memory_id).count() == 2


# --- escaping ---------------------------------------------------------------------------------


def test_stored_markup_is_escaped_on_every_lifecycle_page(operator, bucket):
    hostile = f"{SCRIPT} <b>bold</b> & friends"
    long_hostile = f"{SCRIPT} " + "a long note " * 20
    first, second = write(bucket, hostile, long_hostile, sequence=False)
    memory_update(memory=Memory.objects.get(pk=first), content="Now harmless.", hint_tags=[SCRIPT],
                  actor=Actor(kind="operator", id="1", label=SCRIPT))  # fmt: skip
    memory_update(memory=Memory.objects.get(pk=second), content="Also harmless.")
    pages = [f"{MEMORIES}{first}/change/", f"{MEMORIES}{second}/change/", MEMORIES]
    memory_delete(memory=Memory.objects.get(pk=first))
    write(bucket, "Now harmless.", sequence=False)  # restoring the first one now conflicts, with a message
    pages += [DELETED, f"{DELETED}{first}/change/", (f"{DELETED}{first}/restore/", "post")]
    for page in pages:
        url, method = page if isinstance(page, tuple) else (page, "get")
        response = getattr(operator, method)(url, follow=True)
        body = response.content.decode()
        assert response.status_code == 200, url
        assert "<script>window.__engram_xss" not in body and "<b>bold</b>" not in body, url
    body = operator.get(f"{MEMORIES}{second}/change/").content.decode()
    assert "&lt;script&gt;window.__engram_xss = 1;&lt;/script&gt;" in body


# --- a bucket's retention window --------------------------------------------------------------


def test_a_buckets_retention_days_is_shown_and_edited_through_the_bucket_service(operator, bucket):
    url = f"/admin/tenants/bucket/{bucket.pk}/change/"
    page = operator.get(url)
    assert page.context["adminform"].form["retention_days"].value() == 30
    data = {"name": bucket.name, "description": bucket.description, "retention_days": 7}
    assert operator.post(url, data).status_code == 302
    assert Bucket.objects.get(pk=bucket.pk).retention_days == 7
    event = AuditEvent.objects.filter(action="bucket.update").latest("id")
    assert event.details == {"fields": ["retention_days"]} and event.actor_label == "acme-operator"
    refused = operator.post(url, {**data, "retention_days": 100_000})
    assert refused.status_code == 200 and "retention_days" in refused.context["adminform"].form.errors
    assert Bucket.objects.get(pk=bucket.pk).retention_days == 7
    assert "retention_days" not in operator.get("/admin/tenants/bucket/add/").context["adminform"].form.fields
    assert '<td class="field-retention_days">7</td>' in operator.get("/admin/tenants/bucket/").content.decode()
