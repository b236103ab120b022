"""Settings of the test suite (pytest's DJANGO_SETTINGS_MODULE; ``./engram test`` passes it).

The production settings with four defaults turned off, so that a test process loads no
model it does not use, starts no background threads and runs every search on its one
connection, inside the test's transaction. Each can still be set in the environment.
Processes that tests start (web servers, workers) run ``engram_site.settings``
(tests/support.py's ``base_env``), as a deployment would.
"""

from engram_site.settings import *  # noqa: F403
from engram_site.settings import env_bool

ENGRAM_PRELOAD_MODELS = env_bool("ENGRAM_PRELOAD_MODELS", False)
ENGRAM_ACCESS_BACKGROUND = env_bool("ENGRAM_ACCESS_BACKGROUND", False)
ENGRAM_STATS_BACKGROUND = env_bool("ENGRAM_STATS_BACKGROUND", False)
ENGRAM_SEARCH_PARALLEL = env_bool("ENGRAM_SEARCH_PARALLEL", False)
