"""The audit log: API and admin mutations write events; events outlive their objects, not their tenant."""

from __future__ import annotations

import pytest

from audit.models import AuditEvent
from audit.services import OBJECT_IDS_MAX, Actor, audit_record
from memories.models import Memory
from memories.services import MemoryInput, memories_ingest
from tenants import services as tenant_services
from tenants.models import ApiToken, Bucket, Tenant

pytestmark = pytest.mark.django_db


def events(action=None):
    queryset = AuditEvent.objects.order_by("id")
    return list(queryset.filter(action=action) if action else queryset)


def test_bucket_create_update_delete_through_the_api_are_audited_as_the_token(admin_api, tenant):
    created = admin_api.post("/api/v1/buckets", {"name": "notes"}, format="json").json()
    admin_api.patch(f"/api/v1/buckets/{created['id']}", {"description": "x"}, format="json")
    assert admin_api.delete(f"/api/v1/buckets/{created['id']}").status_code == 204
    assert [e.action for e in events()] == ["bucket.create", "bucket.update", "bucket.delete"]
    for event in events():
        assert event.tenant_id == tenant.pk and event.object_ids == [created["id"]]
        assert (event.actor_kind, event.actor_id, event.actor_label) == (
            "token",
            str(admin_api.token.pk),
            admin_api.token.prefix,
        )
        assert event.ip_address == "127.0.0.1"
    assert events("bucket.update")[0].details == {"fields": ["description"]}


def test_a_batch_write_is_one_event_with_its_ids(api, bucket):
    body = {"memories": [{"content": "I like tea."}, {"content": "I like TEA"}, {"content": "I live in Oslo."}]}
    results = api.post(f"/api/v1/buckets/{bucket.pk}/memories", body, format="json").json()["results"]
    [event] = events("memory.create")
    assert event.object_ids == [r["id"] for r in results] and event.object_count == 3
    assert event.details == {"bucket_id": str(bucket.pk), "deduplicated": 1}


def test_memory_update_and_delete_through_the_api_are_audited(api, bucket):
    [result] = memories_ingest(bucket=bucket, items=[MemoryInput(content="I like tea.")])
    api.patch(f"/api/v1/memories/{result.id}", {"hint_tags": ["drinks"]}, format="json")
    api.delete(f"/api/v1/memories/{result.id}")
    update, delete = events("memory.update")[0], events("memory.delete")[0]
    assert update.object_ids == delete.object_ids == [str(result.id)]
    assert update.details == {"fields": ["hint_tags"]}
    # The event outlives the memory it names.
    assert not Memory.objects.filter(pk=result.id).exists() and AuditEvent.objects.filter(pk=delete.pk).exists()


def test_refused_and_cross_tenant_requests_write_nothing(api, outsider_api, bucket):
    [result] = memories_ingest(bucket=bucket, items=[MemoryInput(content="I like tea.")])
    assert outsider_api.delete(f"/api/v1/memories/{result.id}").status_code == 404
    assert outsider_api.delete(f"/api/v1/buckets/{bucket.pk}").status_code == 404
    assert api.post(f"/api/v1/buckets/{bucket.pk}/memories", {"content": ""}, format="json").status_code == 400
    assert events() == []


def test_long_id_lists_are_capped_with_the_total_kept(tenant):
    ids = list(range(OBJECT_IDS_MAX + 50))
    event = audit_record(
        actor=Actor.system(), action="memory.create", tenant=tenant, object_type="memory", object_ids=ids
    )
    event.refresh_from_db()
    assert len(event.object_ids) == OBJECT_IDS_MAX and event.object_count == OBJECT_IDS_MAX + 50


def test_deleting_a_tenant_deletes_its_events_only(tenant, other_tenant):
    for t in (tenant, other_tenant):
        audit_record(actor=Actor.system(), action="bucket.create", tenant=t, object_type="bucket", object_ids=[1])
    Tenant.objects.filter(pk=tenant.pk).delete()
    assert [e.tenant_id for e in events()] == [other_tenant.pk]


def test_admin_token_creation_and_revocation_are_audited_and_revoke_asks_first(admin_client, admin_user, tenant):
    response = admin_client.post(
        "/admin/tenants/apitoken/add/", {"tenant": tenant.pk, "name": "agent", "scopes": ["read"]}, follow=True
    )
    assert response.status_code == 200
    token = ApiToken.objects.get(name="agent")
    shown = [str(m) for m in response.context["messages"]]
    assert any(token.prefix in m for m in shown)  # the secret, once
    [created] = events("token.create")
    assert (created.actor_kind, created.actor_label, created.object_ids) == ("operator", "admin", [str(token.pk)])
    # Revoke: a confirmation page first, nothing revoked yet.
    form = {"action": "revoke", "_selected_action": [token.pk]}
    page = admin_client.post("/admin/tenants/apitoken/", form)
    assert page.status_code == 200 and b"cannot be undone" in page.content
    token.refresh_from_db()
    assert token.revoked_at is None
    admin_client.post("/admin/tenants/apitoken/", {**form, "confirm": "yes"})
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert events("token.revoke")[0].object_ids == [str(token.pk)]


