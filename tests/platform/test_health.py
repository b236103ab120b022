"""/health and /ready, including /ready against a database that goes away and comes back."""

from __future__ import annotations

import json

import pytest

from tests.support import PrivatePostgres, base_env, http_get, manage, wait_for, web_server


@pytest.mark.django_db
def test_health_is_public_and_ok(client):
    response = client.get("/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.django_db
def test_ready_reports_database_and_migrations(client):
    response = client.get("/ready")
    assert response.status_code == 200
    assert response.json()["checks"] == {"database": "ok", "migrations": "ok"}


@pytest.mark.slow
def test_ready_fails_while_the_database_is_down_and_recovers(pg_home):
    pg = PrivatePostgres(pg_home)
    try:
        env = base_env(DATABASE_URL=pg.url, ENGRAM_HOME=str(pg_home))
        status, _ = 0, b""
        with web_server(env) as base:
            # Not migrated yet: the database answers, but Engram is not ready.
            status, body = http_get(base + "/ready")
            assert status == 503
            assert json.loads(body)["checks"]["migrations"].startswith("pending")

            manage("migrate", "--noinput", env=env)
            status, body = http_get(base + "/ready")
            assert status == 200, body

            pg.stop()
            status, body = http_get(base + "/ready")
            assert status == 503
            assert json.loads(body)["checks"]["database"].startswith("unreachable")
            assert http_get(base + "/health")[0] == 200  # the process itself is fine

            pg.start()
            # Same server process, no restart: it reconnects on its own.
            wait_for(lambda: http_get(base + "/ready")[0] == 200, timeout=30)
    finally:
        pg.stop()
