"""A progress bar for the memories commands, on stderr: one redrawn line on a terminal, a
line at every tenth of the way elsewhere (logs, pipes)."""

from __future__ import annotations

import time
from typing import TextIO


class Progress:
    REDRAW_SECONDS = 0.2

    def __init__(self, label: str, *, total: int | None, unit: str, stream: TextIO | None):
        self.label, self.total, self.unit, self.stream = label, total, unit, stream
        self.done = 0
        self._tty = bool(stream is not None and getattr(stream, "isatty", lambda: False)())
        self._started = time.monotonic()
        self._drawn_at = 0.0
        self._tenth = -1

    def update(self, done: int) -> None:
        self.done = done
        if self.stream is None:
            return
        now = time.monotonic()
        tenth = int(10 * done / self.total) if self.total else -1
        if self._tty and now - self._drawn_at >= self.REDRAW_SECONDS:
            self.stream.write("\r" + self.line())
            self.stream.flush()
            self._drawn_at = now
        elif not self._tty and self._tenth < tenth < 10:  # the last line is close()'s
            self.stream.write(self.line() + "\n")
            self._tenth = tenth

    def close(self) -> None:
        if self.stream is not None:
            self.stream.write(("\r" if self._tty else "") + self.line() + "\n")
            self.stream.flush()

    def line(self) -> str:
        elapsed = time.monotonic() - self._started
        if not self.total:
            return f"{self.label}: {self.done} {self.unit} {elapsed:.1f}s"
        fraction = min(self.done / self.total, 1.0)
        bar = "#" * int(30 * fraction)
        return f"{self.label} [{bar:-<30}] {self.done}/{self.total} {self.unit} {fraction:4.0%} {elapsed:.1f}s"
