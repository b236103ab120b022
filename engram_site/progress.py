"""A small progress bar for management commands (maintenance jobs, bucket export and import),
written to stderr.

On a terminal it redraws one line; otherwise (logs, pipes, CI) it prints a line
at every tenth of the way, so a long backfill still shows it is moving.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressBar:
    WIDTH = 30
    REDRAW_SECONDS = 0.1

    def __init__(self, label: str, *, total: int | None = None, unit: str = "", stream: TextIO | None = None):
        self.label = label
        self.total = total
        self.unit = f" {unit}" if unit else ""
        self.done = 0
        self.stream = stream or sys.stderr
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._started = time.monotonic()
        self._last_draw = 0.0
        self._last_decile = -1
        self._closed = False

    def set_total(self, total: int | None) -> None:
        self.total = total
        self._draw(force=True)

    def update(self, done: int) -> None:
        self.done = done
        self._draw()

    def advance(self, step: int = 1) -> None:
        self.update(self.done + step)

    def close(self, note: str = "") -> None:
        if self._closed:
            return
        self._closed = True
        self._draw(force=True, final=True, note=note)

    def render(self) -> str:
        elapsed = max(time.monotonic() - self._started, 1e-9)
        rate = f"{self.done / elapsed:.1f}/s"
        if self.total:
            fraction = min(self.done / self.total, 1.0)
            filled = int(self.WIDTH * fraction)
            bar = "#" * filled + "-" * (self.WIDTH - filled)
            return f"{self.label} [{bar}] {self.done}/{self.total}{self.unit} {fraction:4.0%} {rate} {elapsed:.1f}s"
        return f"{self.label} {self.done}{self.unit or ' done'} {rate} {elapsed:.1f}s"

    def _draw(self, *, force: bool = False, final: bool = False, note: str = "") -> None:
        now = time.monotonic()
        line = self.render() + (f" {note}" if note else "")
        if self._tty:
            if force or final or now - self._last_draw >= self.REDRAW_SECONDS:
                self.stream.write("\r" + line + ("\n" if final else ""))
                self.stream.flush()
                self._last_draw = now
            return
        decile = int(10 * self.done / self.total) if self.total else -1
        if final or (self.total and decile > self._last_decile) or (force and self._last_decile < 0):
            self.stream.write(line + "\n")
            self.stream.flush()
            self._last_decile = max(decile, 0)
