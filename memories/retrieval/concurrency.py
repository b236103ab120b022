"""The thread pools a search runs its signals in when ENGRAM_SEARCH_PARALLEL is on.

:func:`start` and :func:`start_walk` return something with a Future's ``result()``: a
running task, or (setting off) the signal already computed in the calling thread.
"""

from __future__ import annotations

import contextvars
import threading
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.db import OperationalError, close_old_connections, connections

from engram_site.replica import read_connection

SEARCH_WORKERS = 8
WALK_WORKERS = 4

_search_pool = ThreadPoolExecutor(max_workers=SEARCH_WORKERS, thread_name_prefix="engram-search")
# The context-vector walk, started by the vector signal once the query is embedded. A pool
# of its own: its tasks wait for nothing, so a full search pool (whose tasks wait for these)
# can never be waiting for itself.
_walk_pool = ThreadPoolExecutor(max_workers=WALK_WORKERS, thread_name_prefix="engram-search-walk")
_POOLS = ((_search_pool, SEARCH_WORKERS), (_walk_pool, WALK_WORKERS))


def _in_thread(function, *args, **kwargs):
    """Run one signal in an executor thread, on that thread's own database connection
    (kept between searches; closed first if it broke or outlived DB_CONN_MAX_AGE), in
    autocommit: signals only read.

    Django's per-use health check (a ``SELECT 1`` before the first query) is skipped, a
    round trip per signal; a kept connection found dead instead (the database restarted
    since) is replaced and the signal run once more."""
    close_old_connections()
    # The database the search reads (the replica's when it reads one: the context carries it).
    connection = read_connection()
    connection.health_check_done = True
    try:
        return function(*args, **kwargs)
    except OperationalError:
        if connection.connection is not None and connection.is_usable():
            raise
        connection.close()
        return function(*args, **kwargs)


def close_search_connections() -> None:
    """Close the database connections (the primary's, and a replica's) of the executor threads
    (each thread runs exactly one closing task: they wait for each other). Tests call it before
    the test database goes."""
    for pool, workers in _POOLS:
        barrier = threading.Barrier(workers)

        def close(barrier=barrier):
            barrier.wait(timeout=30)
            connections.close_all()

        for future in [pool.submit(close) for _ in range(workers)]:
            future.result(timeout=60)


class _Done:
    """A signal computed in the calling thread, with the interface of a Future."""

    def __init__(self, function, *args, **kwargs):
        try:
            self._value, self._error = function(*args, **kwargs), None
        except Exception as exc:
            self._value, self._error = None, exc

    def result(self):
        if self._error is not None:
            raise self._error
        return self._value


def _start(pool: ThreadPoolExecutor, function, args, kwargs):
    if getattr(settings, "ENGRAM_SEARCH_PARALLEL", False):
        # In the caller's context (contextvars): the signal's trace span is a child of the
        # search's. Database connections are per thread, not per context, and stay apart.
        return pool.submit(contextvars.copy_context().run, _in_thread, function, *args, **kwargs)
    return _Done(function, *args, **kwargs)


def start(function, *args, **kwargs):
    """Start a signal: in an executor thread when ENGRAM_SEARCH_PARALLEL is on (the
    database answers it on another core while this thread runs the lexical signals),
    else right here."""
    return _start(_search_pool, function, args, kwargs)


def start_walk(function, *args, **kwargs):
    """Start a context-vector walk as :func:`start` does, in the walks' own pool."""
    return _start(_walk_pool, function, args, kwargs)
