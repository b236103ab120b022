"""Shared helpers for Engram benchmarks: a private server, a client, machine info, percentiles, reports.

Benchmarks talk to Engram over HTTP only. Either they start a private server
(:class:`PrivateServer`: a temporary ``ENGRAM_HOME`` with its own embedded PostgreSQL,
``manage.py migrate``, a tenant token from ``create_tenant``, gunicorn on a free port, all
through the test suite's harness in tests/support/) or they use an existing one given by
``--base-url`` and ``--token`` (:func:`add_server_args` and :func:`server_from_args` wire both
into a script's argument parser). They reach it with :class:`BenchClient`: the project's
client (clients/python, ``engram_client.Engram``) for setting up, and raw requests that are
timed, for the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from engram_client import Engram, NotFound
from results_table import format_header

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
DATA_DIR = BENCH_DIR / "data"

# The test suite's harness is imported from the repository root (the scripts run from bench/).
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests.support import (  # noqa: E402 - needs the path above
    PrivatePostgres,
    base_env,
    celery_worker,
    http_get,
    manage,
    wait_for,
    web_server,
)


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Talking to Engram: the project's client, and raw timed requests
# --------------------------------------------------------------------------------------------


class ApiError(RuntimeError):
    def __init__(self, method: str, path: str, status: int, body: Any):
        detail = body.get("detail") if isinstance(body, dict) else body
        super().__init__(f"{method} {path} -> HTTP {status}: {str(detail)[:500]}")
        self.status = status
        self.body = body


@dataclass
class Response:
    status: int
    data: Any
    elapsed: float  # seconds, request sent to body read
    headers: dict[str, str] = field(default_factory=dict)


class BenchClient:
    """The project's client (:class:`engram_client.Engram`, as ``.engram``) for setting up and
    reading back, plus raw requests that are timed and never retried, for the figures a
    benchmark reports (``ingest``, ``search``, ``request``). Both share one keep-alive
    connection pool. Use one per thread, like a client in a benchmark would."""

    def __init__(self, base_url: str, token: str, timeout: float = 120.0):
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(
            timeout=timeout, headers={"Authorization": f"Bearer {token}", "Accept": "application/json"}
        )
        self.engram = Engram(self.base_url, token, http_client=self._http)

    def close(self) -> None:
        self._http.close()  # Engram was given this pool: closing it is ours to do

    def __enter__(self) -> BenchClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def request(
        self, method: str, path: str, body: Any = None, expect: int | Sequence[int] | None = (200, 201, 204)
    ) -> Response:
        """Send one request, as it is, and time it. Raises ApiError when the status is not in
        ``expect`` (None accepts any), and ConnectionError (an OSError, as before) when no
        answer came: a benchmark counts failures, it does not retry them."""
        started = time.perf_counter()
        try:
            resp = self._http.request(method, self.base_url + path, json=body)
        except httpx.TransportError as exc:
            raise ConnectionError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        elapsed = time.perf_counter() - started
        try:
            data = resp.json() if resp.content else None
        except ValueError:
            data = resp.text
        if expect is not None:
            allowed = (expect,) if isinstance(expect, int) else tuple(expect)
            if resp.status_code not in allowed:
                raise ApiError(method, path, resp.status_code, data)
        return Response(resp.status_code, data, elapsed, dict(resp.headers))

    def ready(self) -> bool:
        try:
            return self.request("GET", "/ready", expect=None).status == 200
        except OSError:
            return False

    def ingest(self, bucket_id: str, memories: list[dict], **extra: Any) -> Response:
        """POST up to 1000 memories (a sequence unless ``sequence=False``), timed; ``data["results"]``
        holds ``{"id", "deduplicated"}`` per item in input order."""
        if not memories or len(memories) > 1000:
            raise ValueError("a batch holds 1 to 1000 memories")
        return self.request("POST", f"/api/v1/buckets/{bucket_id}/memories", {"memories": memories, **extra}, 201)

    def search(self, bucket_id: str, query: str, **params: Any) -> Response:
        """POST a search, timed; ``params`` are body fields (mode, limit, explain, ranking, now, filters…)."""
        body = {"query": query, **{k: v for k, v in params.items() if v is not None}}
        return self.request("POST", f"/api/v1/buckets/{bucket_id}/search", body, expect=200)

    # Setting up, through the project's client.

    def create_bucket(self, name: str, description: str = "") -> str:
        return self.engram.create_bucket(name, description=description or None).id

    def find_bucket(self, name: str) -> str | None:
        """The id of the tenant's bucket called ``name``, or None."""
        return next((b.id for b in self.engram.list_buckets(page_size=100) if b.name == name), None)

    def delete_bucket(self, bucket_id: str) -> None:
        """Delete a bucket; one already gone is fine (cleaning up after an interrupted run)."""
        with contextlib.suppress(NotFound):
            self.engram.delete_bucket(bucket_id)


