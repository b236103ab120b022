"""The bucket endpoints, including the outsider (another tenant) on every one."""

from __future__ import annotations

import importlib
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.loader import MigrationLoader

from audit.models import AuditEvent
from memories.models import Memory
from memories.services.buckets import bucket_create
from tenants import services
from tenants.models import Bucket, Tenant

pytestmark = pytest.mark.django_db


def add_memory(bucket: Bucket, content: str) -> Memory:
    return Memory.objects.create(tenant_id=bucket.tenant_id, bucket=bucket, content=content)


def test_create_bucket(api, tenant):
    response = api.post("/api/v1/buckets", {"name": "project-x", "description": "notes"}, format="json")
    assert response.status_code == 201
    body = response.json()
    assert body["name"] == "project-x" and body["description"] == "notes"
    assert Bucket.objects.get(pk=body["id"]).tenant_id == tenant.pk


def test_tenant_in_payload_is_refused_and_changes_nothing(api, tenant, other_tenant):
    # The tenant comes from the token; a "tenant" field is an unknown field like any other.
    response = api.post("/api/v1/buckets", {"name": "x", "tenant": str(other_tenant.pk)}, format="json")
    assert response.status_code == 400 and "tenant" in response.json()["errors"]
    assert not Bucket.objects.filter(name="x").exists()
    assert not other_tenant.buckets.exists()


def test_duplicate_bucket_name_is_409(api, bucket):
    response = api.post("/api/v1/buckets", {"name": bucket.name}, format="json")
    assert response.status_code == 409
    assert response.json()["code"] == "bucket_exists"


@pytest.mark.parametrize("name", ["MAIN", "Main", "  mAiN "])
def test_a_name_differing_only_in_case_is_409_and_writes_nothing(api, tenant, bucket, name):
    response = api.post("/api/v1/buckets", {"name": name}, format="json")
    assert response.status_code == 409, response.json()
    body = response.json()
    assert body["code"] == "bucket_exists" and "'main'" in body["detail"] and "regardless of case" in body["detail"]
    assert list(tenant.buckets.values_list("name", flat=True)) == ["main"]


def test_the_database_refuses_a_name_differing_only_in_case(tenant, bucket):
    # The rule is the unique index's, not only the API's: no path into the table can break it.
    with pytest.raises(IntegrityError), transaction.atomic():
        Bucket.objects.create(tenant=tenant, name="MAIN")


def test_bucket_names_differing_only_in_case_are_fine_in_two_tenants(api, other_bucket):
    assert api.post("/api/v1/buckets", {"name": other_bucket.name.upper()}, format="json").status_code == 201


def test_same_bucket_name_in_two_tenants_is_fine(api, other_bucket):
    assert api.post("/api/v1/buckets", {"name": other_bucket.name}, format="json").status_code == 201


@pytest.mark.parametrize(
    "payload",
    [{}, {"name": ""}, {"name": "   "}, {"name": "x" * 201}, {"name": ["a"]}, {"name": "ok", "description": 5}],
)
def test_invalid_bucket_payload_is_400_and_writes_nothing(api, tenant, payload):
    response = api.post("/api/v1/buckets", payload, format="json")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid"
    assert not tenant.buckets.exists()


def test_malformed_json_is_400(api, tenant):
    response = api.post("/api/v1/buckets", data="{nope", content_type="application/json")
    assert response.status_code == 400
    assert not tenant.buckets.exists()


def test_list_buckets_is_paginated_and_tenant_scoped(api, tenant, other_bucket):
    for i in range(3):
        bucket_create(tenant=tenant, name=f"b{i}")
    body = api.get("/api/v1/buckets?limit=2").json()
    assert body["count"] == 3
    assert [b["name"] for b in body["results"]] == ["b0", "b1"]
    assert body["next"]
    names = {b["name"] for b in api.get("/api/v1/buckets?limit=2&offset=2").json()["results"]}
    assert names == {"b2"}


def test_retrieve_bucket_counts_memories(api, bucket):
    add_memory(bucket, "one")
    add_memory(bucket, "two")
    body = api.get(f"/api/v1/buckets/{bucket.pk}").json()
    assert body["id"] == str(bucket.pk) and body["memory_count"] == 2


def test_rename_bucket(api, bucket):
    response = api.patch(f"/api/v1/buckets/{bucket.pk}", {"name": "renamed"}, format="json")
    assert response.status_code == 200
    bucket.refresh_from_db()
    assert bucket.name == "renamed"


def test_rename_onto_existing_name_is_409(api, tenant, bucket):
    bucket_create(tenant=tenant, name="taken")
    assert api.patch(f"/api/v1/buckets/{bucket.pk}", {"name": "taken"}, format="json").status_code == 409
    bucket.refresh_from_db()
    assert bucket.name == "main"


def test_rename_onto_an_existing_name_in_another_case_is_409(api, tenant, bucket):
    bucket_create(tenant=tenant, name="Taken")
    response = api.patch(f"/api/v1/buckets/{bucket.pk}", {"name": "tAKEN"}, format="json")
    assert (response.status_code, response.json()["code"]) == (409, "bucket_exists")
    assert "'Taken'" in response.json()["detail"]
    bucket.refresh_from_db()
    assert bucket.name == "main"


def test_a_bucket_can_be_renamed_to_its_own_name_in_another_case(api, bucket):
    response = api.patch(f"/api/v1/buckets/{bucket.pk}", {"name": "Main"}, format="json")
    assert response.status_code == 200 and response.json()["name"] == "Main"