def test_admin_bucket_and_memory_deletes_are_audited(admin_client, tenant, bucket):
    [result] = memories_ingest(bucket=bucket, items=[MemoryInput(content="I like tea.")])
    admin_client.post(f"/admin/memories/memory/{result.id}/delete/", {"post": "yes"})
    assert not Memory.objects.filter(pk=result.id).exists()
    assert events("memory.delete")[0].details["contents"] == ["I like tea."]
    admin_client.post(f"/admin/tenants/bucket/{bucket.pk}/delete/", {"post": "yes"})
    assert not Bucket.objects.filter(pk=bucket.pk).exists()
    assert events("bucket.delete")[0].object_ids == [str(bucket.pk)]


def test_admin_memory_edit_goes_through_the_service(admin_client, bucket):
    [result] = memories_ingest(bucket=bucket, items=[MemoryInput(content="I like tea.")])
    memory = Memory.objects.get(pk=result.id)
    response = admin_client.post(
        f"/admin/memories/memory/{memory.pk}/change/",
        {"content": "I like green tea.", "hint_tags": "drinks", "metadata": "{}", "created_at_0": "2024-01-02",
         "created_at_1": "10:00:00"},
    )  # fmt: skip
    assert response.status_code == 302, response.content.decode()[:2000]
    memory.refresh_from_db()
    assert memory.content == "I like green tea." and memory.hint_tags == ["drinks"]
    assert "green" in memory.text_lemmatized  # recomputed by memory_update
    assert events("memory.update")[0].details["fields"] == ["content", "created_at", "hint_tags"]


def test_admin_memory_edit_refuses_a_created_at_out_of_the_stored_range(admin_client, bucket):
    [result] = memories_ingest(bucket=bucket, items=[MemoryInput(content="I like tea.")])
    before = Memory.objects.get(pk=result.id).created_at
    response = admin_client.post(
        f"/admin/memories/memory/{result.id}/change/",
        {"content": "I like tea.", "hint_tags": "", "metadata": "{}", "created_at_0": "9999-12-31",
         "created_at_1": "23:59:59"},
    )  # fmt: skip
    assert response.status_code == 200  # the form again, with the error
    assert "1900" in response.content.decode()
    assert Memory.objects.get(pk=result.id).created_at == before
    assert not events("memory.update")


def test_the_audit_log_is_browsable_filterable_and_read_only(admin_client, tenant, other_tenant):
    audit_record(actor=Actor.system(), action="bucket.merge", tenant=tenant, object_type="bucket", object_ids=["x1"])
    audit_record(
        actor=Actor.system(), action="memory.delete", tenant=other_tenant, object_type="memory", object_ids=[2]
    )

    def rows(query=""):
        page = admin_client.get(f"/admin/audit/auditevent/{query}").content.decode()
        return {action for action in ("bucket.merge", "memory.delete") if f'class="field-action">{action}<' in page}

    assert rows() == {"bucket.merge", "memory.delete"}
    assert rows(f"?tenant__id__exact={tenant.pk}") == {"bucket.merge"}
    assert rows("?action=memory.delete") == {"memory.delete"}
    assert rows("?actor_kind__exact=operator") == set()
    event = AuditEvent.objects.get(action="bucket.merge")
    assert admin_client.get(f"/admin/audit/auditevent/{event.pk}/change/").status_code == 200
    assert admin_client.post(f"/admin/audit/auditevent/{event.pk}/delete/", {"post": "yes"}).status_code == 403
    assert admin_client.get("/admin/audit/auditevent/add/").status_code == 403
    assert AuditEvent.objects.filter(pk=event.pk).exists()


def test_tenants_and_tokens_created_from_the_command_line_are_audited_as_the_system(db):
    from io import StringIO

    from django.core.management import call_command

    call_command("create_tenant", "Cli Corp", "--scopes", "read", stdout=StringIO())
    tenant = Tenant.objects.get(name="Cli Corp")
    token = ApiToken.objects.get(tenant=tenant)
    assert [(e.action, e.actor_kind, e.actor_label) for e in events()] == [
        ("tenant.create", "system", "manage.py create_tenant"),
        ("token.create", "system", "manage.py create_tenant"),
    ]
    assert events("token.create")[0].object_ids == [str(token.pk)]


def test_deleting_a_token_in_the_admin_is_audited(admin_client, tenant):
    token = tenant_services.token_issue(tenant=tenant, name="old", scopes=["read"]).token
    admin_client.post(f"/admin/tenants/apitoken/{token.pk}/delete/", {"post": "yes"})
    assert not ApiToken.objects.filter(pk=token.pk).exists()
    assert events("token.delete")[0].details == {"prefixes": [token.prefix]}
