"""Settings of the test suite (pytest's DJANGO_SETTINGS_MODULE; ``./engram test`` passes it).

The production settings with five defaults turned off, so that a test process loads no
model it does not use, starts no background threads and runs every search on its one
connection, inside the test's transaction. Each can still be set in the environment.
Processes that tests start (web servers, workers) run ``engram_site.settings``
(tests/support/processes.py's ``base_env``), as a deployment would.
"""

import os
from pathlib import Path

# Under pytest-xdist (``./engram test`` runs the suite in parallel), each worker process gets a
# home of its own, $ENGRAM_HOME/xdist/<worker>, and so its own embedded PostgreSQL, caches and
# broker folder: the workers' test transactions must not hold back each other's change feed
# (which waits for every older transaction of the server), nor clear each other's throttle
# counters. The processes a test starts inherit it. The exported embedding model is shared.
_worker = os.environ.get("PYTEST_XDIST_WORKER")
if _worker:
    _home = Path(os.environ.get("ENGRAM_HOME") or Path(__file__).resolve().parent.parent / "var").resolve()
    os.environ.setdefault("ENGRAM_MODEL_CACHE", str(_home / "models"))
    os.environ["ENGRAM_HOME"] = str(_home / "xdist" / _worker)

from engram_site.settings import *  # noqa: E402, F403
from engram_site.settings import env_bool, env_float, env_int  # noqa: E402

ENGRAM_PRELOAD_MODELS = env_bool("ENGRAM_PRELOAD_MODELS", False)
# Writes embed at the test process's priority: the suite's processes share the machine's cores, and
# a lowered thread would wait on the other test processes. tests/memories/test_write_priority.py
# sets it where it is the subject.
ENGRAM_WRITE_NICE = env_int("ENGRAM_WRITE_NICE", 0)
ENGRAM_ACCESS_BACKGROUND = env_bool("ENGRAM_ACCESS_BACKGROUND", False)
ENGRAM_STATS_BACKGROUND = env_bool("ENGRAM_STATS_BACKGROUND", False)
ENGRAM_SEARCH_PARALLEL = env_bool("ENGRAM_SEARCH_PARALLEL", False)
# No worker shares a test process's home, so its requests mark nothing (tests/platform/test_activity.py
# turns it on).
ENGRAM_WORKER_YIELD_SECONDS = env_float("ENGRAM_WORKER_YIELD_SECONDS", 0.0)
