"""gunicorn settings every Engram web server shares: ``./engram serve`` (engram_site/serve.py),
the tests' servers (tests/support/processes.py) and the benchmarks' (bench/common.py) load this module
with ``--config python:engram_site.gunicorn_config``; their command lines add the rest.
"""

import os

from prometheus_client import multiprocess

# The longest request line gunicorn reads (method, URL and protocol), at its maximum: 8190
# bytes; its default is 4094. A URL longer than Engram accepts (settings.MAX_URL_BYTES, 4096
# bytes) must reach Django to be answered 414 in the API's JSON error shape
# (engram_site.middleware.UrlLengthMiddleware); only a request line over 8190 bytes is
# refused by gunicorn itself. 0 would mean unlimited: a client could make a worker buffer an
# endless line.
limit_request_line = 8190


def child_exit(server, worker):
    # A worker that exits leaves its metric files (engram_site/metrics.py); its live gauges
    # must stop counting.
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.mark_process_dead(worker.pid)
