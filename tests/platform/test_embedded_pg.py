"""Who holds the embedded PostgreSQL: the last live holder stops it, dead ones do not count."""

from __future__ import annotations

import json
import subprocess
import sys

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
