"""Security basics: the production profile, secrets kept out of logs, tokens, CSRF, headers."""

from __future__ import annotations

import ast
import json
import logging
import re
import secrets
import subprocess
import sys

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from audit.models import AuditEvent
from tenants import services
from tenants.models import ApiToken
from tests.factories import make_client
from tests.support import ROOT, base_env, test_database_url

PRODUCTION = {
    "ENGRAM_ENV": "production",
    "SECRET_KEY": secrets.token_urlsafe(64),
    "ALLOWED_HOSTS": "engram.example.com",
}


def run_python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )


SHOW_SETTINGS = """
import django, json
django.setup()
from django.conf import settings as s
print(json.dumps({name: getattr(s, name, None) for name in (
    "DEBUG", "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE", "SESSION_COOKIE_HTTPONLY", "SECURE_HSTS_SECONDS",
    "SECURE_SSL_REDIRECT", "X_FRAME_OPTIONS", "SECURE_CONTENT_TYPE_NOSNIFF")}))
"""


@pytest.mark.slow
@pytest.mark.django_db
def test_check_deploy_is_clean_in_the_production_profile():
    env = base_env(DATABASE_URL=test_database_url(), **PRODUCTION)
    proc = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no issues" in proc.stdout


@pytest.mark.slow
@pytest.mark.django_db
def test_production_profile_has_debug_off_and_secure_cookies():
    proc = run_python(SHOW_SETTINGS, base_env(DATABASE_URL=test_database_url(), **PRODUCTION))
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout.strip().splitlines()[-1])
    assert shown["DEBUG"] is False
    assert shown["SESSION_COOKIE_SECURE"] is True
    assert shown["CSRF_COOKIE_SECURE"] is True
    assert shown["SESSION_COOKIE_HTTPONLY"] is True
    assert shown["SECURE_HSTS_SECONDS"] >= 31536000
    assert shown["SECURE_SSL_REDIRECT"] is True
    assert shown["X_FRAME_OPTIONS"] == "DENY"


