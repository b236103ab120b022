"""A web server that is starting or restarting refuses connections until it can answer them:
gunicorn's master loads the application before it binds its port (engram_site/gunicorn_config.py,
``preload_app``), so a call during a start fails at once, as against a stopped server, instead
of waiting in the listen queue for a worker still importing Django."""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request

import pytest

from tests.support import Process, base_env, free_port, http_get, test_database_url, wait_for

# Engram's WSGI module, imported only once the file ``ENGRAM_TEST_PAUSE`` is removed: the test
# holds the server at the moment it loads the application, for as long as it needs.
PAUSED_APP = """
import os, time
from pathlib import Path

pause = Path(os.environ["ENGRAM_TEST_PAUSE"])
pause.touch()
deadline = time.monotonic() + 120
while pause.exists() and time.monotonic() < deadline:
    time.sleep(0.05)  # sleep-ok: polls the file the test removes

from engram_site.wsgi import application  # noqa: E402,F401
"""


@pytest.mark.slow
@pytest.mark.django_db
def test_a_call_while_the_web_server_loads_the_application_is_refused_at_once_not_left_waiting(tmp_path):
    (tmp_path / "paused_app.py").write_text(PAUSED_APP)
    pause, port = tmp_path / "pause", free_port()
    env = base_env(
        DATABASE_URL=test_database_url(), ENGRAM_EMBEDDINGS="off", ENGRAM_TEST_PAUSE=str(pause),
        PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])),
    )  # fmt: skip
    server = Process(
        [sys.executable, "-m", "gunicorn", "paused_app:application", "--config", "python:engram_site.gunicorn_config",
         "--bind", f"127.0.0.1:{port}", "--workers", "1", "--threads", "2", "--no-control-socket"],
        env=env, log=tmp_path / "server.log", ready=pause.exists,
    )  # fmt: skip
    server.start()  # returns once the server is loading the application
    try:
        try:
            # Before: the master had bound the port and its worker was importing the application;
            # the call waited for it (here until this timeout, as long as the pause lasts).
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as answer:
                pytest.fail(f"answered {answer.status} by a server still loading its application")
        except urllib.error.URLError as exc:
            assert isinstance(exc.reason, ConnectionRefusedError), f"not refused: {exc.reason!r}"
        except TimeoutError:
            pytest.fail("the call waited 10 s unanswered: the server held its port while it loaded the application")
        assert server.alive()
        pause.unlink()  # the application loads: the server binds and answers
        wait_for(lambda: http_get(f"http://127.0.0.1:{port}/health")[0] == 200, timeout=120, proc=server.proc)
    finally:
        server.stop()
