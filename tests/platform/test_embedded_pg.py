"""Who holds the embedded PostgreSQL: the last live holder stops it, dead ones do not count."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from engram_site import embedded_pg
from tests.support import wait_for


@pytest.mark.slow
def test_live_holders_are_kept_and_exited_ones_dropped_even_unreaped(tmp_path):
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    exited = subprocess.Popen([sys.executable, "-c", "pass"])  # never waited for: a zombie
    try:
        wait_for(lambda: psutil.Process(exited.pid).status() == psutil.STATUS_ZOMBIE, timeout=30, interval=0.05)
        holders = tmp_path / "pgdata.holders"
        holders.write_text(
            json.dumps(
                [
                    [alive.pid, psutil.Process(alive.pid).create_time()],
                    [exited.pid, psutil.Process(exited.pid).create_time()],
                    [alive.pid, 12.0],  # a recycled pid: another process than the one that registered
                ]
            )
        )
        assert embedded_pg._read_holders(holders) == [[alive.pid, psutil.Process(alive.pid).create_time()]]
    finally:
        alive.kill()
        alive.wait()
        exited.wait()


@pytest.mark.slow
def test_a_stop_signal_during_the_start_is_handled_once_the_process_holds_the_server(pg_home, monkeypatch):
    """``./engram serve`` stops its start-up by raising from its SIGTERM handler. Raised between
    the server's start and the holders' write, nothing would ever stop that server: the signal
    must wait until this process is a holder (whose exit stops it)."""
    started = embedded_pg._server

    def server_that_is_signalled_once_started(pgdata):
        server = started(pgdata)
        run = server.ensure_postgres_running

        def running_then_signalled():
            run()
            os.kill(os.getpid(), signal.SIGTERM)  # the server runs; this process holds nothing yet

        server.ensure_postgres_running = running_then_signalled
        return server

    seen = []

    class Stopped(BaseException):
        pass

    def handler(signum, frame):
        seen.append([h[0] for h in embedded_pg._read_holders(pg_home / "pgdata.holders")])
        raise Stopped

    monkeypatch.setattr(embedded_pg, "_server", server_that_is_signalled_once_started)
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        with pytest.raises(Stopped):
            embedded_pg.ensure_running(pg_home)
            # sleep-ok: a signal held until the start ends arrives then; this only gives a late one time to show
            time.sleep(5)
    finally:
        signal.signal(signal.SIGTERM, previous)
        embedded_pg.stop(pg_home)
    assert seen == [[os.getpid()]]