@pytest.mark.slow
@pytest.mark.django_db
def test_debug_is_off_unless_asked_for_even_in_development():
    env = base_env(DATABASE_URL=test_database_url(), ENGRAM_ENV="development")
    env.pop("ENGRAM_DEBUG", None)
    proc = run_python(SHOW_SETTINGS, env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["DEBUG"] is False


@pytest.mark.slow
@pytest.mark.django_db
def test_production_refuses_to_start_without_a_secret_key():
    env = base_env(DATABASE_URL=test_database_url(), **{**PRODUCTION, "SECRET_KEY": ""})
    proc = run_python("import django; django.setup()", env)
    assert proc.returncode != 0
    assert "SECRET_KEY must be set" in proc.stderr


def test_token_check_is_constant_time(db, tenant, monkeypatch):
    import hmac

    from tenants import models

    issued = services.token_issue(tenant=tenant, name="ct", scopes=["read"])
    calls = []
    real = hmac.compare_digest

    def spy(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(models.hmac, "compare_digest", spy)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {issued.secret}")
    assert client.get("/api/v1/buckets").status_code == 200
    assert calls, "the token's hash must be compared with hmac.compare_digest"
    assert all(issued.secret not in (a, b) for a, b in calls)  # hashes are compared, never the secret


@pytest.mark.django_db
def test_secrets_and_tokens_never_reach_the_logs_or_the_audit_log(tenant, bucket, caplog):
    caplog.set_level(logging.DEBUG)
    api = make_client(tenant, scopes=("read", "write", "admin"))
    wrong = "egm_" + secrets.token_urlsafe(32)
    # Successful and failed requests, a write, a search, a revoked token, a bad header.
    assert api.post(f"/api/v1/buckets/{bucket.pk}/memories", {"content": "The vault code is kept elsewhere"},
                    format="json").status_code == 201  # fmt: skip
    assert api.post(f"/api/v1/buckets/{bucket.pk}/search", {"query": "vault", "mode": "keyword"},
                    format="json").status_code == 200  # fmt: skip
    assert Client(HTTP_AUTHORIZATION=f"Bearer {wrong}").get("/api/v1/buckets").status_code == 401
    assert Client(HTTP_AUTHORIZATION=f"Token {wrong}").get("/api/v1/buckets").status_code == 401
    revoked = services.token_issue(tenant=tenant, name="old", scopes=["read"])
    services.token_revoke(token=revoked.token)
    assert Client(HTTP_AUTHORIZATION=f"Bearer {revoked.secret}").get("/api/v1/buckets").status_code == 401

    logged = "\n".join(f"{r.getMessage()} {r.args!r} {r.__dict__}" for r in caplog.records)
    audited = json.dumps(list(AuditEvent.objects.values()), default=str)
    stored = json.dumps(list(ApiToken.objects.values()), default=str)
    for secret in (api.secret, wrong, revoked.secret):
        assert secret not in logged
        assert secret not in audited
        assert secret not in stored
    assert caplog.records, "the requests above should have logged something (a 401 at least)"


@pytest.mark.django_db
def test_admin_login_needs_a_csrf_token():
    user = get_user_model().objects.create_superuser("root", "root@example.com", "a-long-password-1")
    browser = Client(enforce_csrf_checks=True)
    response = browser.post("/admin/login/", {"username": user.username, "password": "a-long-password-1"})
    assert response.status_code == 403
    assert "_auth_user_id" not in browser.session


@pytest.mark.django_db
def test_admin_sends_security_headers_and_httponly_session_cookie():
    get_user_model().objects.create_superuser("root", "root@example.com", "a-long-password-1")
    browser = Client()
    page = browser.get("/admin/login/")
    assert page["X-Frame-Options"] == "DENY"
    assert page["X-Content-Type-Options"] == "nosniff"
    assert page["Referrer-Policy"] == "same-origin"
    response = browser.post("/admin/login/", {"username": "root", "password": "a-long-password-1"})
    assert response.status_code == 302
    cookie = response.cookies["sessionid"]
    assert cookie["httponly"]
    assert cookie["samesite"].lower() == "lax"


def policy(response) -> dict[str, list[str]]:
    """The Content-Security-Policy header as {directive: sources}."""
    parts = [part.split() for part in response["Content-Security-Policy"].split(";") if part.strip()]
    return {name: sources for name, *sources in parts}


STRICT = {
    "default-src": ["'self'"],
    "img-src": ["'self'"],
    "object-src": ["'none'"],
    "base-uri": ["'self'"],
    "form-action": ["'self'"],
    "frame-ancestors": ["'none'"],
}


@pytest.mark.django_db
def test_every_answer_carries_a_strict_content_security_policy(admin_client, api, bucket):
    """No inline script or style, no eval, nothing from another origin, no plugin, never framed:
    on the console's pages, the API's answers and its errors alike."""
    for response in (
        Client().get("/admin/login/"),
        admin_client.get("/admin/"),
        admin_client.get(f"/admin/tenants/bucket/{bucket.pk}/change/"),
        admin_client.get("/admin/console/review/"),
        api.get("/api/v1/buckets"),
        Client().get("/api/v1/buckets"),
        Client().get("/admin/no-such-page/"),
    ):
        assert policy(response) == STRICT, response.request["PATH_INFO"]
    # Swagger UI (/api/docs/) draws icons from data: URLs in its stylesheet; nothing more.
    assert policy(Client().get("/api/docs/")) == {**STRICT, "img-src": ["'self'", "data:"]}
    assert policy(Client().get("/api/docs/?script")) == {**STRICT, "img-src": ["'self'", "data:"]}


INLINE = re.compile(
    r"<style|\sstyle\s*=|\son[a-z]+\s*=|javascript:|<script(?![^>]*\ssrc=)(?![^>]*type=\"application/json\")",
    re.IGNORECASE,
)


def test_the_console_has_no_inline_script_or_style():
    """What the policy would refuse (the browser tests see only the pages they visit): the
    console's templates, the admin templates Engram overrides, and HTML built in Python."""
    texts = {
        path: re.sub(r"{% comment %}.*?{% endcomment %}", "", path.read_text(), flags=re.S)
        for path in [*(ROOT / "console" / "templates").rglob("*.html"), *(ROOT / "templates").rglob("*.html")]
    }
    for path in (ROOT / "console").rglob("*.py"):  # the markup in its string literals
        strings = [n.value for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Constant)]
        texts[path] = "\n".join(s for s in strings if isinstance(s, str) and "<" in s)
    found = [f"{path.relative_to(ROOT)}: {m.group(0)!r}" for path, text in texts.items() for m in INLINE.finditer(text)]
    assert found == []
    assert INLINE.search('<td style="x">') and INLINE.search("<script>go()</script>")
    assert INLINE.search('<select onchange="go()">') and INLINE.search("<style>")
    assert not INLINE.search('<script src="/static/x.js" defer></script>')
    assert not INLINE.search('<script id="x" type="application/json">{}</script>')


@pytest.mark.django_db
def test_api_answers_never_carry_a_session_or_csrf_cookie(api, bucket):
    response = api.post(f"/api/v1/buckets/{bucket.pk}/search", {"query": "anything"}, format="json")
    assert response.status_code == 200
    assert "sessionid" not in response.cookies
    assert "csrftoken" not in response.cookies
