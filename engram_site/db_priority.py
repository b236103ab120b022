"""The background worker's PostgreSQL backends at the worker's own CPU priority.

``./engram serve`` lowers its worker's scheduling priority (``ENGRAM_WORKER_NICE``, serve.py),
but much of enrichment's CPU is not spent in the worker: the inserts into the HNSW and GIN
indexes, the graph's and keys' statements run in the PostgreSQL backend serving the worker's
connection, and that process runs at the priority of the database server, equal to the web
requests' backends. Here, each time a worker process opens a database connection, the backend
behind it gets the worker's nice value (and ``SCHED_IDLE`` when the worker is in it), so a
search's statements go first on a busy machine whichever process does the work.

Only a backend on this machine can be lowered: the embedded database, or a server reached
through a Unix socket or a loopback address. The backend's pid must also name a PostgreSQL
process (``/proc/PID/cmdline``) before anything is changed: a server in a container has pids
of another namespace. Lowering a priority needs no privilege when the backend belongs to the
same user (the embedded default as a normal user); otherwise it is refused and left as it was,
noted once in the log.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from django.db.backends.signals import connection_created

logger = logging.getLogger(__name__)

_LOOPBACK = {"", "localhost", "127.0.0.1", "::1"}
_refusal_logged = False


def lower_this_thread(nice: int) -> bool:
    """Lower the calling thread's scheduling priority to ``nice`` (Linux keeps a nice value per
    thread: the process's other threads keep theirs, and threads this one starts inherit it). It
    cannot be raised again without privilege: for threads that keep the priority for their life.
    True when it was changed."""
    if nice <= 0 or not hasattr(os, "getpriority"):
        return False
    thread = threading.get_native_id()
    try:
        if os.getpriority(os.PRIO_PROCESS, thread) >= nice:
            return False
        os.setpriority(os.PRIO_PROCESS, thread, nice)
    except OSError:
        logger.warning("could not lower this thread's priority to nice %d", nice, exc_info=True)
        return False
    return True


def this_thread_lowered() -> bool:
    """Whether the calling thread runs below its process's priority (:func:`lower_this_thread`)."""
    if not hasattr(os, "getpriority"):
        return False
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) > os.getpriority(os.PRIO_PROCESS, os.getpid())


def on_this_machine(settings_dict: dict) -> bool:
    """Whether a connection's server runs on this machine: the embedded database (no HOST until
    the backend fills it in with its socket directory), a Unix socket, or loopback."""
    host = str(settings_dict.get("HOST") or "")
    return host in _LOOPBACK or host.startswith("/")


def _is_postgres(pid: int) -> bool:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"postgres" in command


def lower_backend(pid: int) -> bool:
    """Give PostgreSQL backend ``pid`` this process's nice value and, when this process is in
    ``SCHED_IDLE``, that class too. True when something was changed."""
    global _refusal_logged
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    idle = hasattr(os, "SCHED_IDLE") and os.sched_getscheduler(0) == os.SCHED_IDLE
    if nice <= 0 and not idle:
        return False
    if not _is_postgres(pid):
        return False
    try:
        if nice > os.getpriority(os.PRIO_PROCESS, pid):
            os.setpriority(os.PRIO_PROCESS, pid, nice)
        if idle:
            os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
    except (PermissionError, ProcessLookupError) as error:
        if not _refusal_logged:
            _refusal_logged = True
            logger.info("worker's database backends keep their priority (pid %s: %s)", pid, error)
        return False
    return True


def _on_connection_created(sender, connection, **kwargs) -> None:
    if connection.vendor != "postgresql" or not on_this_machine(connection.settings_dict):
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    lower_backend(pid)


def follow_worker_priority() -> None:
    """From now on, every database connection this process (and the processes it forks) opens
    gets its backend lowered to this process's priority."""
    connection_created.connect(_on_connection_created, weak=False, dispatch_uid="engram-db-priority")