def test_delete_bucket_cascades_to_memories(admin_api, tenant, bucket):
    keep = bucket_create(tenant=tenant, name="keep")
    add_memory(bucket, "gone")
    survivor = add_memory(keep, "stays")
    assert admin_api.delete(f"/api/v1/buckets/{bucket.pk}").status_code == 204
    assert not Bucket.objects.filter(pk=bucket.pk).exists()
    assert list(Memory.objects.values_list("pk", flat=True)) == [survivor.pk]


def test_unknown_and_malformed_bucket_ids_are_404(api):
    assert api.get(f"/api/v1/buckets/{uuid.uuid4()}").status_code == 404
    assert api.get("/api/v1/buckets/not-a-uuid").status_code == 404


class TestOutsider:
    """Another tenant's token, even with admin scope, sees nothing and changes nothing."""

    def test_cannot_list(self, outsider_api, bucket):
        assert outsider_api.get("/api/v1/buckets").json()["results"] == []

    def test_cannot_retrieve(self, outsider_api, bucket):
        response = outsider_api.get(f"/api/v1/buckets/{bucket.pk}")
        missing = outsider_api.get(f"/api/v1/buckets/{uuid.uuid4()}")
        assert response.status_code == missing.status_code == 404
        assert response.json() == missing.json()  # existence is not revealed

    def test_cannot_rename(self, outsider_api, bucket):
        assert outsider_api.patch(f"/api/v1/buckets/{bucket.pk}", {"name": "pwned"}, format="json").status_code == 404
        bucket.refresh_from_db()
        assert bucket.name == "main"

    def test_cannot_delete(self, outsider_api, bucket):
        add_memory(bucket, "precious")
        assert outsider_api.delete(f"/api/v1/buckets/{bucket.pk}").status_code == 404
        assert Bucket.objects.filter(pk=bucket.pk).exists()
        assert Memory.objects.filter(bucket=bucket).count() == 1


def test_deleting_a_tenant_leaves_no_orphans(tenant, bucket, other_bucket):
    add_memory(bucket, "a")
    add_memory(bucket, "b")
    kept = add_memory(other_bucket, "c")
    services.token_issue(tenant=tenant, name="t", scopes=["read"])
    Tenant.objects.get(pk=tenant.pk).delete()
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM memories WHERE tenant_id = %s", [tenant.pk])
        assert cur.fetchone()[0] == 0
        cur.execute("SELECT count(*) FROM buckets WHERE tenant_id = %s", [tenant.pk])
        assert cur.fetchone()[0] == 0
        cur.execute("SELECT count(*) FROM api_tokens WHERE tenant_id = %s", [tenant.pk])
        assert cur.fetchone()[0] == 0
    assert list(Memory.objects.values_list("pk", flat=True)) == [kept.pk]


def test_raw_sql_tenant_delete_cascades_in_the_database(tenant, bucket):
    # Even a delete that bypasses Django leaves no orphan rows behind.
    add_memory(bucket, "a")
    with connection.cursor() as cur:
        cur.execute("DELETE FROM tenants WHERE id = %s", [tenant.pk])
        cur.execute("SELECT count(*) FROM memories WHERE bucket_id = %s", [bucket.pk])
        assert cur.fetchone()[0] == 0


def test_a_looked_up_bucket_carries_its_tenant_without_another_query(tenant, bucket, django_assert_num_queries):
    from tenants.selectors import bucket_get

    with django_assert_num_queries(1):
        found = bucket_get(tenant=tenant, bucket_id=str(bucket.pk))
        assert found.tenant.settings == tenant.settings


def test_the_upgrade_renames_names_that_differ_only_in_case_keeping_the_oldest(tenant, other_tenant):
    """Migration tenants 0004 on a database that has such names: it must not fail on them."""
    name = "0004_bucket_names_unique_regardless_of_case"
    migration = importlib.import_module(f"tenants.migrations.{name}")
    apps = MigrationLoader(connection).project_state(("tenants", name), at_end=False).apps
    with connection.cursor() as cur:  # the database as it was before 0004 (rolled back with the test)
        cur.execute("DROP INDEX buckets_tenant_name_ci_unique")
    start = datetime(2026, 1, 1, tzinfo=UTC)
    names = ["Team", "team", "TEAM", "Team (2)", "L" * 200, "l" * 200]
    made = [Bucket.objects.create(tenant=tenant, name=name) for name in names]
    for age, bucket in enumerate(made):
        Bucket.objects.filter(pk=bucket.pk).update(created_at=start + timedelta(minutes=age))
    outside = Bucket.objects.create(tenant=other_tenant, name="team")

    migration.rename_clashing_names(apps, None)

    renamed = dict(Bucket.objects.filter(pk__in=[b.pk for b in made]).values_list("pk", "name"))
    assert [renamed[b.pk] for b in made] == ["Team", "team (3)", "TEAM (4)", "Team (2)", "L" * 200, "l" * 196 + " (2)"]
    assert Bucket.objects.get(pk=outside.pk).name == "team"
    events = AuditEvent.objects.filter(action="bucket.update", actor_label="migration tenants.0004")
    assert sorted(e.details["previous_name"] for e in events) == sorted(["team", "TEAM", "l" * 200])
    assert {e.tenant_id for e in events} == {tenant.pk}
    # The index can now be built, and a second run changes nothing.
    with connection.cursor() as cur:
        cur.execute("CREATE UNIQUE INDEX buckets_tenant_name_ci_unique ON buckets (tenant_id, lower(name))")
    migration.rename_clashing_names(apps, None)
    assert dict(Bucket.objects.filter(pk__in=[b.pk for b in made]).values_list("pk", "name")) == renamed
