"""Helpers for tests that run real processes: a private PostgreSQL, the web server.

Everything started here is stopped here, by the PID or data directory we own.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PrivatePostgres:
    """A throwaway PostgreSQL + pgvector from the same wheel, in its own data directory."""

    def __init__(self, home: Path):
        from engram_site import embedded_pg

        self._embedded_pg = embedded_pg
        self.home = home
        # ENGRAM_EMBEDDED_PG_KEEP-like behaviour: this process starts it, this process stops it.
        self.db = embedded_pg.ensure_running(home)

    @property
    def url(self) -> str:
        return self.db.url()

    def stop(self) -> None:
        self._embedded_pg.stop(self.home)

    def start(self) -> None:
        self.db = self._embedded_pg.ensure_running(self.home)


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env.update({"HF_HUB_OFFLINE": "1", "DJANGO_SETTINGS_MODULE": "engram_site.settings"})
    env.update(extra)
    return env


def manage(*args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )


@contextlib.contextmanager
def web_server(env: dict[str, str], *, workers: int = 1):
    """Run gunicorn on a free loopback port; yields the base URL."""
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "gunicorn", "engram_site.wsgi:application",
            "--bind", f"127.0.0.1:{port}", "--workers", str(workers), "--threads", "4", "--timeout", "120",
            "--no-control-socket",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: http_get(base + "/health")[0] == 200, timeout=60, proc=proc)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def http_get(url: str, headers: dict | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0, b""


def wait_for(predicate, *, timeout: float, proc: subprocess.Popen | None = None, interval: float = 0.2):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            stderr = proc.stderr.read() if proc.stderr else ""
            raise RuntimeError(f"process exited early ({proc.returncode}): {stderr[-2000:]}")
        if predicate():
            return
        time.sleep(interval)
    raise TimeoutError("condition not met in time")