# --------------------------------------------------------------------------------------------
# ./engram serve as a user runs it, on a fresh home (the benchmarks of the default serve)


@dataclass
class Served:
    """A running ``./engram serve``: where it answers, a tenant token, and its environment."""

    base_url: str
    token: str
    env: dict[str, str]
    home: Path
    process: subprocess.Popen


@contextlib.contextmanager
def engram_serve(
    home: Path,
    *,
    port: int,
    tenant: str,
    bucket: str | None = None,
    settings: dict[str, str] | None = None,
    ready_timeout: float = 300,
    stop_timeout: float = 60,
    keep_home: bool = False,
) -> Iterator[Served]:
    """``./engram serve`` (web, worker and beat, as a user starts it) on the fresh ``home``, with its
    embedded PostgreSQL and ``settings`` over the environment; a tenant named ``tenant`` (with a
    bucket ``bucket``, if named). Stopped as Ctrl-C stops it (SIGINT to its process group, SIGKILL
    after ``stop_timeout``), and ``home`` removed unless ``keep_home``."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "ENGRAM_TOKEN_RATE": "100000/min", **(settings or {})}
    env.update({"ENGRAM_HOME": str(home), "ENGRAM_PORT": str(port)})
    env.pop("DATABASE_URL", None)  # the fresh home's embedded database, not an operator's
    log = open(home / "serve.log", "ab")  # noqa: SIM115 - closed below
    serve = subprocess.Popen([str(REPO_ROOT / "engram"), "serve"], cwd=REPO_ROOT, env=env, stdout=log, stderr=log,
                             start_new_session=True)  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_for(lambda: http_get(base + "/ready")[0] == 200, timeout=ready_timeout, proc=serve, interval=0.5)
        except (RuntimeError, TimeoutError):
            raise RuntimeError(f"serve did not start: {(home / 'serve.log').read_text()[-2000:]}") from None
        command = [
            str(REPO_ROOT / "engram"),
            "manage",
            "create_tenant",
            tenant,
            *(["--bucket", bucket] if bucket else []),
        ]
        made = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=True)
        token = next(w for w in made.stdout.split() if w.startswith("egm_"))
        yield Served(base_url=base, token=token, env=env, home=home, process=serve)
    finally:
        os.killpg(serve.pid, signal.SIGINT)
        try:
            serve.wait(timeout=stop_timeout)
        except subprocess.TimeoutExpired:
            os.killpg(serve.pid, signal.SIGKILL)
        log.close()
        if not keep_home:
            shutil.rmtree(home, ignore_errors=True)


# A private server: the test suite's harness (tests/support/)
# --------------------------------------------------------------------------------------------


def _on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def _exit_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit, so ``kill PID`` unwinds through the ``with`` blocks that
    stop a private server (by default SIGTERM ends Python at once and leaves gunicorn and the
    embedded PostgreSQL running). Only from the main thread, and only over the default action."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Ignore SIGINT and SIGTERM while the block runs (a second Ctrl-C must not cut a stop short),
    then restore the previous handlers. Does nothing outside the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


@dataclass
class ServerOptions:
    workers: int = 2
    threads: int = 4
    port: int | None = None
    home: Path | None = None  # default: a new temporary directory
    keep_home: bool = False
    ready_timeout: float = 300.0
    worker: bool = False  # also start a Celery worker (async enrichment) with beat
    extra_env: dict[str, str] = field(default_factory=dict)
    # A fixed tenant name makes a kept home reusable: the tenant is created once and its token
    # saved in $ENGRAM_HOME/bench-token-<tenant> (mode 600); later starts reuse it. None: a new
    # tenant per start.
    tenant: str | None = None


class PrivateServer:
    """Engram on a temporary ENGRAM_HOME, started with the test suite's harness: its embedded
    PostgreSQL (``PrivatePostgres``), ``manage.py migrate`` and a tenant token, gunicorn
    (``web_server``) and optionally a Celery worker (``celery_worker``); everything stopped on
    exit, by the handles that started it.

        with PrivateServer(ServerOptions(workers=2)) as server:
            client = server.client()
    """

    def __init__(self, options: ServerOptions | None = None):
        self.options = options or ServerOptions()
        self.home: Path | None = None
        self.token: str | None = None
        self.base_url: str | None = None
        self._env: dict[str, str] | None = None
        self._postgres: PrivatePostgres | None = None
        self._processes = contextlib.ExitStack()
        self._created_home = False

    def env(self) -> dict[str, str]:
        """The environment of every process of this server (and of in-process children)."""
        assert self._env is not None, "server not started"
        return dict(self._env)

    def _make_env(self) -> dict[str, str]:
        env = base_env(
            ENGRAM_HOME=str(self.home),
            TRANSFORMERS_OFFLINE="1",
            TOKENIZERS_PARALLELISM="false",
            # Migrate, create_tenant and the servers join the PostgreSQL this process started and
            # never stop it; PrivatePostgres.stop() does, at the end.
            ENGRAM_EMBEDDED_PG_KEEP="1",
            ENGRAM_TOKEN_RATE="10000000/min",  # a benchmark is not an abusive client
            PYTHONUNBUFFERED="1",
        )
        env.pop("DATABASE_URL", None)  # the embedded PostgreSQL in $ENGRAM_HOME/pgdata, not another
        if "ENGRAM_WORKER_YIELD_SECONDS" not in os.environ:
            # base_env turns the worker's pause for requests off, as tests want; a benchmark
            # measures a deployment as it ships, so the setting keeps its default.
            env.pop("ENGRAM_WORKER_YIELD_SECONDS", None)
        env.update(self.options.extra_env)
        return env

    def _tenant_token(self) -> str:
        assert self.home is not None and self._env is not None
        name = self.options.tenant
        saved = self.home / f"bench-token-{name}" if name else None
        if saved is not None and saved.exists():
            log(f"reusing tenant {name!r} (token from {saved})")
            return saved.read_text().strip()
        tenant = name or f"bench-{os.getpid()}-{int(time.time())}"
        out = manage("create_tenant", tenant, "--scopes", "read,write,admin", env=self._env, timeout=900).stdout
        token = out.strip().splitlines()[-1].strip()
        if saved is not None:
            saved.touch(mode=0o600)
            saved.write_text(token + "\n")
        return token

    def start(self) -> PrivateServer:
        _exit_on_sigterm()
        opts = self.options
        if opts.home is None:
            self.home = Path(tempfile.mkdtemp(prefix="engram-bench-", dir="/tmp"))
            self._created_home = True
        else:
            self.home = opts.home.resolve()
            self.home.mkdir(parents=True, exist_ok=True)
        log(f"ENGRAM_HOME={self.home}")
        try:
            self._env = self._make_env()
            self._postgres = PrivatePostgres(self.home)
            started = time.perf_counter()
            manage("migrate", "--no-input", "-v", "0", env=self._env, timeout=900)
            log(f"migrated in {time.perf_counter() - started:.1f}s")
            self.token = self._tenant_token()
            self.base_url = self._processes.enter_context(
                web_server(
                    self._env,
                    workers=opts.workers,
                    threads=opts.threads,
                    timeout=300,
                    port=opts.port,
                    log=self.home / "gunicorn.log",
                )  # fmt: skip
            )
            log(f"gunicorn at {self.base_url}, log {self.home / 'gunicorn.log'}")
            if opts.worker:
                self._processes.enter_context(
                    celery_worker(self._env, log=self.home / "celery.log", beat=True, concurrency=os.cpu_count() or 1)
                )
                log(f"celery worker and beat, log {self.home / 'celery.log'}")
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        # web_server waited for /health (the process answers); /ready adds the database and
        # the migrations, and the first answer can take a while on a cold machine.
        assert self.base_url is not None
        try:
            wait_for(lambda: http_get(self.base_url + "/ready")[0] == 200, timeout=self.options.ready_timeout,
                     interval=0.5)  # fmt: skip
        except TimeoutError:
            limit = self.options.ready_timeout
            raise TimeoutError(f"Engram was not ready after {limit:.0f}s; see {self.home}") from None
        log(f"ready at {self.base_url}")

    def client(self, timeout: float = 120.0) -> BenchClient:
        assert self.base_url and self.token, "server not started"
        return BenchClient(self.base_url, self.token, timeout=timeout)

    def stop(self) -> None:
        with _signals_held():
            self._stop()

    def _stop(self) -> None:
        self._processes.close()  # the worker, then gunicorn: each waits for its own to end
        if self._postgres is not None:
            try:
                self._postgres.stop()
            except Exception as exc:  # say so, and go on removing what is ours
                log(f"could not stop the embedded PostgreSQL cleanly: {exc}")
            self._postgres = None
        if self.home is not None and self._created_home and not self.options.keep_home:
            shutil.rmtree(self.home, ignore_errors=True)

    def __enter__(self) -> PrivateServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


@dataclass
class Target:
    """Where a benchmark sends its requests."""

    base_url: str
    token: str
    private: PrivateServer | None = None
    home: Path | None = None  # the server's ENGRAM_HOME when known (private server, or --home)

    def client(self, timeout: float = 120.0) -> BenchClient:
        return BenchClient(self.base_url, self.token, timeout=timeout)

    def describe(self) -> str:
        if self.private:
            o = self.private.options
            return f"private server ({o.workers} gunicorn workers x {o.threads} threads, embedded PostgreSQL)"
        return f"existing server at {self.base_url}"


def add_server_args(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("server")
    g.add_argument("--base-url", help="use a running Engram (with --token) instead of starting a private one")
    g.add_argument("--token", default=os.environ.get("ENGRAM_TOKEN"), help="API token (default: $ENGRAM_TOKEN)")
    g.add_argument("--workers", type=int, default=2, help="gunicorn workers of the private server")
    g.add_argument("--threads", type=int, default=4, help="gunicorn threads per worker of the private server")
    g.add_argument("--port", type=int, help="port of the private server (default: a free one)")
    g.add_argument(
        "--home",
        type=Path,
        help="ENGRAM_HOME of the private server (default: a temporary directory); with --base-url, that "
        "server's home, for the parts a script measures in-process or in SQL",
    )
    g.add_argument("--keep-home", action="store_true", help="keep the temporary ENGRAM_HOME afterwards")
    g.add_argument("--with-worker", action="store_true", help="also start a Celery worker for async enrichment")


@contextlib.contextmanager
def server_from_args(args: argparse.Namespace, tenant: str | None = None) -> Iterator[Target]:
    """A private server (or the one given by --base-url). ``tenant``: see ServerOptions.tenant."""
    if args.base_url:
        if not args.token:
            raise SystemExit("--base-url needs --token (or $ENGRAM_TOKEN)")
        home = args.home.resolve() if getattr(args, "home", None) else None
        yield Target(args.base_url.rstrip("/"), args.token, home=home)
        return
    options = ServerOptions(
        workers=args.workers,
        threads=args.threads,
        port=args.port,
        home=args.home,
        keep_home=args.keep_home,
        worker=args.with_worker,
        tenant=tenant,
    )
    with PrivateServer(options) as server:
        assert server.base_url and server.token
        yield Target(server.base_url, server.token, private=server, home=server.home)


# --------------------------------------------------------------------------------------------
# Machine info, percentiles, reports
# --------------------------------------------------------------------------------------------


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _ram_gib() -> float | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024 / 1024
    return None


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state first), or None."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _ticks(fields: list[str]) -> int:
    """User + system clock ticks of a process, from its ``_proc_stat`` fields."""
    return int(fields[11]) + int(fields[12])


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process on this machine; None for one elsewhere (a
    database server on another host, say)."""
    fields = _proc_stat(pid)
    if fields is None:
        return None
    return _ticks(fields) / os.sysconf("SC_CLK_TCK")


