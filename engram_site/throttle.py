"""Counting failures — admin logins, API tokens — across every worker process.

The counters live in the ``shared`` cache alias (engram_site/settings.py): Redis when
``REDIS_URL`` is set, otherwise files under ``$ENGRAM_HOME/cache``, which every gunicorn
worker and every other process of the machine sees. (The ``default`` cache is per
process on the embedded default: a limit kept there would be multiplied by the number
of workers.)

A limit is "N failures per period", counted over a sliding window approximated by two
fixed windows: the previous window's count weighted by how much of it the sliding
window still covers, plus the current window's count. Two cache keys per identity, an
atomic increment, no list of timestamps to rewrite.

Identities (addresses, usernames) are hashed into the keys: the cache never holds a
username someone typed (which could be a password typed into the wrong field).
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from pathlib import Path

from django.core.cache import caches
from django.core.cache.backends.filebased import FileBasedCache

from engram_site.locks import file_lock

SHARED_CACHE = "shared"

_UNITS = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60, "h": 3600, "hour": 3600,
          "d": 86400, "day": 86400}  # fmt: skip
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*([a-z]+?)s?\s*$")


def parse_rate(rate: str) -> tuple[int, int]:
    """``"30/min"`` → (30, 60); ``"10/15m"`` → (10, 900); units s, m/min, h/hour, d/day."""
    match = _RATE.match(rate.lower())
    if not match or match.group(3) not in _UNITS:
        raise ValueError(f"Not a rate: {rate!r} (expected e.g. '30/min' or '10/15m').")
    count, multiple, unit = int(match.group(1)), int(match.group(2) or 1), _UNITS[match.group(3)]
    if count < 1 or multiple < 1:
        raise ValueError(f"Not a rate: {rate!r} (the count and the period must be positive).")
    return count, multiple * unit


def _digest(ident: str) -> str:
    return hashlib.sha256(ident.encode("utf-8", "surrogatepass")).hexdigest()[:32]


class FailureCounter:
    """Failures of one kind (``scope``) per identity, limited to ``rate``."""

    def __init__(self, scope: str, rate: str):
        self.scope = scope
        self.limit, self.period = parse_rate(rate)

    @property
    def cache(self):
        return caches[SHARED_CACHE]

    def _window(self, now: float) -> tuple[int, float]:
        index = int(now // self.period)
        return index, (now - index * self.period) / self.period

    def _key(self, ident: str, index: int) -> str:
        return f"failures:{self.scope}:{_digest(ident)}:{index}"

    def _counts(self, ident: str, now: float) -> tuple[int, int, float]:
        index, elapsed = self._window(now)
        counts = self.cache.get_many([self._key(ident, index), self._key(ident, index - 1)])
        return counts.get(self._key(ident, index), 0), counts.get(self._key(ident, index - 1), 0), elapsed

    def has_failed(self, ident: str, *, now: float | None = None) -> bool:
        """Whether ``ident`` has a failure still inside the sliding window."""
        current, previous, elapsed = self._counts(ident, time.time() if now is None else now)
        return previous * (1 - elapsed) + current > 0

    def blocked_for(self, ident: str, *, now: float | None = None) -> int:
        """Seconds until ``ident`` may try again; 0 when it may now."""
        now = time.time() if now is None else now
        current, previous, elapsed = self._counts(ident, now)
        if previous * (1 - elapsed) + current < self.limit:
            return 0
        if current >= self.limit:
            # This window alone is over the limit: wait for it to end, then for enough of it
            # to slide out of the next one.
            wait = (1 - elapsed) * self.period + (1 - self.limit / current) * self.period
        else:
            # The previous window's share must shrink below what is left of the limit.
            wait = ((1 - (self.limit - current) / previous) - elapsed) * self.period
        # The first whole second at which the estimate is below the limit.
        return max(1, math.floor(wait) + 1)

    def record(self, ident: str, *, now: float | None = None) -> None:
        """Count one failure of ``ident``."""
        now = time.time() if now is None else now
        index, _ = self._window(now)
        key, timeout = self._key(ident, index), 2 * self.period + 1
        cache = self.cache
        if isinstance(cache, FileBasedCache):
            # Files: read, add one, write, under a lock every process takes (the backend's own
            # incr is the same read-then-write without one, and resets the key's timeout).
            with file_lock(Path(cache._dir) / ".failures.lock"):
                cache.set(key, cache.get(key, 0) + 1, timeout)
            return
        # Redis increments atomically and keeps the key's expiry (so does the in-memory cache).
        cache.add(key, 0, timeout)
        try:
            cache.incr(key)
        except ValueError:  # expired between add and incr
            cache.set(key, 1, timeout)

    def clear(self, ident: str, *, now: float | None = None) -> None:
        now = time.time() if now is None else now
        index, _ = self._window(now)
        self.cache.delete_many([self._key(ident, index), self._key(ident, index - 1)])
