"""The background worker's database backends run at the worker's lowered priority
(engram_site/db_priority.py)."""

from __future__ import annotations

import os

import pytest
from django.db import connection, connections

from engram_site import db_priority

pytestmark = pytest.mark.django_db


def _backend_opened_by_a_niced_worker(nice: int, *, hook: bool) -> tuple[int, int, int]:
    """Fork a process that lowers itself by ``nice`` (as serve.py does to the worker), optionally
    installs the hook, opens a new database connection and waits. Returns the child's pid, the
    pid of the backend serving its connection, and the pipe end that lets the child finish."""
    read_end, write_end = os.pipe()
    release_read, release_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the "worker"
        status = 1
        try:
            os.close(read_end)
            os.close(release_write)
            os.nice(nice)
            if hook:
                db_priority.follow_worker_priority()
            worker_connection = connections.create_connection("default")
            worker_connection.ensure_connection()
            with worker_connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                os.write(write_end, str(cursor.fetchone()[0]).encode())
            os.close(write_end)
            os.read(release_read, 1)  # hold the connection until the parent has looked
            worker_connection.close()
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    os.close(release_read)
    backend = int(os.read(read_end, 32))
    os.close(read_end)
    return pid, backend, release_write


def _finish(child: int, release: int) -> None:
    os.write(release, b"x")
    os.close(release)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_worker_connection_gets_its_backend_lowered_to_the_worker_priority():
    if not db_priority.on_this_machine(connection.settings_dict):
        pytest.skip("the test database is on another machine: its backends cannot be reniced from here")
    child, backend, release = _backend_opened_by_a_niced_worker(10, hook=True)
    try:
        assert os.getpriority(os.PRIO_PROCESS, backend) >= 10
    finally:
        _finish(child, release)


def test_without_the_hook_a_worker_backend_keeps_the_server_priority():
    """What the hook changes: a niced process's backend is otherwise at the server's priority."""
    if not db_priority.on_this_machine(connection.settings_dict):
        pytest.skip("the test database is on another machine")
    child, backend, release = _backend_opened_by_a_niced_worker(10, hook=False)
    try:
        assert os.getpriority(os.PRIO_PROCESS, backend) < 10
    finally:
        _finish(child, release)


def test_a_pid_that_is_not_a_postgres_backend_is_left_alone():
    """The test process itself stands for a pid that is no backend (a server in a container
    has pids of another namespace)."""
    before = os.getpriority(os.PRIO_PROCESS, 0)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        changed = True
        try:
            os.nice(10)
            changed = db_priority.lower_backend(os.getppid())
        finally:
            os.write(write_end, b"1" if changed else b"0")
            os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read_end, 1) == b"0"
    assert os.getpriority(os.PRIO_PROCESS, 0) == before


def test_a_process_at_normal_priority_changes_nothing():
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (backend,) = cursor.fetchone()
    before = os.getpriority(os.PRIO_PROCESS, backend)
    if os.getpriority(os.PRIO_PROCESS, 0) > 0:
        pytest.skip("this test process is itself niced")
    assert db_priority.lower_backend(backend) is False
    assert os.getpriority(os.PRIO_PROCESS, backend) == before


@pytest.mark.parametrize(
    ("host", "local"),
    [
        ("", True),
        ("localhost", True),
        ("127.0.0.1", True),
        ("::1", True),
        ("/run/postgresql", True),
        ("db.internal", False),
        ("10.0.0.5", False),
    ],
)
def test_only_a_server_on_this_machine_counts_as_local(host, local):
    assert db_priority.on_this_machine({"HOST": host}) is local
