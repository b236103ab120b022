"""gunicorn settings every Engram web server shares: ``./engram serve`` (engram_site/serve.py),
the tests' servers (tests/support/processes.py) and the benchmarks' (bench/common.py) load this module
with ``--config python:engram_site.gunicorn_config``; their command lines add the rest.
"""

import gc
import os

from prometheus_client import multiprocess

# The longest request line gunicorn reads (method, URL and protocol), at its maximum: 8190
# bytes; its default is 4094. A URL longer than Engram accepts (settings.MAX_URL_BYTES, 4096
# bytes) must reach Django to be answered 414 in the API's JSON error shape
# (engram_site.middleware.UrlLengthMiddleware); only a request line over 8190 bytes is
# refused by gunicorn itself. 0 would mean unlimited: a client could make a worker buffer an
# endless line.
limit_request_line = 8190

# The application (Django, the apps, the URLs, the middleware) is loaded by the master before it
# binds its port, and each worker is forked from it ready to answer. Loaded by each worker
# instead (gunicorn's default), a starting or restarting server held its port for the seconds
# its workers took to import Django, and a call that came then waited in the listen queue (up
# to 22 s under load, docs/RELIABILITY.md); now it is refused at once, as by a stopped server,
# and a client's retry finds a server that answers. Nothing the master loads may start a
# thread or open a connection (a fork would carry neither): the threads a web process needs are
# started per worker, below. Only a full restart loads new code: SIGHUP does not reload a
# preloaded application (./engram serve never sends it).
preload_app = True

# gunicorn's threaded worker, spreading new connections over the workers
# (engram_site/gunicorn_worker.py): left to the race for the listening socket, a few clients that
# connect together all land on one worker.
worker_class = "engram_site.gunicorn_worker.SpreadingThreadWorker"


def pre_fork(server, worker):
    # In the master, before each worker is forked: what preloading made (Django, the apps, spaCy,
    # PyTorch's and the tokenizer's modules: ~400k objects) lives as long as the process. Frozen
    # (gc.freeze), a worker's full garbage collections no longer walk them: one took ~300 ms with
    # the GIL held, so every thread of the worker stood still (after a burst of writes, four
    # searches at once each waited ~0.5 s, bench/results/burst-search-2026-11-28-evening.md), and
    # walking them also wrote to every page the fork shares. Garbage is collected first, so none
    # is frozen; after the first fork there is little left to collect.
    gc.collect()
    gc.freeze()


def post_worker_init(worker):
    # In each worker, after its fork from the master (preload_app): the OTLP exporter's batch
    # thread and the embedding model's warm-up (ONNX Runtime's thread pools), started in the
    # master, would not survive the fork, and their locks could be copied held.
    from engram_site import wsgi

    wsgi.start_worker()


def child_exit(server, worker):
    # A worker that exits leaves its metric files (engram_site/metrics.py); its live gauges
    # must stop counting.
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.mark_process_dead(worker.pid)
