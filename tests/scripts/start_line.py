"""The start line of processes a test starts together (tests.support.StartLine is the test's
side): each process, once ready, leaves a file saying so and waits for the test's "go", so
that all of them start their work at the same moment however long each took to get ready.
Standard library only."""

from __future__ import annotations

import os
import time
from pathlib import Path


def wait_at(folder: str, timeout: float = 300) -> None:
    line = Path(folder)
    (line / f"ready-{os.getpid()}").touch()
    deadline = time.monotonic() + timeout
    while not (line / "go").exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"no go at {line} within {timeout:.0f}s")
        time.sleep(0.002)  # polling the condition, with a deadline
