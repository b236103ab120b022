"""Reads from a streaming replica: which database a search or a list reads, read-your-writes,
and the fall back to the primary.

With ``DATABASE_REPLICA_URL`` set, Django has a second database alias, :data:`ALIAS`, a hot
standby of the primary (PostgreSQL's physical streaming replication). The API's searches and
memory lists read through it (:func:`read`); everything else — writes, the access-time
bookkeeping, authentication, anything inside a transaction — stays on the primary. Unset, there
is no such alias and every read goes to the primary, as before.

Where a read goes is held in a context variable for the duration of :func:`read`:
:class:`Router` sends the ORM's reads there, :func:`read_connection` gives raw SQL the same
connection, and the search's executor threads inherit it with the context they run in. Writes
always go to the primary (the router says so; a hot standby would refuse them anyway).

Read-your-writes. A memory written a moment ago is on the primary before the replica has
replayed it. Every API request that may have written notes its tenant (:func:`note_write`, from
:class:`ReadYourWritesMiddleware`) in the shared cache for ``ENGRAM_REPLICA_WINDOW`` seconds.
A read of a tenant noted there either (``ENGRAM_READ_YOUR_WRITES=wait``, the default) asks the
primary for its WAL flush position — past every commit acknowledged so far — and waits for the
replica to replay that far, at most ``ENGRAM_REPLICA_WAIT_MS``; or (``primary``) reads the
primary. The choice and its measurements: docs/DEPLOYMENT.md, "Read replicas for search".

Fallback. A replica that cannot be reached, fails a read, or has not caught up within the bound
is never an error: the read runs on the primary. After a failure this process leaves the replica
alone for :data:`RETRY_SECONDS`; after a wait that ran out, the reads of tenants with recent
writes go straight to the primary for :data:`BEHIND_SECONDS` instead of waiting again.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from django.conf import settings
from django.core.cache import caches
from django.db import DEFAULT_DB_ALIAS, DatabaseError, InterfaceError, OperationalError, connections

from engram_site.metrics import REPLICA_READS as READS
from engram_site.metrics import REPLICA_WAIT_SECONDS

logger = logging.getLogger(__name__)

ALIAS = "replica"
PRIMARY = DEFAULT_DB_ALIAS
MODES = ("wait", "primary")
RETRY_SECONDS = 5.0  # after a failed read, the replica is left alone this long (per process)
BEHIND_SECONDS = 1.0  # after a wait ran out, tenants with recent writes read the primary this long
POLL_SECONDS = 0.002  # between two looks at the replica's replay position while waiting

_reading: contextvars.ContextVar[str] = contextvars.ContextVar("engram_read_alias", default=PRIMARY)
_state_lock = threading.Lock()
_down_until = 0.0
_behind_until = 0.0

T = TypeVar("T")


def configured() -> bool:
    return ALIAS in settings.DATABASES


def read_alias() -> str:
    """The database alias reads go to here: the replica inside :func:`read`'s replica block."""
    return _reading.get()


def read_connection():
    """The connection raw SQL that only reads uses: the primary's, or the replica's inside
    :func:`read`'s replica block (and in the threads that inherit its context)."""
    return connections[_reading.get()]


@contextlib.contextmanager
def reading(alias: str):
    """Reads in the block (ORM and :func:`read_connection`) go to ``alias``."""
    token = _reading.set(alias)
    try:
        yield
    finally:
        _reading.reset(token)


class Router:
    """Django's database router: reads where :func:`reading` says (the primary unless inside a
    replica block), writes and migrations on the primary only."""

    def db_for_read(self, model, **hints):
        alias = _reading.get()
        # A read inside a transaction of the primary belongs to that transaction.
        if alias != PRIMARY and connections[PRIMARY].in_atomic_block:
            return PRIMARY
        return alias

    def db_for_write(self, model, **hints):
        return PRIMARY

    def allow_relation(self, obj1, obj2, **hints):
        return True  # one database, two copies of it

    def allow_migrate(self, db, app_label, model_name=None, **hints):
        return db == PRIMARY


# --- read-your-writes ---------------------------------------------------------------------


def _written_key(tenant_id) -> str:
    return f"engram:replica:written:{tenant_id}"


def note_write(tenant_id) -> None:
    """Remember that ``tenant_id`` may just have written: for ``ENGRAM_REPLICA_WINDOW`` seconds
    its reads wait for the replica to catch up (or read the primary). In the shared cache, so
    that every web process of the deployment sees it (Redis across machines)."""
    if tenant_id is None or not configured():
        return
    caches["shared"].set(_written_key(tenant_id), time.time(), settings.ENGRAM_REPLICA_WINDOW)


def wrote_recently(tenant_id) -> bool:
    return caches["shared"].get(_written_key(tenant_id)) is not None


def lsn_value(text: str) -> int:
    """A ``pg_lsn`` ('16/B374D848') as a number, for comparing."""
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)


