"""Who holds the embedded PostgreSQL: the last live holder stops it, dead ones do not count."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import psutil

from engram_site import embedded_pg


def test_live_holders_are_kept_and_exited_ones_dropped_even_unreaped(tmp_path):
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    exited = subprocess.Popen([sys.executable, "-c", "pass"])  # never waited for: a zombie
    try:
        deadline = time.monotonic() + 30
        while psutil.Process(exited.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.05)
        assert psutil.Process(exited.pid).status() == psutil.STATUS_ZOMBIE
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
