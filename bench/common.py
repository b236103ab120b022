"""Shared helpers for Engram benchmarks: a private server, an HTTP JSON client, machine info, percentiles.

Benchmarks talk to Engram over HTTP only. Either they start a private server
(:class:`PrivateServer`: a temporary ``ENGRAM_HOME`` with its own embedded PostgreSQL,
``manage.py migrate``, a tenant token from ``create_tenant``, gunicorn on a free port)
or they use an existing one given by ``--base-url`` and ``--token`` (:func:`add_server_args`
and :func:`server_from_args` wire both into a script's argument parser).

Only the standard library (and numpy, where a script wants it) is used.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
DATA_DIR = BENCH_DIR / "data"


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# HTTP client
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


class EngramClient:
    """A small keep-alive JSON client over http.client. Not thread-safe: use one per thread."""

    def __init__(self, base_url: str, token: str | None = None, timeout: float = 120.0):
        parsed = urllib.parse.urlsplit(base_url)
        if parsed.scheme not in ("http", "https"):
            raise ValueError(f"base URL must be http(s)://…, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.scheme = parsed.scheme
        self.host = parsed.hostname or "127.0.0.1"
        self.port = parsed.port or (443 if parsed.scheme == "https" else 80)
        self.prefix = parsed.path.rstrip("/")
        self.token = token
        self.timeout = timeout
        self._conn: http.client.HTTPConnection | None = None

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
            self._conn = cls(self.host, self.port, timeout=self.timeout)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> EngramClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def request(
        self, method: str, path: str, body: Any = None, expect: int | Sequence[int] | None = (200, 201, 204)
    ) -> Response:
        """Send one request; retry once on a dropped keep-alive connection. Raises ApiError when
        the status is not in ``expect`` (pass None to accept any status)."""
        payload = None if body is None else json.dumps(body).encode("utf-8")
        headers = {"Accept": "application/json", "Connection": "keep-alive"}
        if payload is not None:
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        full_path = self.prefix + path
        for attempt in (1, 2):
            conn = self._connection()
            started = time.perf_counter()
            try:
                conn.request(method, full_path, body=payload, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, http.client.BadStatusLine):
                self.close()
                if attempt == 2:
                    raise
                continue
            elapsed = time.perf_counter() - started
            if resp.getheader("Connection", "").lower() == "close":
                self.close()
            try:
                data = json.loads(raw) if raw else None
            except ValueError:
                data = raw.decode("utf-8", "replace")
            if expect is not None:
                allowed = (expect,) if isinstance(expect, int) else tuple(expect)
                if resp.status not in allowed:
                    raise ApiError(method, path, resp.status, data)
            return Response(resp.status, data, elapsed, dict(resp.getheaders()))
        raise AssertionError("unreachable")

    # --- the endpoints benchmarks use --------------------------------------------------------

    def ready(self) -> bool:
        try:
            return self.request("GET", "/ready", expect=None).status == 200
        except OSError:
            self.close()
            return False

    def create_bucket(self, name: str, description: str = "") -> str:
        body: dict[str, Any] = {"name": name}
        if description:
            body["description"] = description
        return str(self.request("POST", "/api/v1/buckets", body, expect=201).data["id"])

    def list_buckets(self) -> list[dict]:
        """Every bucket of the tenant (all pages)."""
        buckets: list[dict] = []
        offset = 0
        while True:
            page = self.request("GET", f"/api/v1/buckets?limit=100&offset={offset}", expect=200).data
            buckets += page["results"]
            offset += len(page["results"])
            if not page.get("next") or not page["results"]:
                return buckets

    def find_bucket(self, name: str) -> str | None:
        """The id of the tenant's bucket called ``name``, or None."""
        return next((str(b["id"]) for b in self.list_buckets() if b["name"] == name), None)

    def get_bucket(self, bucket_id: str) -> dict:
        """The bucket, with ``memory_count``."""
        return self.request("GET", f"/api/v1/buckets/{bucket_id}", expect=200).data

    def iter_memories(self, bucket_id: str, page_size: int = 500, **filters: str) -> Iterator[dict]:
        """Every memory of a bucket (newest first), following the cursor pagination."""
        query = urllib.parse.urlencode({"page_size": page_size, **filters})
        path: str | None = f"/api/v1/buckets/{bucket_id}/memories?{query}"
        while path:
            page = self.request("GET", path, expect=200).data
            yield from page["results"]
            nxt = page.get("next")
            if not nxt:
                return
            parts = urllib.parse.urlsplit(nxt)
            path = parts.path[len(self.prefix) :] if self.prefix and parts.path.startswith(self.prefix) else parts.path
            path += f"?{parts.query}" if parts.query else ""

    def delete_bucket(self, bucket_id: str) -> None:
        self.request("DELETE", f"/api/v1/buckets/{bucket_id}", expect=(204, 404))

    def ingest(self, bucket_id: str, memories: list[dict], **extra: Any) -> Response:
        """POST up to 1000 memories (treated as a sequence, in order); returns the raw response,
        whose ``data["results"]`` holds ``{"id", "deduplicated"}`` per item in input order."""
        if not memories or len(memories) > 1000:
            raise ValueError("a batch holds 1 to 1000 memories")
        return self.request("POST", f"/api/v1/buckets/{bucket_id}/memories", {"memories": memories, **extra}, 201)

    def search(self, bucket_id: str, query: str, **params: Any) -> Response:
        """POST a search; ``params`` are passed as body fields (mode, limit, explain, ranking, now, filters…)."""
        body = {"query": query, **{k: v for k, v in params.items() if v is not None}}
        return self.request("POST", f"/api/v1/buckets/{bucket_id}/search", body, expect=200)