def server_cpu_seconds(backend_pid: int) -> float | None:
    """CPU seconds of a whole PostgreSQL server on this machine, found from one of its backends:
    the postmaster, its live children (backends, WAL writer, checkpointer, autovacuum) and the
    children it has already reaped. None when the server runs elsewhere."""
    backend = _proc_stat(backend_pid)
    if backend is None:
        return None
    postmaster = int(backend[1])
    fields = _proc_stat(postmaster)
    if fields is None:
        return None
    ticks = _ticks(fields) + int(fields[13]) + int(fields[14])  # its own time and its reaped children's
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (child := _proc_stat(int(entry.name))) and int(child[1]) == postmaster:
            ticks += _ticks(child)
    return ticks / os.sysconf("SC_CLK_TCK")


def git_commit() -> str:
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return f"{sha}{' (uncommitted changes)' if dirty else ''}"
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine_info() -> dict[str, Any]:
    ram = _ram_gib()
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": affinity,
        "ram": f"{ram:.1f} GiB" if ram else "unknown",
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "commit": git_commit(),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def machine_markdown(info: dict[str, Any] | None = None) -> str:
    info = info or machine_info()
    return "\n".join(
        [
            f"- date: {info['date']}",
            f"- commit: {info['commit']}",
            f"- CPU: {info['cpu']} ({info['cores']} cores, {info['usable_cores']} usable)",
            f"- RAM: {info['ram']}",
            f"- OS: {info['os']}, Python {info['python']}",
        ]
    )


