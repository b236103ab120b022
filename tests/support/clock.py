"""A clock a test moves by hand, to put in place of the ``time`` module a module under test
uses: its waits cost no time, take exactly what they ask for, and are recorded, so a test
asserts how long the code waited instead of timing it."""

from __future__ import annotations

import time


class FakeClock:
    """``monotonic()`` moves only when the code under test sleeps (or the test calls
    ``sleep``); ``time()`` is the real wall clock moved forward by as much, so that it still
    compares with the modification times of files written meanwhile. ``at(seconds, action)``
    runs ``action`` once the clock has moved that far: an event "later" without a thread."""

    def __init__(self):
        self.elapsed = 0.0  # seconds slept since the clock was made
        self.sleeps: list[float] = []
        self._start = time.monotonic()
        self._due: list[tuple[float, object]] = []

    def monotonic(self) -> float:
        return self._start + self.elapsed

    def time(self) -> float:
        return time.time() + self.elapsed

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.elapsed += seconds
        for due in [d for d in self._due if d[0] <= self.elapsed]:
            self._due.remove(due)
            due[1]()

    def at(self, seconds: float, action) -> None:
        self._due.append((seconds, action))

    @property
    def slept(self) -> float:
        return sum(self.sleeps)
