"""Tenant operators: staff users who see and act on only the tenants they are members of.

The cross-tenant matrix (tests/system/test_isolation_matrix.py) checks that an operator cannot
reach another tenant anywhere; these tests check that they can still do their work on
their own tenants, and how operators are made.
"""

from __future__ import annotations

import io

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from audit.models import AuditEvent
from console.scoping import SuperuserOnlyAdmin, TenantScopedAdmin, operator_tenant_ids
from console.sites import ConsoleAdminSite
from engram_site.models import JobRun
from maintenance.models import DuplicateCandidate, DuplicateStatus
from tenants import services
from tenants.models import ApiToken, Bucket, OperatorMembership
from tests.factories import make_operator, write

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(client, tenant):
    client.force_login(make_operator("acme-operator", tenant))
    return client


def test_an_operator_lists_only_their_tenants_rows(operator, bucket, other_bucket):
    services.token_issue(tenant=bucket.tenant, name="acme-agent", scopes=["read"])
    services.token_issue(tenant=other_bucket.tenant, name="outsider-agent", scopes=["read"])
    tenants = operator.get("/admin/tenants/tenant/").content.decode()
    assert "Acme" in tenants and "Outsider" not in tenants
    tokens = operator.get("/admin/tenants/apitoken/").content.decode()
    assert "acme-agent" in tokens and "outsider-agent" not in tokens
    buckets = operator.get("/admin/tenants/bucket/").context["cl"].result_list
    assert [b.pk for b in buckets] == [bucket.pk]


def test_superusers_see_every_tenant(admin_client, bucket, other_bucket):
    buckets = admin_client.get("/admin/tenants/bucket/").context["cl"].result_list
    assert {b.pk for b in buckets} == {bucket.pk, other_bucket.pk}
    assert operator_tenant_ids(User.objects.get(username="admin")) is None


def test_a_staff_user_without_memberships_sees_no_tenant_data(client, bucket):
    client.force_login(make_operator("nobody"))
    assert list(client.get("/admin/tenants/bucket/").context["cl"].result_list) == []
    report = client.get("/admin/console/health/").context["report"]
    assert report.tenants == [] and report.totals["memories"] == 0
    assert client.get(f"/admin/tenants/bucket/{bucket.pk}/change/").status_code == 404


def test_an_operator_works_on_their_own_tenant(operator, bucket, tenant):
    # Revoke a token (with its confirmation step).
    token = services.token_issue(tenant=tenant, name="agent", scopes=["read"]).token
    data = {"action": "revoke", "_selected_action": [token.pk], "index": 0}
    assert b"Yes, revoke 1 token" in operator.post("/admin/tenants/apitoken/", data).content
    operator.post("/admin/tenants/apitoken/", {**data, "confirm": "yes"})
    assert ApiToken.objects.get(pk=token.pk).revoked_at is not None
    # Create a bucket in their tenant.
    response = operator.post("/admin/tenants/bucket/add/", {"tenant": tenant.pk, "name": "second", "description": ""})
    assert response.status_code == 302
    second = Bucket.objects.get(tenant=tenant, name="second")
    # Keep both on a review pair.
    a, b = sorted(write(bucket, "I prefer dark roast coffee.", "Dark roast coffee is what I prefer."))
    pair = DuplicateCandidate.objects.create(
        tenant=tenant, bucket=bucket, memory_a_id=a, memory_b_id=b, similarity=0.97
    )
    operator.post("/admin/console/review/confirm/", {"pair": f"{pair.pk}:keep_both"})
    assert DuplicateCandidate.objects.get(pk=pair.pk).status == DuplicateStatus.KEPT_BOTH
    # Merge two of their buckets.
    preview = operator.post("/admin/console/bucket-merge/", {"source": second.pk, "target": bucket.pk})
    assert preview.status_code == 200 and b"Yes, merge" in preview.content
    operator.post("/admin/console/bucket-merge/", {"source": second.pk, "target": bucket.pk, "remove_source": "on",
                                                   "confirm": "yes"})  # fmt: skip
    assert not Bucket.objects.filter(pk=second.pk).exists()
    # Their tenant's pages open; the audit log names them.
    for url in (f"/admin/console/topics/{bucket.pk}/", "/admin/console/topics/", "/admin/audit/auditevent/",
                f"/admin/console/playground/?bucket={bucket.pk}&query=coffee&mode=keyword&limit=5"):  # fmt: skip
        assert operator.get(url).status_code == 200, url
    assert AuditEvent.objects.filter(actor_label="acme-operator", action="token.revoke").exists()