def primary_position() -> int:
    """The primary's WAL flush position: every commit acknowledged so far ends at or before it,
    and it is as far as a standby can have received."""
    with connections[PRIMARY].cursor() as cur:
        cur.execute("SELECT pg_current_wal_flush_lsn()::text")
        return lsn_value(cur.fetchone()[0])


def replayed_position() -> int | None:
    """How far the replica has replayed the primary's WAL (None: it is not in recovery)."""
    with connections[ALIAS].cursor() as cur:
        cur.execute("SELECT pg_last_wal_replay_lsn()::text")
        value = cur.fetchone()[0]
    return lsn_value(value) if value else None


def caught_up(target: int, *, bound: float) -> bool:
    """Whether the replica replays ``target`` within ``bound`` seconds (polled)."""
    deadline = time.monotonic() + bound
    while True:
        replayed = replayed_position()
        if replayed is not None and replayed >= target:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_SECONDS)


# --- where a read goes ----------------------------------------------------------------------


def _mark_down() -> None:
    global _down_until
    with _state_lock:
        _down_until = time.monotonic() + RETRY_SECONDS
    # This thread's replica connection is broken or suspect: the next use opens a new one.
    with contextlib.suppress(Exception):
        connections[ALIAS].close()


def _mark_behind() -> None:
    global _behind_until
    with _state_lock:
        _behind_until = time.monotonic() + BEHIND_SECONDS


def reset() -> None:
    """Forget this process's view of the replica's health (tests)."""
    global _down_until, _behind_until
    with _state_lock:
        _down_until = _behind_until = 0.0


def choose(tenant_id) -> tuple[str, str]:
    """(alias, reason) for a read by ``tenant_id`` now; see the module's docstring."""
    if not configured():
        return PRIMARY, "no_replica"
    if connections[PRIMARY].in_atomic_block:
        return PRIMARY, "transaction"
    now = time.monotonic()
    if now < _down_until:
        return PRIMARY, "replica_down"
    if tenant_id is None or not wrote_recently(tenant_id):
        return ALIAS, "replica"
    if settings.ENGRAM_READ_YOUR_WRITES == "primary":
        return PRIMARY, "recent_write"
    if now < _behind_until:
        return PRIMARY, "replica_behind"
    started = time.perf_counter()
    try:
        target = primary_position()
        if caught_up(target, bound=settings.ENGRAM_REPLICA_WAIT_MS / 1000):
            return ALIAS, "caught_up"
    except (OperationalError, InterfaceError) as exc:
        logger.warning("the replica cannot be reached (%s); reading the primary for %ss", exc, RETRY_SECONDS)
        _mark_down()
        return PRIMARY, "replica_down"
    finally:
        REPLICA_WAIT_SECONDS.observe(time.perf_counter() - started)
    _mark_behind()
    return PRIMARY, "replica_behind"


def read(tenant_id, run: Callable[[str], T]) -> T:
    """``run(alias)`` on the database :func:`choose` picks, inside :func:`reading` of it; on
    the primary again if the replica fails it (never an error of its own). ``run`` only reads
    (what it records goes through write-behind buffers to the primary) and may run twice."""
    alias, reason = choose(tenant_id)
    if alias == PRIMARY:
        if reason != "no_replica":
            READS.labels(database=PRIMARY, reason=reason).inc()
        with reading(PRIMARY):
            return run(PRIMARY)
    try:
        with reading(ALIAS):
            result = run(ALIAS)
    except DatabaseError as exc:
        if isinstance(exc, OperationalError | InterfaceError):
            # Unreachable, restarted, or a query cancelled by a recovery conflict.
            logger.warning("a read on the replica failed (%s); reading the primary for %ss", exc, RETRY_SECONDS)
            _mark_down()
        else:
            logger.exception("a read on the replica failed; answered from the primary")
        READS.labels(database=PRIMARY, reason="replica_failed").inc()
        with reading(PRIMARY):
            return run(PRIMARY)
    READS.labels(database=ALIAS, reason=reason).inc()
    return result


# --- the middleware that notes writes ------------------------------------------------------

_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})


class ReadYourWritesMiddleware:
    """Notes the tenant of every API request that may have written (an unsafe method, except
    views that declare ``replica_reads = True``: a search is a POST that only reads), once the
    view has answered and its writes are committed."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if request.method not in _SAFE_METHODS and configured() and not getattr(request, "_engram_reads_only", False):
            # DRF puts the authenticated token on the Django request too.
            token = getattr(request, "auth", None)
            tenant_id = getattr(token, "tenant_id", None)
            if tenant_id is not None:
                try:
                    note_write(tenant_id)
                except Exception:  # the answer stands; a lost note costs read-your-writes, logged
                    logger.exception("could not note a write of tenant %s", tenant_id)
        return response

    def process_view(self, request, view_func, view_args, view_kwargs):
        view_class = getattr(view_func, "cls", None) or getattr(view_func, "view_class", None)
        request._engram_reads_only = bool(getattr(view_class, "replica_reads", False))
        return None
