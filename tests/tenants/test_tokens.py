"""API tokens: hashed storage, scopes, bucket restriction, expiry, revocation, throttling."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from memories.services.buckets import bucket_create
from tenants import services
from tenants.models import ApiToken, Tenant
from tests.factories import make_client

pytestmark = pytest.mark.django_db


def test_raw_token_is_not_stored_anywhere_in_the_database(tenant):
    issued = services.token_issue(tenant=tenant, name="agent", scopes=["read"])
    with connection.cursor() as cur:
        cur.execute("SELECT row_to_json(t)::text FROM api_tokens t")
        rows = [r[0] for r in cur.fetchall()]
    assert rows, "the token row exists"
    assert all(issued.secret not in row for row in rows)
    # Only the short prefix is kept in clear, for identification.
    assert issued.token.prefix == issued.secret[:12]
    assert len(issued.secret) > 40


def test_valid_token_authenticates_and_records_last_use(api, bucket):
    assert api.token.last_used_at is None
    response = api.get("/api/v1/buckets")
    assert response.status_code == 200
    api.token.refresh_from_db()
    assert api.token.last_used_at is not None


def test_missing_token_is_401_with_bearer_challenge(db):
    response = APIClient().get("/api/v1/buckets")
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("header", ["Bearer nope", "Bearer egm_wrong", "Token abc", "Bearer a b", "Basic Zm9vOmJhcg=="])
def test_bad_credentials_are_401(db, header):
    response = APIClient().get("/api/v1/buckets", HTTP_AUTHORIZATION=header)
    assert response.status_code == 401
    assert response.json()["code"] in {"authentication_failed", "not_authenticated"}


def test_revoked_token_is_401(api):
    services.token_revoke(token=api.token)
    response = api.get("/api/v1/buckets")
    assert response.status_code == 401
    assert "revoked" in response.json()["detail"]


def test_expired_token_is_401(tenant):
    client = make_client(tenant)
    ApiToken.objects.filter(pk=client.token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    response = client.get("/api/v1/buckets")
    assert response.status_code == 401
    assert "expired" in response.json()["detail"]


def test_token_not_yet_expired_works(tenant):
    client = make_client(tenant, expires_at=timezone.now() + timedelta(hours=1))
    assert client.get("/api/v1/buckets").status_code == 200


def test_inactive_tenant_token_is_401(api, tenant):
    Tenant.objects.filter(pk=tenant.pk).update(is_active=False)
    assert api.get("/api/v1/buckets").status_code == 401


def test_read_scope_cannot_write(tenant):
    reader = make_client(tenant, scopes=["read"])
    response = reader.post("/api/v1/buckets", {"name": "x"}, format="json")
    assert response.status_code == 403
    assert "write" in response.json()["detail"]
    assert not tenant.buckets.exists()


def test_write_scope_cannot_read(tenant, bucket):
    writer = make_client(tenant, scopes=["write"])
    assert writer.get("/api/v1/buckets").status_code == 403


def test_admin_scope_implies_read_and_write(tenant):
    admin = make_client(tenant, scopes=["admin"])
    assert admin.post("/api/v1/buckets", {"name": "x"}, format="json").status_code == 201
    assert admin.get("/api/v1/buckets").status_code == 200


def test_bucket_delete_needs_admin_scope(api, admin_api, bucket):
    assert api.delete(f"/api/v1/buckets/{bucket.pk}").status_code == 403
    assert admin_api.delete(f"/api/v1/buckets/{bucket.pk}").status_code == 204


def test_bucket_restricted_token_sees_only_its_bucket(tenant, bucket):
    other = bucket_create(tenant=tenant, name="other")
    restricted = make_client(tenant, scopes=["read", "write"], bucket=bucket)
    listing = restricted.get("/api/v1/buckets").json()
    assert [b["id"] for b in listing["results"]] == [str(bucket.pk)]
    assert restricted.get(f"/api/v1/buckets/{bucket.pk}").status_code == 200
    # Another bucket of the same tenant is indistinguishable from a missing one.
    assert restricted.get(f"/api/v1/buckets/{other.pk}").status_code == 404
    assert restricted.patch(f"/api/v1/buckets/{other.pk}", {"name": "z"}, format="json").status_code == 404
    assert restricted.post("/api/v1/buckets", {"name": "new"}, format="json").status_code == 403
    other.refresh_from_db()
    assert other.name == "other"


def test_token_for_another_tenants_bucket_is_refused(tenant, other_bucket):
    with pytest.raises(services.DomainError):
        services.token_issue(tenant=tenant, name="x", scopes=["read"], bucket=other_bucket)


def test_unknown_scope_is_refused(tenant):
    with pytest.raises(services.DomainError):
        services.token_issue(tenant=tenant, name="x", scopes=["read", "superuser"])


def test_repeated_bad_tokens_are_throttled(db, settings):
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {**settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], "auth_failures": "5/min"},
    }
    client = APIClient()
    codes = [client.get("/api/v1/buckets", HTTP_AUTHORIZATION=f"Bearer egm_guess{i}").status_code for i in range(8)]
    assert codes[:5] == [401] * 5
    assert codes[5:] == [429] * 3


def _failure_rate(settings, rate: str) -> None:
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {**settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], "auth_failures": rate},
    }


def test_valid_tokens_get_through_while_their_address_is_throttled(tenant, other_tenant, settings):
    _failure_rate(settings, "5/min")
    guesser = APIClient()
    codes = [guesser.get("/api/v1/buckets", HTTP_AUTHORIZATION=f"Bearer egm_guess{i}").status_code for i in range(6)]
    assert codes == [401] * 5 + [429]
    # The same address (the test client's 127.0.0.1), every tenant's valid tokens: still served.
    assert make_client(tenant).get("/api/v1/buckets").status_code == 200
    assert make_client(other_tenant, scopes=["read"]).get("/api/v1/buckets").status_code == 200
    # ... and the guessing stays throttled.
    assert guesser.get("/api/v1/buckets", HTTP_AUTHORIZATION="Bearer egm_guess9").status_code == 429


def test_forwarded_address_is_used_only_from_a_trusted_proxy(tenant, settings):
    _failure_rate(settings, "2/min")
    settings.ENGRAM_TRUSTED_PROXIES = ["10.0.0.5"]
    guess = {"HTTP_AUTHORIZATION": "Bearer egm_guess"}
    via_proxy = {"REMOTE_ADDR": "10.0.0.5"}
    client = APIClient()
    for _ in range(2):
        client.get("/api/v1/buckets", HTTP_X_FORWARDED_FOR="203.0.113.7", **via_proxy, **guess)
    assert client.get("/api/v1/buckets", HTTP_X_FORWARDED_FOR="203.0.113.7", **via_proxy, **guess).status_code == 429
    # Another client behind the same proxy has its own budget.
    assert client.get("/api/v1/buckets", HTTP_X_FORWARDED_FOR="203.0.113.8", **via_proxy, **guess).status_code == 401
    # A client that is not a trusted proxy cannot pick its address with the header.
    direct = {"REMOTE_ADDR": "198.51.100.1", **guess}
    for i in range(2):
        client.get("/api/v1/buckets", HTTP_X_FORWARDED_FOR=f"192.0.2.{i}", **direct)
    assert client.get("/api/v1/buckets", HTTP_X_FORWARDED_FOR="192.0.2.99", **direct).status_code == 429


def test_per_token_rate_limit(tenant, settings):
    rates = {**settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], "token": "3/min"}
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": rates}
    from tenants.throttling import TokenRateThrottle

    original = TokenRateThrottle.THROTTLE_RATES
    TokenRateThrottle.THROTTLE_RATES = rates
    try:
        client = make_client(tenant)
        codes = [client.get("/api/v1/buckets").status_code for _ in range(5)]
        assert codes == [200, 200, 200, 429, 429]
        # Another token of the same tenant has its own budget.
        assert make_client(tenant).get("/api/v1/buckets").status_code == 200
    finally:
        # The original class attribute: api_settings still holds this test's override here,
        # and restoring from it left "3/min" in place for every later test.
        TokenRateThrottle.THROTTLE_RATES = original


def test_create_tenant_command_prints_token_last(db):
    out = io.StringIO()
    call_command(
        "create_tenant", "Globex", "--token-name", "ci", "--scopes", "read,write", "--bucket", "b1", stdout=out
    )
    lines = out.getvalue().strip().splitlines()
    secret = lines[-1]
    assert secret.startswith("egm_") and " " not in secret
    tenant = Tenant.objects.get(name="Globex")
    token = ApiToken.objects.get(tenant=tenant)
    assert token.scopes == ["read", "write"] and token.name == "ci"
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    names = [b["name"] for b in client.get("/api/v1/buckets").json()["results"]]
    assert names == ["b1"]
