"""``./engram serve``'s command line (--host/--port override the environment, nothing else is
taken), and its stop: SIGINT or SIGTERM, also when started with SIGINT ignored."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

from engram_site.serve import parse_args
from tests.support import ROOT, base_env, free_port, http_get, wait_for


def test_port_and_host_arguments_override_the_environment(monkeypatch):
    monkeypatch.setenv("ENGRAM_HOST", "0.0.0.0")
    monkeypatch.setenv("ENGRAM_PORT", "9000")
    assert (parse_args([]).host, parse_args([]).port) == ("0.0.0.0", 9000)
    args = parse_args(["--host", "127.0.0.2", "--port", "8011"])
    assert (args.host, args.port) == ("127.0.0.2", 8011)


def test_an_unknown_argument_is_refused_not_ignored(capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--prot", "8011"])
    assert exit_info.value.code == 2
    assert "unrecognized arguments: --prot" in capsys.readouterr().err


def test_a_port_that_is_not_a_number_is_refused():
    with pytest.raises(SystemExit):
        parse_args(["--port", "eighty"])


# --- stopping it (issue 46): a serve started in the background by a non-interactive shell ----------


@pytest.fixture(scope="module")
def serve_home():
    """ENGRAM_HOME of the served instance, with its own embedded PostgreSQL (its server runs as
    its own user: the folder is outside pytest's 0700 root, as the pg_home fixture's)."""
    from engram_site import embedded_pg

    root = Path(tempfile.mkdtemp(prefix="engram-test-serve-"))
    root.chmod(0o755)
    yield root / "home"
    with contextlib.suppress(Exception):  # stopped by serve's exit already, unless a test failed
        embedded_pg.stop(root / "home")
    embedded_pg._registered.pop((root / "home").resolve(), None)
    shutil.rmtree(root, ignore_errors=True)


def _ignore_sigint() -> None:
    # What a non-interactive shell does to a command it starts with "&": SIGINT (and SIGQUIT)
    # ignored, inherited through exec.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _serve(home: Path, log: Path, *, port: int) -> subprocess.Popen:
    env = base_env(
        ENGRAM_HOME=str(home), ENGRAM_BROKER_DIR=str(home / "broker"), ENGRAM_WEB_WORKERS="1",
        ENGRAM_WORKER_CONCURRENCY="1", ENGRAM_PRELOAD_MODELS="0", PYTHONUNBUFFERED="1",
    )  # fmt: skip
    env.pop("DATABASE_URL", None)  # the embedded database in ENGRAM_HOME, as ./engram serve uses
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "engram_site.serve", "--port", str(port)], cwd=ROOT, env=env, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_ignore_sigint,
        )  # fmt: skip


def _session(sid: int) -> list[psutil.Process]:
    """The processes still alive in session ``sid`` (serve and everything it started)."""
    alive = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if os.getsid(proc.pid) == sid and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
    return alive


def _stopped(proc: subprocess.Popen, log: Path, *, timeout: float = 90) -> int:
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        pytest.fail(f"serve still ran {timeout:.0f} s after the signal:\n{log.read_text()[-3000:]}")
    wait_for(lambda: not _session(proc.pid), timeout=60, what="every process serve started to end")
    return code


@pytest.mark.slow
def test_sigint_stops_serve_during_its_start_up_though_it_was_started_with_sigint_ignored(serve_home, tmp_path):
    log = tmp_path / "serve.log"
    proc = _serve(serve_home, log, port=free_port())
    # Migrations print this once they run: main() has set its handlers by then.
    wait_for(lambda: "Operations to perform:" in log.read_text(), timeout=180, proc=proc, what="the migrations")
    os.killpg(proc.pid, signal.SIGINT)
    assert _stopped(proc, log) == 128 + signal.SIGINT, log.read_text()[-3000:]
    assert "stopped during start-up (SIGINT)" in log.read_text()


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_sigint_or_sigterm_to_the_process_group_stops_a_running_serve_cleanly(serve_home, tmp_path, signum):
    log, port = tmp_path / "serve.log", free_port()
    proc = _serve(serve_home, log, port=port)
    wait_for(lambda: http_get(f"http://127.0.0.1:{port}/health")[0] == 200, timeout=180, proc=proc, what="/health")
    assert len(_session(proc.pid)) > 2  # serve, gunicorn's master and worker, the Celery worker
    os.killpg(proc.pid, signum)
    assert _stopped(proc, log) == 0, log.read_text()[-3000:]
