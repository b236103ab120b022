"""Brute-force protection of the admin login, and the shared failure counters behind it."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import User

from engram_site.throttle import FailureCounter, parse_rate
from tests.support import ROOT, base_env, test_database_url

pytestmark = pytest.mark.django_db

PASSWORD = "correct-horse-battery-staple"


@pytest.fixture
def operator_user(db) -> User:
    return User.objects.create_superuser("operator", password=PASSWORD)


def login(client, username, password, address="10.0.0.1"):
    return client.post("/admin/login/", {"username": username, "password": password}, REMOTE_ADDR=address)


def test_failures_per_username_are_limited_and_answered_429(client, operator_user, settings):
    settings.ENGRAM_LOGIN_FAILURES_PER_USERNAME = "3/15m"
    codes = [login(client, "operator", f"guess-{i}", address=f"10.0.0.{i}").status_code for i in range(3)]
    assert codes == [200, 200, 200]  # the form again, with "enter a correct username and password"
    throttled = login(client, "operator", PASSWORD, address="10.0.0.1")  # an address that has failed
    assert throttled.status_code == 429
    assert "Too many failed login attempts" in throttled.content.decode()
    assert 0 < int(throttled["Retry-After"]) <= 15 * 60
    assert "_auth_user_id" not in client.session
    # Another username from the same addresses is not affected.
    User.objects.create_superuser("other", password=PASSWORD)
    assert login(client, "other", PASSWORD, address="10.0.0.1").status_code == 302


def test_the_right_password_from_a_clean_address_gets_in_past_the_username_limit(client, operator_user, settings):
    """Anyone can fail logins as 'operator'; that must not lock the operator out."""
    settings.ENGRAM_LOGIN_FAILURES_PER_USERNAME = "3/15m"
    for i in range(5):
        login(client, "operator", f"guess-{i}", address="10.6.6.6")
    assert login(client, "operator", "guess-x", address="10.6.6.6").status_code == 429
    assert login(client, "operator", PASSWORD, address="10.0.0.50").status_code == 302


def test_past_the_username_limit_a_clean_address_gets_one_wrong_guess(client, operator_user, settings):
    settings.ENGRAM_LOGIN_FAILURES_PER_USERNAME = "3/15m"
    for i in range(3):
        login(client, "operator", f"guess-{i}", address=f"10.5.0.{i}")
    assert login(client, "operator", "guess-x", address="10.5.1.1").status_code == 200  # refused, counted
    assert login(client, "operator", PASSWORD, address="10.5.1.1").status_code == 429


def test_failures_per_address_are_limited_whatever_the_username(client, operator_user, settings):
    settings.ENGRAM_LOGIN_FAILURES_PER_ADDRESS = "4/15m"
    codes = [login(client, f"user{i}", "guess").status_code for i in range(4)]
    assert codes == [200] * 4
    assert login(client, "operator", PASSWORD).status_code == 429
    assert login(client, "operator", PASSWORD, address="10.0.0.2").status_code == 302


def test_a_successful_login_clears_its_usernames_failures(client, operator_user, settings):
    settings.ENGRAM_LOGIN_FAILURES_PER_USERNAME = "3/15m"
    for _ in range(2):
        login(client, "operator", "wrong")
    assert login(client, "operator", PASSWORD).status_code == 302
    client.logout()
    for _ in range(2):
        login(client, "operator", "wrong")
    assert login(client, "operator", PASSWORD).status_code == 302


def test_the_log_names_the_address_never_the_username_or_the_password(client, operator_user, settings, caplog):
    settings.ENGRAM_LOGIN_FAILURES_PER_USERNAME = "1/15m"
    secret_guess = "Hunter2-secret-guess"
    with caplog.at_level(logging.DEBUG):
        login(client, "operator", secret_guess, address="10.1.2.3")
        login(client, "operator", secret_guess, address="10.1.2.3")
    security = [r.getMessage() for r in caplog.records if r.name == "engram.security"]
    assert security and "10.1.2.3" in security[0]
    for record in caplog.records:
        message = record.getMessage()
        assert secret_guess not in message and "operator" not in message, message


@pytest.mark.slow
def test_the_api_token_failure_counter_is_shared_with_other_processes(client, settings):
    """Failures recorded by another process (another gunicorn worker) count here."""
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {**settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], "auth_failures": "5/min"},
    }
    # Twice each limit: the counters slide, so failures recorded just before a window ends weigh
    # less once the next one starts (5 at 0:59 count ~4.9 at 1:00); twice the limit stays over it
    # for half a window, far longer than the subprocess takes to exit and the request to follow.
    script = (
        "from engram_site.throttle import FailureCounter\n"
        "c = FailureCounter('api-auth', '5/min')\n"
        "[c.record('10.7.7.7') for _ in range(10)]\n"
        "a = FailureCounter('admin-login-address', '20/15m')\n"
        "[a.record('10.7.7.8') for _ in range(40)]\n"
    )
    # The same shared cache as this process: its folder (ENGRAM_HOME) or Redis.
    env = base_env(DATABASE_URL=test_database_url(), REDIS_URL=django_settings.REDIS_URL)
    subprocess.run([sys.executable, "manage.py", "shell", "-c", script], cwd=ROOT, env=env, check=True, timeout=300,
                   capture_output=True)  # fmt: skip
    response = client.get("/api/v1/buckets", HTTP_AUTHORIZATION="Bearer egm_guess", REMOTE_ADDR="10.7.7.7")
    assert response.status_code == 429
    assert login(client, "anyone", "guess", address="10.7.7.8").status_code == 429
    assert (
        client.get("/api/v1/buckets", HTTP_AUTHORIZATION="Bearer egm_guess", REMOTE_ADDR="10.7.7.9").status_code == 401
    )


def test_concurrent_failures_are_all_counted(db):
    counter = FailureCounter("concurrency-probe", "1000/1h")

    def hammer():
        for _ in range(25):
            counter.record("10.9.9.9")

    threads = [threading.Thread(target=hammer) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    index, _ = counter._window(time.time())
    keys = [counter._key("10.9.9.9", i) for i in (index, index - 1)]
    assert sum(counter.cache.get_many(keys).values()) == 200


def test_the_sliding_window_lets_old_failures_age_out(db):
    counter = FailureCounter("window-probe", "4/60s")
    start = 1_000_000 * 60.0  # the start of a window
    for _ in range(4):
        counter.record("x", now=start + 1)
    assert counter.blocked_for("x", now=start + 2) == 59  # until 4 × 59/60 of them remain in the window
    assert counter.blocked_for("x", now=start + 61) == 0
    counter.record("x", now=start + 61)
    wait = counter.blocked_for("x", now=start + 62)  # 4 × 58/60 + 1 ≥ 4
    assert wait > 0 and counter.blocked_for("x", now=start + 62 + wait) == 0
    assert counter.blocked_for("x", now=start + 90) == 0  # 4 × 30/60 + 1 = 3
    counter.clear("x", now=start + 62)
    assert counter.blocked_for("x", now=start + 62) == 0


@pytest.mark.parametrize(
    "rate, parsed",
    [("30/min", (30, 60)), ("10/15m", (10, 900)), ("5/s", (5, 1)), ("100/hour", (100, 3600)), ("3/2d", (3, 172800))],
)
def test_rates_parse(rate, parsed):
    assert parse_rate(rate) == parsed


@pytest.mark.parametrize("rate", ["", "30", "x/min", "0/min", "5/fortnight", "5/0m"])
def test_bad_rates_are_refused(rate):
    with pytest.raises(ValueError):
        parse_rate(rate)


def test_a_malformed_limit_is_a_startup_error(settings):
    from console.apps import check_failure_rates

    assert check_failure_rates() == []
    settings.ENGRAM_LOGIN_FAILURES_PER_USERNAME = "ten per minute"
    [error] = check_failure_rates()
    assert error.id == "engram.E001" and "ENGRAM_LOGIN_FAILURES_PER_USERNAME" in error.hint
