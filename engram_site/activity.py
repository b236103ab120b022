"""Requests before background work: the web server says when it is serving, and the worker
on the same machine waits for a pause before it starts a task.

The web side (:class:`RequestActivityMiddleware`) keeps, per process, a count of the requests in
flight — but for memory writes, unless ENGRAM_WORKER_YIELD_TO_WRITES is on: the work they queue is
what the worker must keep up with, and a steady stream of them held it at its limit's pace.
When a process starts its first one it creates a file named after its pid in
``$ENGRAM_HOME/run/requests``; when its last one ends it removes the file. Creating and removing
a file both change the directory's modification time, so the directory tells the worker two
things with one ``stat``: whether any web process is serving now (a file is there) and how long
ago the last request ended (the directory's mtime). Two file operations per busy period, none
per request while requests overlap.

The worker side (:func:`wait_for_quiet`) waits while a request is in flight or one ended less
than ``GRACE_SECONDS`` ago (a client's next request usually follows at once), polling every
``POLL_SECONDS``, and never longer than ``settings.ENGRAM_WORKER_YIELD_SECONDS``: under unbroken
load the worker still does a turn of work at least that often, so the backlog keeps moving and
drains when the load stops. It waits before every task (engram_site/celery.py) and, inside long
tasks, at :func:`pause` points: between memories, or turns of at most ``TURN`` memories (the
follow-up work of a 500-memory write is minutes of CPU; waiting only between tasks left requests
sharing the cores with it for that long). A pause point less than ``SLICE_SECONDS`` after the last
wait goes on without looking, so that under unbroken load each wait of at most the limit buys at
least a slice of work instead of one memory's worth. And waiting has a ceiling: a wait that ran
to its limit (the requests never paused) earns the worker as long again of work without waiting,
scaled by ``ENGRAM_WORKER_YIELD_SHARE`` — the most of its time, under unbroken load, the worker
spends waiting (0.5: half; 1, the default, waits every time). At 1 a steady stream of writes
(several requests a second, always one in flight or just ended) holds every task at its full
limit, and the work those writes queue catches up only when they stop. While it works without waiting it still runs at
its lowered CPU priority (serve.py, db_priority.py): the OS gives the requests the cores first.
:func:`pause` waits only in a worker process (:func:`become_background`), never inside a
transaction (locks would be held while waiting), and is free when the pause is off.

Only processes sharing ``$ENGRAM_HOME`` see each other: a worker on another machine never waits,
which is right, since it takes no cores from this machine's requests.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TypeVar

from django.conf import settings
from django.core.exceptions import MiddlewareNotUsed
from django.db import connection
from django.urls import Resolver404, resolve

logger = logging.getLogger(__name__)

# A request that ended this recently still counts: the same client's next one is usually on its way.
GRACE_SECONDS = 0.1
POLL_SECONDS = 0.02
# Memories handled between two pause points of a long background task.
TURN = 25
# Work a background task does after a wait before its pause points look at the requests again.
SLICE_SECONDS = 0.5

T = TypeVar("T")
_background = False
_slice_started = 0.0  # time.monotonic() when this process's last wait for quiet ended
_free_until = 0.0  # time.monotonic() until which this process works without waiting (the share)


def directory() -> Path:
    return Path(settings.ENGRAM_HOME) / "run" / "requests"


class _Busy:
    """This process's requests in flight, and its marker file while there are any."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0
        self._pid = 0

    def _path(self) -> Path:
        pid = os.getpid()  # after a fork the child is a process of its own
        if pid != self._pid:
            self._pid, self._count = pid, 0
        return directory() / str(pid)

    def begin(self) -> None:
        with self._lock:
            path = self._path()
            self._count += 1
            if self._count == 1:
                try:
                    try:
                        path.touch()
                    except FileNotFoundError:  # the first request, or the folder was removed
                        path.parent.mkdir(parents=True, exist_ok=True)
                        path.touch()
                except OSError:  # a read-only or full home must not fail the request
                    logger.debug("could not mark %s busy", path, exc_info=True)

    def end(self) -> None:
        with self._lock:
            path = self._path()
            self._count = max(0, self._count - 1)
            if self._count == 0:
                try:
                    path.unlink(missing_ok=True)
                except OSError:
                    logger.debug("could not clear %s", path, exc_info=True)


_busy = _Busy()