def test_only_superusers_create_tenants_and_see_what_spans_every_tenant(operator):
    for url in ("/admin/tenants/tenant/add/", "/admin/tenants/operatormembership/", "/admin/auth/user/",
                "/admin/engram_site/jobrun/", "/admin/django_celery_beat/periodictask/"):  # fmt: skip
        assert operator.get(url).status_code == 403, url
    health = operator.get("/admin/console/health/")
    assert health.status_code == 200 and b"health-system-hidden" in health.content


def test_a_superuser_grants_a_tenant_in_the_admin_and_it_is_audited(admin_client, client, tenant, other_tenant):
    user = make_operator("new-operator")
    response = admin_client.post("/admin/tenants/operatormembership/add/", {"user": user.pk, "tenant": tenant.pk})
    assert response.status_code == 302
    assert list(OperatorMembership.objects.filter(user=user).values_list("tenant_id", flat=True)) == [tenant.pk]
    event = AuditEvent.objects.get(action="operator.grant")
    assert event.tenant_id == tenant.pk and event.object_ids == [str(user.pk)] and event.actor_label == "admin"
    client.force_login(user)
    assert [t.pk for t in client.get("/admin/tenants/tenant/").context["cl"].result_list] == [tenant.pk]
    membership = OperatorMembership.objects.get(user=user)
    admin_client.post(f"/admin/tenants/operatormembership/{membership.pk}/delete/", {"post": "yes"})
    assert not OperatorMembership.objects.filter(user=user).exists()
    assert AuditEvent.objects.filter(action="operator.revoke", tenant=tenant).exists()
    assert list(client.get("/admin/tenants/tenant/").context["cl"].result_list) == []


def test_the_tenant_operator_command_makes_and_unmakes_operators(tenant, other_tenant):
    out = io.StringIO()
    call_command("tenant_operator", "ops", "--tenant", tenant.slug, stdout=out)
    user = User.objects.get(username="ops")
    assert user.is_staff and not user.is_superuser
    assert user.has_perm("memories.change_memory") and not user.has_perm("tenants.add_tenant")
    password = out.getvalue().strip().splitlines()[-1]
    assert user.check_password(password)
    call_command("tenant_operator", "ops", "--tenant", other_tenant.slug, stdout=io.StringIO())
    assert operator_tenant_ids(User.objects.get(pk=user.pk)) == {tenant.pk, other_tenant.pk}
    call_command("tenant_operator", "ops", "--tenant", tenant.slug, "--remove", stdout=io.StringIO())
    assert operator_tenant_ids(User.objects.get(pk=user.pk)) == {other_tenant.pk}
    assert AuditEvent.objects.filter(action="operator.revoke", tenant=tenant, actor_kind="system").exists()
    with pytest.raises(Exception, match="no-such-tenant"):
        call_command("tenant_operator", "ops", "--tenant", "no-such-tenant", stdout=io.StringIO())


def test_an_admin_registered_without_tenant_scoping_is_closed_to_tenant_operators(rf, tenant):
    from django.contrib import admin

    site = ConsoleAdminSite(name="probe")
    site.register(JobRun, admin.ModelAdmin)
    model_admin = site._registry[JobRun]
    assert isinstance(model_admin, SuperuserOnlyAdmin) and not isinstance(model_admin, TenantScopedAdmin)
    operator_request, superuser_request = rf.get("/"), rf.get("/")
    operator_request.user = make_operator("scoped", tenant)
    operator_request.user.user_permissions.add(*_all_jobrun_permissions())
    superuser_request.user = User.objects.create_superuser("root", password=None)
    assert not model_admin.has_view_permission(operator_request)
    assert not model_admin.has_module_permission(operator_request)
    assert model_admin.has_view_permission(superuser_request)


def _all_jobrun_permissions():
    from django.contrib.auth.models import Permission

    return Permission.objects.filter(content_type__app_label="engram_site", content_type__model="jobrun")
