"""A web server that is starting or restarting refuses connections until it can answer them:
gunicorn's master loads the application before it binds its port (engram_site/gunicorn_config.py,
``preload_app``), so a call during a start fails at once, as against a stopped server, instead
of waiting in the listen queue for a worker still importing Django."""

from __future__ import annotations

import json
import os
import subprocess
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


# What the master loads for its workers (engram_site/wsgi.py, _load_before_fork): the lemmatizer
# and the token counter, so that a worker's first write does not import spaCy, PyTorch and
# transformers (about 10 s); and no thread with them, which a fork would not carry.
LOAD_CHECK = """
import json, os, sys

def native_threads():
    return len(os.listdir("/proc/self/task"))

import django
django.setup()
from engram_site.providers import embedding, lemmatizer
before = (native_threads(), lemmatizer._nlp is not None, embedding._tokenizer is not None)
import engram_site.wsgi
after = (native_threads(), lemmatizer._nlp is not None, embedding._tokenizer is not None)
pid = os.fork()
if pid == 0:  # a worker: what it needs is there, and works
    ok = lemmatizer.lemmatize("Maya moved to Porto") == "maya move porto" and embedding.count_tokens(["a b"]) == [2]
    os._exit(0 if ok else 3)
_, status = os.waitpid(pid, 0)
print(json.dumps({"before": before, "after": after, "child": os.waitstatus_to_exitcode(status),
                  "onnxruntime": "onnxruntime" in sys.modules}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("preload", ["1", "0"])
def test_the_master_loads_the_lemmatizer_and_token_counter_for_its_workers_and_starts_no_thread(preload, tmp_path):
    env = base_env(
        DATABASE_URL=test_database_url(), ENGRAM_PRELOAD_MODELS=preload, DJANGO_SETTINGS_MODULE="engram_site.settings"
    )
    out = subprocess.run([sys.executable, "-c", LOAD_CHECK], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    threads_before, *loaded_before = report["before"]
    threads_after, *loaded_after = report["after"]
    assert loaded_before == [False, False]
    assert loaded_after == ([True, True] if preload == "1" else [False, False])
    assert threads_after == threads_before  # loading them started no thread in the master
    assert not report["onnxruntime"]  # the embedding model stays per worker
    assert report["child"] == 0


# What a worker's full garbage collection walks (engram_site/gunicorn_config.py, pre_fork): the
# objects preloading made are frozen in the master before the fork, so the worker's collector
# walks its own objects only (a full walk of the master's took ~300 ms with the GIL held).
FREEZE_CHECK = """
import gc, json, os

import django
django.setup()
import engram_site.wsgi
from engram_site import gunicorn_config

loaded = len(gc.get_objects())
gunicorn_config.pre_fork(None, None)
pid = os.fork()
if pid == 0:
    print(json.dumps({"loaded": loaded, "frozen": gc.get_freeze_count(), "walked": len(gc.get_objects())}), flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
"""


@pytest.mark.slow
def test_a_worker_does_not_walk_what_the_master_loaded_in_its_garbage_collections():
    env = base_env(DATABASE_URL=test_database_url(), ENGRAM_PRELOAD_MODELS="1",
                   DJANGO_SETTINGS_MODULE="engram_site.settings")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", FREEZE_CHECK], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["loaded"] > 100_000  # Django, the apps, spaCy, PyTorch and the tokenizer's modules
    assert report["frozen"] >= 0.9 * report["loaded"]
    assert report["walked"] < 0.05 * report["loaded"]