def run_together(worker: Callable[[int, Callable[[], None]], None], count: int, name: str = "worker") -> float:
    """Run ``worker(i, go)`` in ``count`` threads. Each calls ``go()`` once its own setup (a
    connection, a client) is done; the clock starts when all of them have. Returns the seconds
    from then until the last one ends."""
    barrier = threading.Barrier(count + 1)
    threads = [threading.Thread(target=worker, args=(i, barrier.wait), name=f"{name}-{i}") for i in range(count)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def percentile(values: Sequence[float], p: float) -> float:
    """Linear-interpolated percentile (numpy's default method); p in [0, 100]."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    if len(ordered) == 1:
        return float(ordered[0])
    rank = (len(ordered) - 1) * p / 100.0
    lo = int(rank)
    hi = min(lo + 1, len(ordered) - 1)
    return float(ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo))


def latency_summary(seconds: Sequence[float]) -> dict[str, float]:
    """Milliseconds: count, mean, p50, p90, p95, p99, max."""
    ms = [s * 1000.0 for s in seconds]
    if not ms:
        return {"count": 0}
    return {
        "count": len(ms),
        "mean": sum(ms) / len(ms),
        "p50": percentile(ms, 50),
        "p90": percentile(ms, 90),
        "p95": percentile(ms, 95),
        "p99": percentile(ms, 99),
        "max": max(ms),
    }


def median(values: Sequence[float]) -> float:
    """The median (nan for no values)."""
    return percentile(values, 50)


def machine_line(info: dict[str, Any]) -> str:
    """The machine on one line, for a report's header."""
    return (
        f"{info['cpu']}, {info['cores']} cores ({info['usable_cores']} usable), {info['ram']}, {info['os']}, "
        f"Python {info['python']}"
    )


def report_header(
    benchmark: str,
    headline: str,
    *,
    series: str = "",
    info: dict[str, Any] | None = None,
    command: str | None = None,
) -> str:
    """The block on top of a report that bench/results_table.py reads into RESULTS.md.
    ``benchmark``: the script's file name; ``headline``: the figures a reader wants first."""
    info = info or machine_info()
    return format_header(
        {
            "benchmark": Path(benchmark).name,
            "series": series,
            "date": info["date"],
            "machine": machine_line(info),
            "commit": info["commit"],
            "command": command or command_line(),
            "headline": headline,
        }
    )


def size_label(rows: int) -> str:
    """100000 -> "100k", 1000000 -> "1m": the series of a benchmark run at several sizes."""
    if rows >= 1_000_000 and rows % 1_000_000 == 0:
        return f"{rows // 1_000_000}m"
    if rows >= 1_000 and rows % 1_000 == 0:
        return f"{rows // 1_000}k"
    return str(rows)


def default_report_path(name: str) -> Path:
    """bench/results/<name>-<YYYY-MM-DD>.md"""
    return RESULTS_DIR / f"{name}-{datetime.now(UTC).strftime('%Y-%m-%d')}.md"


def write_report(text: str, path: Path, *, header: str = "") -> Path:
    """Write a Markdown report (creating its folder) under its ``header`` (:func:`report_header`),
    print the report to stdout, and return the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    body = text if text.endswith("\n") else text + "\n"
    path.write_text(f"{header}\n{body}" if header else body, encoding="utf-8")
    print(text, flush=True)
    log(f"report written to {path}")
    return path


def publish_report(text: str, *, out: Path | None, name: str, no_write: bool = False, header: str = "") -> None:
    """Print the report (``no_write``) or write it to ``out`` (default bench/results/<name>-<date>.md)."""
    if no_write:
        print(text)
    else:
        write_report(text, out or default_report_path(name), header=header)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], align: str | None = None) -> str:
    """A GitHub-flavoured Markdown table; ``align`` is one letter per column (l, r, c)."""

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.3f}"
        return str(v)

    align = align or "l" + "r" * (len(headers) - 1)
    marks = {"l": ":---", "r": "---:", "c": ":---:"}
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join(marks[a] for a in align) + " |"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def command_line() -> str:
    """The command that ran this script, relative to the repository root when possible."""
    argv = list(sys.argv)
    with contextlib.suppress(ValueError):
        argv[0] = str(Path(argv[0]).resolve().relative_to(REPO_ROOT))
    return " ".join(_shell_quote(a) for a in ["python", *argv])


def _shell_quote(arg: str) -> str:
    safe = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%+=:,./-_")
    if arg and all(c in safe for c in arg):
        return arg
    return "'" + arg.replace("'", "'\"'\"'") + "'"


def parse_iso(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def iso(dt: datetime) -> str:
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def server_timing(headers: dict) -> dict[str, float]:
    """An answer's ``Server-Timing`` header as stage -> milliseconds (empty when it has none).
    The ``db`` stage's statement count comes as ``db.statements``."""
    value = next((v for k, v in headers.items() if k.lower() == "server-timing"), "")
    stages: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in value.split(","))):
        name, *params = part.split(";")
        for param in params:
            key, _, raw = param.partition("=")
            if key == "dur":
                stages[name] = float(raw)
            elif key == "desc" and name == "db":
                stages["db.statements"] = float(raw.strip('"').split()[0])
    return stages


def median_stages(runs: list[dict[str, float]]) -> dict[str, float]:
    """Per stage, the median over the answers that ran it."""
    names: list[str] = []
    for run in runs:
        names += [n for n in run if n not in names]
    return {name: median([run[name] for run in runs if name in run]) for name in names}