# --------------------------------------------------------------------------------------------
# A private server
# --------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    worker: bool = False  # also start a Celery worker (async enrichment), if the project has tasks
    extra_env: dict[str, str] = field(default_factory=dict)
    # A fixed tenant name makes a kept home reusable: the tenant is created once and its token
    # saved in $ENGRAM_HOME/bench-token-<tenant> (mode 600); later starts reuse it. None: a new
    # tenant per start.
    tenant: str | None = None


class PrivateServer:
    """Start Engram on a temporary ENGRAM_HOME (embedded PostgreSQL), get a tenant token, serve it
    with gunicorn, and stop everything that was started (by PID) on exit.

        with PrivateServer(ServerOptions(workers=2)) as server:
            client = server.client()
    """

    def __init__(self, options: ServerOptions | None = None):
        self.options = options or ServerOptions()
        self.home: Path | None = None
        self.port: int | None = None
        self.token: str | None = None
        self.base_url: str | None = None
        self._procs: list[tuple[str, subprocess.Popen]] = []
        self._logs: list[Any] = []
        self._created_home = False

    # environment shared by every process of this server
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("DATABASE_URL", None)  # unset: Engram starts its embedded PostgreSQL in $ENGRAM_HOME/pgdata
        env.update(
            {
                "ENGRAM_HOME": str(self.home),
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "TOKENIZERS_PARALLELISM": "false",
                "DJANGO_SETTINGS_MODULE": "engram_site.settings",
                # One PostgreSQL for migrate, create_tenant and the web workers; stopped explicitly at the end.
                "ENGRAM_EMBEDDED_PG_KEEP": "1",
                # A benchmark is not an abusive client.
                "ENGRAM_TOKEN_RATE": "10000000/min",
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(self.options.extra_env)
        return env

    def _manage(self, *args: str, timeout: float = 900.0) -> str:
        cmd = [sys.executable, "manage.py", *args]
        proc = subprocess.run(
            cmd, cwd=REPO_ROOT, env=self.env(), capture_output=True, text=True, timeout=timeout, check=False
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"manage.py {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
            )
        return proc.stdout

    def _tenant_token(self) -> str:
        assert self.home is not None
        name = self.options.tenant
        saved = self.home / f"bench-token-{name}" if name else None
        if saved is not None and saved.exists():
            log(f"reusing tenant {name!r} (token from {saved})")
            return saved.read_text().strip()
        out = self._manage(
            "create_tenant", name or f"bench-{os.getpid()}-{int(time.time())}", "--scopes", "read,write,admin"
        )
        token = out.strip().splitlines()[-1].strip()
        if saved is not None:
            saved.touch(mode=0o600)
            saved.write_text(token + "\n")
        return token

    def _spawn(self, name: str, cmd: list[str]) -> subprocess.Popen:
        assert self.home is not None
        logfile = open(self.home / f"{name}.log", "ab")  # noqa: SIM115 - closed in stop()
        self._logs.append(logfile)
        # Own session: the process and its children form a group we can signal without touching anything else.
        proc = subprocess.Popen(
            cmd, cwd=REPO_ROOT, env=self.env(), stdout=logfile, stderr=subprocess.STDOUT, start_new_session=True
        )
        self._procs.append((name, proc))
        log(f"started {name} (pid {proc.pid}), log {self.home / (name + '.log')}")
        return proc

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
            started = time.perf_counter()
            self._manage("migrate", "--no-input", "-v", "0")
            log(f"migrated in {time.perf_counter() - started:.1f}s")
            self.token = self._tenant_token()
            self.port = opts.port or free_port()
            self.base_url = f"http://127.0.0.1:{self.port}"
            self._spawn(
                "gunicorn",
                [
                    sys.executable, "-m", "gunicorn", "engram_site.wsgi:application",
                    "--config", "python:engram_site.gunicorn_config",
                    "--bind", f"127.0.0.1:{self.port}",
                    "--workers", str(opts.workers),
                    "--threads", str(opts.threads),
                    "--timeout", "300",
                    "--no-control-socket",
                ],
            )  # fmt: skip
            if opts.worker:
                self._spawn(
                    "celery",
                    [sys.executable, "-m", "celery", "-A", "engram_site", "worker", "-B", "--loglevel", "WARNING"],
                )
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        assert self.base_url is not None
        deadline = time.monotonic() + self.options.ready_timeout
        client = EngramClient(self.base_url, timeout=10)
        try:
            while time.monotonic() < deadline:
                for name, proc in self._procs:
                    if proc.poll() is not None:
                        raise RuntimeError(f"{name} exited with status {proc.returncode}; see {self.home}/{name}.log")
                if client.ready():
                    log(f"ready at {self.base_url}")
                    return
                time.sleep(0.5)
        finally:
            client.close()
        raise TimeoutError(f"Engram was not ready after {self.options.ready_timeout:.0f}s; see {self.home}")

    def client(self, timeout: float = 120.0) -> EngramClient:
        assert self.base_url and self.token, "server not started"
        return EngramClient(self.base_url, self.token, timeout=timeout)

    def stop(self) -> None:
        with _signals_held():
            self._stop()

    def _stop(self) -> None:
        for name, proc in reversed(self._procs):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)  # the group we created for it, nothing else
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=10)
                log(f"stopped {name} (pid {proc.pid})")
        self._procs.clear()
        for f in self._logs:
            f.close()
        self._logs.clear()
        if self.home is not None and (self.home / "pgdata").exists():
            try:
                self._manage("embedded_db", "stop", timeout=120)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                log(f"could not stop the embedded PostgreSQL cleanly: {exc}")
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

    def client(self, timeout: float = 120.0) -> EngramClient:
        return EngramClient(self.base_url, self.token, timeout=timeout)

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


def default_report_path(name: str) -> Path:
    """bench/results/<name>-<YYYY-MM-DD>.md"""
    return RESULTS_DIR / f"{name}-{datetime.now(UTC).strftime('%Y-%m-%d')}.md"


def write_report(text: str, path: Path) -> Path:
    """Write a Markdown report (creating its folder), print it to stdout, and return the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    print(text, flush=True)
    log(f"report written to {path}")
    return path


def publish_report(text: str, *, out: Path | None, name: str, no_write: bool = False) -> None:
    """Print the report (``no_write``) or write it to ``out`` (default bench/results/<name>-<date>.md)."""
    if no_write:
        print(text)
    else:
        write_report(text, out or default_report_path(name))


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
