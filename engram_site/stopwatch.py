"""Where a request's time goes: wall and CPU time per stage, and its SQL, for one request.

:class:`StopwatchMiddleware` starts a :class:`Stopwatch` for each API request and answers with a
``Server-Timing`` header (W3C Server Timing: browsers' developer tools and most HTTP tools show
it) naming each stage's wall time, the request thread's CPU time and the time spent waiting on
PostgreSQL::

    Server-Timing: total;dur=41.2, cpu;dur=18.9, db;dur=14.0;desc="9 statements",
                   search;dur=33.5, keyword;dur=6.1, embed;dur=9.8, vector;dur=17.2, ...

Stages are what :func:`stage` (or :func:`engram_site.tracing.traced`, which calls it) wraps;
a stage that ran more than once is summed ("cpu 0.4 ms in 2 runs" in ``desc``). The search runs its
signals in executor threads, which inherit the request's context, so their stages land on the
same stopwatch; stages in parallel threads overlap, so they need not add up to ``total``.
``cpu`` counts the request thread only; each stage's own CPU time is in its ``desc``.

Outside a request (the worker, a management command) no stopwatch is running and a stage
costs one context-variable read. Inside, two clock reads per stage and per SQL statement.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from dataclasses import dataclass

_current: contextvars.ContextVar[Stopwatch | None] = contextvars.ContextVar("engram_stopwatch", default=None)


@dataclass
class Lap:
    wall: float = 0.0  # seconds
    cpu: float = 0.0  # seconds of the thread that ran the stage
    count: int = 0


class Stopwatch:
    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.started_cpu = time.thread_time()
        self.laps: dict[str, Lap] = {}
        self._lock = threading.Lock()  # stages end in several threads at once

    def add(self, name: str, wall: float, cpu: float) -> None:
        with self._lock:
            lap = self.laps.setdefault(name, Lap())
            lap.wall += wall
            lap.cpu += cpu
            lap.count += 1

    def header(self, *, total: float, cpu: float) -> str:
        """The ``Server-Timing`` value: total, the request thread's CPU, the database, then the
        stages in the order they first ended (milliseconds, one decimal)."""
        parts = [f"total;dur={total * 1000:.1f}", f"cpu;dur={cpu * 1000:.1f}"]
        with self._lock:
            laps = dict(self.laps)
        db = laps.pop("db", None)
        if db is not None:
            parts.append(f'db;dur={db.wall * 1000:.1f};desc="{db.count} statements"')
        for name, lap in laps.items():
            runs = f" in {lap.count} runs" if lap.count > 1 else ""
            parts.append(f'{name};dur={lap.wall * 1000:.1f};desc="cpu {lap.cpu * 1000:.1f} ms{runs}"')
        return ", ".join(parts)


def current() -> Stopwatch | None:
    return _current.get()


@contextlib.contextmanager
def running():
    """Run a stopwatch for the enclosed work (a request); yields it."""
    watch = Stopwatch()
    token = _current.set(watch)
    try:
        yield watch
    finally:
        _current.reset(token)


@contextlib.contextmanager
def stage(name: str):
    """Time the enclosed work as stage ``name`` of the running stopwatch, if one runs."""
    watch = _current.get()
    if watch is None:
        yield
        return
    wall, cpu = time.perf_counter(), time.thread_time()
    try:
        yield
    finally:
        watch.add(name, time.perf_counter() - wall, time.thread_time() - cpu)


def time_statement(execute, sql, params, many, context):
    """A Django execute wrapper: each SQL statement's wall time counts as stage ``db`` (the
    time the thread waited on PostgreSQL, plus the driver's own work)."""
    watch = _current.get()
    if watch is None:
        return execute(sql, params, many, context)
    started = time.perf_counter()
    try:
        return execute(sql, params, many, context)
    finally:
        watch.add("db", time.perf_counter() - started, 0.0)


def install_statement_timer(sender, connection, **kwargs) -> None:
    """``connection_created`` receiver: every database connection times its statements (once
    per connection object: Django keeps one per thread and alias, across reconnects)."""
    if time_statement not in connection.execute_wrappers:
        connection.execute_wrappers.append(time_statement)


class StopwatchMiddleware:
    """Times each API request and answers with ``Server-Timing`` (module docstring). The
    answer's rendering (DRF's JSON) is stage ``render``."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if not request.path.startswith("/api/"):
            return self.get_response(request)
        with running() as watch:
            response = self.get_response(request)
        total = time.perf_counter() - watch.started
        cpu = time.thread_time() - watch.started_cpu
        response["Server-Timing"] = watch.header(total=total, cpu=cpu)
        return response

    def process_template_response(self, request, response):
        # DRF's Response is rendered right after the template-response hooks: time it.
        watch = _current.get()
        if watch is not None:
            started = (time.perf_counter(), time.thread_time())

            def rendered(response):
                watch.add("render", time.perf_counter() - started[0], time.thread_time() - started[1])

            response.add_post_render_callback(rendered)
        return response
