"""A lock that every process on the machine sees: ``flock`` on a file."""

from __future__ import annotations

import contextlib
import fcntl
from pathlib import Path


@contextlib.contextmanager
def file_lock(path: Path):
    """Hold an exclusive lock on ``path`` (created, with its folder, if missing) for the block.
    The operating system releases it if the process dies, so a crash leaves no stale lock."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
