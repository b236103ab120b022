"""The web server's worker: gunicorn's threaded worker (``gthread``), with new connections spread
over the workers instead of taken by whichever is scheduled first.

All workers wait on the one listening socket, and a connection goes to the worker that accepts it
first; it stays there for as long as the client keeps it alive. Left to that race, a worker woken
by the first of several connections that arrive together takes them all before another runs:
with four clients of a server of two workers, all four connections were found on one worker,
which ran four searches at once in one process, under one interpreter lock, while the other
idled (docs/OPERATIONS.md, tests/platform/test_gunicorn_worker.py).

Here a worker that holds connections lets a new one wait before it takes it, the longer the more
it holds (``ACCEPT_PAUSE_PER_CONNECTION`` each, at most ``MAX_ACCEPT_PAUSE``): a worker holding
fewer, woken by the same connection, takes it first. A worker holding none takes it at once, and
so does a worker alone (``--workers 1``). When no other worker takes it, a connection waits at
most ``MAX_ACCEPT_PAUSE`` longer in the listen queue; a kept-alive connection pays that once.
"""

from __future__ import annotations

import time

from gunicorn.workers.gthread import ThreadWorker

ACCEPT_PAUSE_PER_CONNECTION = 0.002  # seconds
MAX_ACCEPT_PAUSE = 0.01
# After its pause, a worker takes the connection it stepped back from if it is still waiting: one
# found within this long of the pause's end (only one: the next waits again).
_TAKE_WITHIN = 0.05


class SpreadingThreadWorker(ThreadWorker):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.accept_after = 0.0  # time.monotonic() at which this worker's last pause ends

    def accept_pause(self) -> float:
        """How long a connection waits before this worker takes it (seconds)."""
        if self.cfg.workers <= 1 or self.nr_conns <= 0:
            return 0.0
        return min(MAX_ACCEPT_PAUSE, ACCEPT_PAUSE_PER_CONNECTION * self.nr_conns)

    def accept(self, listener):
        pause = self.accept_pause()
        now = time.monotonic()
        if pause > 0 and not self.accept_after <= now < self.accept_after + _TAKE_WITHIN:
            # Step back from the listening socket: another worker, woken by the same connection,
            # may take it meanwhile.
            self.accept_after = now + pause
            self.set_accept_enabled(False)
            return
        self.accept_after = 0.0  # one connection taken per pause: the next waits again
        super().accept(listener)

    def set_accept_enabled(self, enabled):
        # The main loop enables accepting again on each turn while under worker_connections.
        if enabled and time.monotonic() < self.accept_after:
            return
        super().set_accept_enabled(enabled)

    def wait_for_and_dispatch_events(self, timeout):
        # While stepped back, wake when the pause ends (the main loop's own timeout is 1 s).
        if self.alive and not self._accepting and self.accept_after > time.monotonic():
            timeout = max(0.0, min(timeout, self.accept_after - time.monotonic()))
        super().wait_for_and_dispatch_events(timeout)
