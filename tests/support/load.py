"""Load against a live server, for the tests that hurt one under it (tests/system/): API
clients calling in a loop on threads, every call recorded; what the server logged; a tenant,
bucket, token and logged-in operator made in a server's own database."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil

from tests.scripts.http_writer import call


class Client(threading.Thread):
    """An API client calling the server in a loop (``request(k)`` -> method, path, body)
    until told to stop; every call is recorded with its answer and when it happened."""

    def __init__(self, name: str, base: str, token: str, request, stop: threading.Event, timeout: float = 30):
        super().__init__(name=name)
        self.base, self.token, self.request, self.stop, self.timeout = base, token, request, stop, timeout
        self.calls: list[dict] = []

    def run(self) -> None:
        k = 0
        while not self.stop.is_set():
            method, path, body = self.request(k)
            started = time.monotonic()
            status, payload, headers = call(method, self.base + path, self.token, body, timeout=self.timeout)
            self.calls.append(
                {"body": body, "status": status, "payload": payload, "headers": headers, "started": started,
                 "ended": time.monotonic()}
            )  # fmt: skip
            k += 1
            self.stop.wait(0.02)  # a busy client's pace, not a synchronisation: ends at once on stop

    def answered_ok_since(self, moment: float) -> int:
        return sum(c["status"] in (200, 201) and c["started"] > moment for c in list(self.calls))

    def answered_since(self, moment: float, status: int) -> int:
        return sum(c["status"] == status and c["started"] > moment for c in list(self.calls))


def run_clients(clients: list[Client], stop: threading.Event):
    """Start ``clients``; returns the function that stops them and waits for them."""
    for client in clients:
        client.start()

    def finish():
        stop.set()
        for client in clients:
            client.join(timeout=120)

    return finish


def server_workers(base: str) -> set[int]:
    """PIDs of the gunicorn worker processes behind ``base`` (children of its master,
    which this process started)."""
    bind = base.removeprefix("http://")
    for child in psutil.Process().children():
        if bind in child.cmdline():
            return {p.pid for p in child.children()}
    raise AssertionError(f"no gunicorn master for {base}")


def unhandled_errors(log: Path) -> list[str]:
    """Requests that failed with an unhandled exception, as the server logged them (Django's
    "Internal Server Error", gunicorn's "Error handling request"). Tracebacks of handled
    errors (a 503's cause, the advisory access-time flush) are not counted."""
    text = log.read_text(errors="replace") if log.exists() else ""
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines):
        if "Internal Server Error" in line or "Error handling request" in line:
            found.append("\n".join(lines[i : i + 40]))
    return found


# ``manage.py shell -c PROVISION`` in a server's environment: prints its ids as one JSON line.
PROVISION = """
import json
from django.conf import settings
from django.contrib import auth
from django.contrib.sessions.backends.db import SessionStore
from memories.services.buckets import bucket_create
from tenants import services
tenant = services.tenant_create(name="Faults")
bucket = bucket_create(tenant=tenant, name="load")
token = services.token_issue(tenant=tenant, name="load", scopes=["read", "write"])
# An operator logged in to the console (a session in the database, as after a login).
user = auth.get_user_model().objects.create_superuser("operator", "operator@example.com", "a-long-passphrase-41")
session = SessionStore()
session[auth.SESSION_KEY] = str(user.pk)
session[auth.BACKEND_SESSION_KEY] = settings.AUTHENTICATION_BACKENDS[0]
session[auth.HASH_SESSION_KEY] = user.get_session_auth_hash()
session.create()
print(json.dumps({"bucket": str(bucket.pk), "token": token.secret,
                  "cookie": f"{settings.SESSION_COOKIE_NAME}={session.session_key}"}))
"""


def page(url: str, cookie: str) -> tuple[int, str]:
    """A console page as a logged-in operator's browser gets it."""
    request = urllib.request.Request(url, headers={"Cookie": cookie})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
