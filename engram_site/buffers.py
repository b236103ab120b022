"""Write-behind buffers: bookkeeping recorded in memory on the request path and written to the
database in batches, off it.

A :class:`WriteBehindBuffer` holds what is pending (a dict its owner fills) and a ``write``
function that stores a whole batch in one statement. One thread per process, the
:class:`Flusher`'s, writes every buffer: each at most every ``flush_seconds``, sooner when
``flush_size`` entries are waiting, and at exit (``atexit``; with the embedded server, before the
process releases it: engram_site/embedded_pg.py). The thread starts with the first
entry recorded, and only when ``ENGRAM_ACCESS_BACKGROUND`` is on (off in the test settings:
tests call :meth:`WriteBehindBuffer.flush` and :meth:`WriteBehindBuffer.discard`). What the
buffers hold is advisory (access times, usage counts): a crash loses the last few seconds of it.

The owners: ``memories/access.py`` (last access times) and ``tenants/usage.py`` (usage per
tenant and day).
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import connection

from engram_site import embedded_pg
from engram_site.scoping import scopes_disabled

logger = logging.getLogger(__name__)


class Flusher:
    """The thread that writes a set of buffers. Its database connection is its own, closed
    whenever every buffer is empty so that an idle process does not pin a server slot."""

    def __init__(self, *, name: str, background: Callable[[], bool]):
        self.name = name
        self._background = background
        self._buffers: list[WriteBehindBuffer] = []
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def add(self, buffer: WriteBehindBuffer) -> None:
        with self._lock:
            self._buffers.append(buffer)

    def wake(self) -> None:
        self._wake.set()

    def ensure_running(self) -> None:
        """Start the thread if background writing is on and it is not running."""
        if self._stopped or not self._background():
            return
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()

    def flush_all(self) -> None:
        """Write what every buffer holds now (at exit)."""
        with self._lock:
            buffers = list(self._buffers)
        for buffer in buffers:
            buffer.flush()

    def stop(self) -> None:
        """End the thread after its current pass (tests that start one of their own)."""
        self._stopped = True
        self._wake.set()

    @scopes_disabled()  # cross-tenant: one thread writes every tenant's buffered rows
    def _run(self) -> None:
        while not self._stopped:
            with self._lock:
                buffers = list(self._buffers)
            due = min((b.next_flush for b in buffers), default=time.monotonic() + 60.0)
            self._wake.wait(max(0.0, due - time.monotonic()))
            self._wake.clear()
            now = time.monotonic()
            for buffer in buffers:
                if buffer.full or now >= buffer.next_flush:
                    buffer.flush()
            if all(buffer.empty for buffer in buffers):
                connection.close()


def _background_enabled() -> bool:
    return getattr(settings, "ENGRAM_ACCESS_BACKGROUND", True)


# The process's flusher: this one thread writes every buffer of the process. At exit its buffers
# are written before the process releases an embedded server, which it may stop (each buffer's own
# exit hook would run after that).
FLUSHER = Flusher(name="engram-buffer-flush", background=_background_enabled)
embedded_pg.before_release(FLUSHER.flush_all)


class WriteBehindBuffer:
    """Pending entries, a dict made by ``new`` and changed only through :meth:`record`, written
    by ``write(batch) -> rows written``.

    ``flush_size`` counts what each :meth:`record` says it added (distinct ids, events). A
    failed write is logged (``failure % len(batch)``) and its batch dropped; the connection is
    closed so the next write starts on a fresh one.
    """

    def __init__(
        self,
        *,
        write: Callable[[dict], int],
        flush_seconds: float,
        flush_size: int,
        failure: str,
        new: Callable[[], dict] = dict,
        flusher: Flusher = FLUSHER,
    ):
        self._write = write
        self.flush_seconds = flush_seconds
        self.flush_size = flush_size
        self._failure = failure
        self._new = new
        self.flusher = flusher
        self._lock = threading.Lock()
        self._pending = new()
        self._size = 0
        self.next_flush = time.monotonic() + flush_seconds
        flusher.add(self)
        atexit.register(self.flush)

    def record(self, change: Callable[[dict], int]) -> None:
        """Apply ``change(pending)`` under the buffer's lock; it returns how many entries it
        added towards ``flush_size``."""
        with self._lock:
            if not self._pending:
                # An entry waits at most flush_seconds, however long the buffer was idle.
                self.next_flush = max(self.next_flush, time.monotonic() + self.flush_seconds)
            self._size += change(self._pending)
            full = self._size >= self.flush_size
        self.flusher.ensure_running()
        if full:
            self.flusher.wake()

    @property
    def full(self) -> bool:
        return self._size >= self.flush_size

    @property
    def empty(self) -> bool:
        return not self._pending

    def discard(self) -> None:
        """Forget what is pending (tests)."""
        with self._lock:
            self._pending = self._new()
            self._size = 0

    def flush(self) -> int:
        """Write what is pending now, in one batch; returns how many rows the write changed."""
        with self._lock:
            batch: dict[Any, Any] = self._pending
            self._pending = self._new()
            self._size = 0
            self.next_flush = time.monotonic() + self.flush_seconds
        if not batch:
            return 0
        try:
            return self._write(batch)
        except Exception:
            logger.warning(self._failure, len(batch), exc_info=True)
            connection.close()
            return 0