class RequestActivityMiddleware:
    """Marks this process busy while it serves a request (first in MIDDLEWARE). With the pause
    off (ENGRAM_WORKER_YIELD_SECONDS 0) nobody reads the marks: Django drops the
    middleware at start-up and requests touch no file."""

    def __init__(self, get_response):
        if settings.ENGRAM_WORKER_YIELD_SECONDS <= 0:
            raise MiddlewareNotUsed
        self.get_response = get_response

    def __call__(self, request):
        if _not_waited_for(request):
            return self.get_response(request)
        _busy.begin()
        try:
            return self.get_response(request)
        finally:
            _busy.end()


def _not_waited_for(request) -> bool:
    """Whether the worker goes on beside this request: with ENGRAM_WORKER_YIELD_TO_WRITES off, a
    request whose view lists its method in ``worker_runs_beside`` (the memory writes: the work
    they queue is what the worker must keep up with, and a steady stream of them would otherwise
    hold it at its limit's pace; the searches are what it gives way to)."""
    if settings.ENGRAM_WORKER_YIELD_TO_WRITES:
        return False
    path = getattr(request, "path_info", None)
    if path is None:
        return False
    try:
        match = resolve(path)
    except Resolver404:
        return False
    view = getattr(match.func, "view_class", None) or getattr(match.func, "cls", None) or match.func
    return getattr(request, "method", None) in getattr(view, "worker_runs_beside", ())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def requests_active(*, grace: float = GRACE_SECONDS) -> bool:
    """Whether a web process sharing this home is serving, or stopped serving less than
    ``grace`` seconds ago. A marker left by a process that died is removed."""
    folder = directory()
    try:
        changed = folder.stat().st_mtime
    except FileNotFoundError:
        return False
    if time.time() - changed < grace:
        return True
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return False
    for name in names:
        if not name.isdigit():
            continue
        if _alive(int(name)):
            return True
        (folder / name).unlink(missing_ok=True)
    return False


def wait_for_quiet(limit: float | None = None) -> float:
    """Wait until no request is in flight on this machine (see :func:`requests_active`), at most
    ``limit`` seconds (default: ``settings.ENGRAM_WORKER_YIELD_SECONDS``; 0 does not wait).
    Returns the seconds waited."""
    global _slice_started, _free_until
    limit = settings.ENGRAM_WORKER_YIELD_SECONDS if limit is None else limit
    if limit <= 0:
        return 0.0
    started = time.monotonic()
    if started < _free_until:
        return 0.0  # the last wait ran to its limit: this turn of work is owed
    ran_out = False
    while requests_active():
        waited = time.monotonic() - started
        if waited >= limit:
            ran_out = True
            break
        time.sleep(min(POLL_SECONDS, limit - waited))
    _slice_started = time.monotonic()
    waited = _slice_started - started
    share = settings.ENGRAM_WORKER_YIELD_SHARE
    if ran_out and share < 1:
        _free_until = _slice_started + waited * (1 - share) / share
    return waited


def forget_owed_work() -> None:
    """Start again with no work owed (tests; a new process starts with none)."""
    global _free_until
    _free_until = 0.0


def clear() -> None:
    """Remove every marker (``./engram serve`` at start: none of its processes runs yet)."""
    folder = directory()
    if folder.is_dir():
        for marker in folder.iterdir():
            marker.unlink(missing_ok=True)


def become_background() -> None:
    """Mark this process as one that does background work (the Celery worker, before it forks
    its pool): its :func:`pause` points wait for requests. Web processes never call it."""
    global _background
    _background = True


def yielding() -> bool:
    """Whether this process's background work gives way to requests (see the module's doc)."""
    return _background and settings.ENGRAM_WORKER_YIELD_SECONDS > 0


def pause() -> float:
    """A point between two turns of background work: wait for a pause in the requests (at most
    ENGRAM_WORKER_YIELD_SECONDS), unless the last wait ended less than ``SLICE_SECONDS`` ago.
    Does nothing outside a worker process, with the pause off, or inside a transaction. Returns
    the seconds waited."""
    if not yielding() or connection.in_atomic_block:
        return 0.0
    if time.monotonic() - _slice_started < SLICE_SECONDS:
        return 0.0
    return wait_for_quiet()


def turns(items: Iterable[T], size: int | None = None) -> Iterator[list[T]]:
    """``items`` in lists of at most ``size`` (default ``TURN``), with a :func:`pause` before each
    one; when this process does not yield, all of them as one list (the work goes as it always
    went)."""
    items = list(items)
    if not yielding():
        yield items
        return
    size = size or TURN
    for start in range(0, len(items), size):
        pause()
        yield items[start : start + size]
