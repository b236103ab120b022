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


# ./engram serve, paused at a known point of its start-up until the file ``pause`` is removed (or
# two minutes pass): a test's signal lands there, whatever the state of the home (migrated by an
# earlier test or not, as xdist orders them) and however loaded the machine is. ``where``:
# "static files": before it collects them, in plain code; "static files, in a finalizer": the
# same, but from inside a weakref.finalize callback, where Python swallows what a signal handler
# raises (it prints "Exception ignored in ..."), as CI saw a signal land during the start-up;
# "embedded database started": the embedded PostgreSQL runs, and serve is not yet among its
# holders (engram_site/embedded_pg.py, ensure_running); "..., with another thread": the same,
# while a second thread runs in serve, one a signal sent to the process may be delivered to.
PAUSED_SERVE = """
import sys, threading, time, weakref
from pathlib import Path

from django.core import management

from engram_site import embedded_pg, serve

pause, where, argv = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]


def paused():
    pause.touch()
    deadline = time.monotonic() + 120
    while pause.exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # sleep-ok: polls the file the test removes; a signal interrupts it


def in_a_finalizer(function):
    class Thing:
        pass

    thing = Thing()
    weakref.finalize(thing, function)
    del thing  # the finalizer runs here


call_command = management.call_command


def pausing_call_command(name, *args, **options):
    if name == "collectstatic":
        in_a_finalizer(paused) if where.endswith("in a finalizer") else paused()
    return call_command(name, *args, **options)


ensure_database = embedded_pg._ensure_database


def pausing_ensure_database(db):
    paused()
    return ensure_database(db)


if where.endswith("with another thread"):
    # Started before serve, as a library's thread would be (a thread started later inherits the
    # signal mask of the thread that starts it), it waits for an event that never comes.
    threading.Thread(target=threading.Event().wait, daemon=True).start()
if where.startswith("static files"):
    management.call_command = pausing_call_command
else:
    embedded_pg._ensure_database = pausing_ensure_database
sys.exit(serve.main(argv))
"""


def _serve(home: Path, log: Path, *, port: int, paused: tuple[Path, str] | None = None) -> subprocess.Popen:
    env = base_env(
        ENGRAM_HOME=str(home), ENGRAM_BROKER_DIR=str(home / "broker"), ENGRAM_WEB_WORKERS="1",
        ENGRAM_WORKER_CONCURRENCY="1", ENGRAM_PRELOAD_MODELS="0", PYTHONUNBUFFERED="1",
    )  # fmt: skip
    env.pop("DATABASE_URL", None)  # the embedded database in ENGRAM_HOME, as ./engram serve uses
    command = [sys.executable, "-m", "engram_site.serve"]
    if paused:
        command = [sys.executable, "-c", PAUSED_SERVE, str(paused[0]), paused[1]]
    with open(log, "ab") as out:
        return subprocess.Popen(
            [*command, "--port", str(port)], cwd=ROOT, env=env, stdout=out,
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


def _stopped(proc: subprocess.Popen, log: Path, home: Path, *, timeout: float = 90) -> int:
    """serve's exit status, once every process it started has ended, the embedded PostgreSQL
    (in a session of its own) included."""
    from engram_site import embedded_pg

    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        pytest.fail(f"serve still ran {timeout:.0f} s after the signal:\n{log.read_text()[-3000:]}")
    wait_for(lambda: not _session(proc.pid), timeout=60, what="every process serve started to end")
    assert not embedded_pg.status(home)["running"], "serve left the embedded PostgreSQL running"
    return code


@pytest.mark.slow
@pytest.mark.parametrize("where", ["static files", "static files, in a finalizer"])
def test_sigint_stops_serve_during_its_start_up_though_it_was_started_with_sigint_ignored(serve_home, tmp_path, where):
    log, pause = tmp_path / "serve.log", tmp_path / "pause"
    proc = _serve(serve_home, log, port=free_port(), paused=(pause, where))
    wait_for(pause.exists, timeout=180, proc=proc, what=f"serve to reach the pause ({where})")
    os.killpg(proc.pid, signal.SIGINT)
    assert _stopped(proc, log, serve_home) == 128 + signal.SIGINT, log.read_text()[-3000:]
    output = log.read_text()
    assert "stopped during start-up (SIGINT)" in output
    assert "Engram is starting" not in output  # no web server, no worker was started
    if where.endswith("in a finalizer"):  # the signal's exception was swallowed, as in CI
        assert "Exception ignored in: <finalize object" in output, output[-3000:]


def _signal_delivered(pid: int, signum: int) -> bool:
    """``signum`` is no longer pending for ``pid`` (its handler has been called), or it is
    pending and blocked (the kernel holds it). Linux's /proc/PID/status."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    bit = 1 << (signum - 1)
    pending = int(fields["SigPnd"], 16) | int(fields["ShdPnd"], 16)
    return not pending & bit or bool(int(fields["SigBlk"], 16) & bit)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc/PID/status (Linux)")
@pytest.mark.parametrize("where", ["embedded database started", "embedded database started, with another thread"])
def test_sigterm_to_serves_process_group_while_it_starts_the_embedded_postgresql_does_not_leave_it_running(
    serve_home, tmp_path, where
):
    from engram_site import embedded_pg

    log, pause = tmp_path / "serve.log", tmp_path / "pause"
    proc = _serve(serve_home, log, port=free_port(), paused=(pause, where))
    wait_for(pause.exists, timeout=180, proc=proc, what=f"serve to reach the pause ({where})")
    # The window: the server runs, and serve is not among the holders whose exit stops it.
    state = embedded_pg.status(serve_home)
    assert state["running"] and proc.pid not in state["holders"], state
    os.killpg(proc.pid, signal.SIGTERM)
    wait_for(lambda: proc.poll() is not None or _signal_delivered(proc.pid, signal.SIGTERM), timeout=30, interval=0.01)
    pause.unlink()  # serve goes on: it registers, then handles the signal it was sent
    assert _stopped(proc, log, serve_home) == 128 + signal.SIGTERM, log.read_text()[-3000:]
    assert "stopped during start-up (SIGTERM)" in log.read_text()


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_sigint_or_sigterm_to_the_process_group_stops_a_running_serve_cleanly(serve_home, tmp_path, signum):
    log, port = tmp_path / "serve.log", free_port()
    proc = _serve(serve_home, log, port=port)
    wait_for(lambda: http_get(f"http://127.0.0.1:{port}/health")[0] == 200, timeout=180, proc=proc, what="/health")
    assert len(_session(proc.pid)) > 2  # serve, gunicorn's master and worker, the Celery worker
    os.killpg(proc.pid, signum)
    assert _stopped(proc, log, serve_home) == 0, log.read_text()[-3000:]
