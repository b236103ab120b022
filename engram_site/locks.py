"""Locks that outlive a transaction: ``flock`` on a file (every process on the machine sees
it) and PostgreSQL session-level advisory locks (every process on the database sees them)."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import zlib
from collections.abc import Iterator
from pathlib import Path

from django.db import DatabaseError, connection

logger = logging.getLogger(__name__)


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


def lock_key(name: str) -> int:
    """A stable 63-bit key for ``pg_advisory_lock`` from a lock name."""
    return zlib.crc32(b"engram:" + name.encode()) | (0x656E67 << 32)


class LockHeld(RuntimeError):
    """Another session holds the lock: the same job is already running."""


@contextlib.contextmanager
def advisory_lock(name: str) -> Iterator[None]:
    """Hold a session-level PostgreSQL advisory lock for the block, or raise LockHeld.

    Session-level, not transaction-level: the block may commit many times (and
    REINDEX CONCURRENTLY cannot run inside a transaction at all). If the process
    dies, its connection closes and PostgreSQL releases the lock.
    """
    key = lock_key(name)
    with connection.cursor() as cur:
        cur.execute("SELECT pg_try_advisory_lock(%s)", [key])
        if not cur.fetchone()[0]:
            raise LockHeld(f"{name} is already running (advisory lock {key} is held)")
    try:
        yield
    finally:
        try:
            with connection.cursor() as cur:
                cur.execute("SELECT pg_advisory_unlock(%s)", [key])
        except DatabaseError:
            # The connection is gone, and the lock with it.
            logger.warning("could not release advisory lock %s", name, exc_info=True)
