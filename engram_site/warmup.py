"""Work a fresh server or worker process starts before its first request or task.

What needs warming registers itself in an AppConfig.ready (the platform's own: the embedding
model); the process entry points run it in each new process (engram_site/wsgi.py's
start_worker, called by gunicorn in each worker; engram_site/celery.py, in each pool process).
engram_site is the bottom layer and imports no app.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

logger = logging.getLogger(__name__)

_warmers: list[Callable[[], None]] = []


def register(warmer: Callable[[], None]) -> None:
    """Run ``warmer()`` when a process starts (it must return at once, e.g. start a thread)."""
    if warmer not in _warmers:
        _warmers.append(warmer)


def warm_up() -> None:
    """Start every registered warm-up. A failure is logged: the first request pays instead."""
    for warmer in _warmers:
        try:
            warmer()
        except Exception:
            logger.exception("warm-up %r failed", warmer)
