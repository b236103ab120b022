"""Prometheus metrics: what every process measures, and the ``/metrics`` page that shows them.

The instruments are declared here, beside no domain code; the apps record into them
(``memories`` times searches and embedding batches, ``maintenance`` counts job runs) and
register scrape-time gauges (``register_gauge``) for figures read from the database when
Prometheus asks, such as the enrichment backlog.

Several processes, one page: ``./engram serve`` sets ``PROMETHEUS_MULTIPROC_DIR`` for the
web workers and the background worker it starts (``engram_site/serve.py``), each process
writes its samples to files there, and ``/metrics`` adds them up (prometheus-client's
multiprocess mode; gunicorn's ``child_exit`` hook in engram_site/gunicorn_config.py marks a
dead worker's gauges). A process
started without it (the tests, ``manage.py``) keeps its samples in memory and serves its own.
"""

from __future__ import annotations

import functools
import hmac
import logging
import os
import time
from collections.abc import Callable

from django.conf import settings
from django.db import connection
from django.http import HttpResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily

from engram_site.scoping import scopes_disabled

logger = logging.getLogger(__name__)

# Seconds: a search on 100k memories takes ~30 ms on 2 cores; a slow one, seconds.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

REQUEST_SECONDS = Histogram(
    "engram_http_request_duration_seconds",
    "Time to answer an HTTP request, by URL pattern (not the raw path), method and status class.",
    ["route", "method", "status"],
    buckets=LATENCY_BUCKETS,
)
SEARCH_SECONDS = Histogram(
    "engram_search_duration_seconds",
    "Time of a whole search (signals, fusion, rows), by the mode asked for.",
    ["mode"],
    buckets=LATENCY_BUCKETS,
)
SIGNAL_SECONDS = Histogram(
    "engram_search_signal_duration_seconds",
    "Time of one retrieval signal's query (keyword, vector, graph) within a search.",
    ["signal"],
    buckets=LATENCY_BUCKETS,
)
MEMORIES_WRITTEN = Counter(
    "engram_memories_written_total",
    "Memories stored by the write gateway; duplicates of a stored text are counted as deduplicated.",
    ["outcome"],
)
EMBEDDING_BATCH_SECONDS = Histogram(
    "engram_embedding_batch_duration_seconds",
    "Time to embed one batch of texts with the embedding model.",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
EMBEDDING_TEXTS = Counter("engram_embedding_texts_total", "Texts embedded by the embedding model.")
REPLICA_READS = Counter(
    "engram_replica_reads_total",
    "Searches and memory lists with a replica configured (engram_site/replica.py), by the database "
    "that answered and why it was chosen.",
    ["database", "reason"],
)
REPLICA_WAIT_SECONDS = Histogram(
    "engram_replica_wait_seconds",
    "Time a read spent making sure the replica has replayed its tenant's recent writes (the "
    "primary's position, then the replica's, polled), whether it caught up or not.",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
)
JOB_RUNS = Counter(
    "engram_job_runs_total",
    "Background job runs finished, by job and outcome (succeeded, failed, skipped, …).",
    ["job", "status"],
)

# Figures read when Prometheus scrapes: name -> (help, function returning {labels: value}).
_gauges: dict[str, tuple[str, tuple[str, ...], Callable[[], dict[tuple[str, ...], float]]]] = {}


def register_gauge(name: str, documentation: str, labels: tuple[str, ...], read: Callable) -> None:
    """Add a gauge computed at scrape time (idempotent per name). ``read`` returns a mapping of
    label-value tuples to values; an exception in it leaves the gauge out of that scrape."""
    _gauges[name] = (documentation, labels, read)


def _database_connections() -> dict[tuple[str, ...], float]:
    # Django holds one persistent connection per thread (DB_CONN_MAX_AGE) instead of a pool:
    # the server's own view of this database's connections is the pool's size.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(state, 'unknown'), count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND backend_type = 'client backend' GROUP BY 1"
        )
        return {(state,): float(count) for state, count in cursor.fetchall()}


register_gauge(
    "engram_db_connections", "Client connections open to Engram's database, by state.", ("state",),
    _database_connections,
)  # fmt: skip


class _ScrapeTimeCollector:
    def describe(self):
        # Registering asks a collector for its names; without this it would call collect(),
        # reading the database at import.
        return []

    def collect(self):
        for name, (documentation, labels, read) in sorted(_gauges.items()):
            try:
                with scopes_disabled():  # cross-tenant: a gauge counts the whole service
                    values = read()
            except Exception as exc:  # one unreadable figure must not fail the whole scrape
                logger.warning("metric %s could not be read: %s", name, exc)
                continue
            family = GaugeMetricFamily(name, documentation, labels=list(labels))
            for label_values, value in values.items():
                family.add_metric(list(label_values), value)
            yield family


_SCRAPE_TIME = _ScrapeTimeCollector()
if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    REGISTRY.register(_SCRAPE_TIME)


def _registry() -> CollectorRegistry:
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return REGISTRY  # this process's instruments, with the scrape-time gauges
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    registry.register(_SCRAPE_TIME)
    return registry


def metrics_view(request):
    """``GET /metrics`` in the Prometheus text format; with ``ENGRAM_METRICS_TOKEN`` set, only
    for ``Authorization: Bearer <that token>``."""
    expected = settings.ENGRAM_METRICS_TOKEN
    if expected:
        given = request.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {expected}".encode()):
            response = HttpResponse("metrics need Authorization: Bearer <ENGRAM_METRICS_TOKEN>\n", status=401)
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
            return response
    if request.method != "GET":
        return HttpResponse(status=405, headers={"Allow": "GET"})
    return HttpResponse(generate_latest(_registry()), content_type=CONTENT_TYPE_LATEST)


def timed(histogram: Histogram, **labels: str):
    """Decorator: observe the call's duration in ``histogram`` with fixed ``labels``."""
    child = histogram.labels(**labels) if labels else histogram

    def decorate(function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                child.observe(time.perf_counter() - started)

        return wrapper

    return decorate


_METHODS = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}


def timed_search(function):
    """Decorator for the search service: its duration by the ``mode`` it was asked for."""

    @functools.wraps(function)
    def wrapper(*args, mode: str = "hybrid", **kwargs):
        started = time.perf_counter()
        try:
            return function(*args, mode=mode, **kwargs)
        finally:
            SEARCH_SECONDS.labels(mode=mode).observe(time.perf_counter() - started)

    return wrapper


def count_written(created: int, deduplicated: int) -> None:
    if created:
        MEMORIES_WRITTEN.labels(outcome="created").inc(created)
    if deduplicated:
        MEMORIES_WRITTEN.labels(outcome="deduplicated").inc(deduplicated)


class RequestMetricsMiddleware:
    """Times every request by its URL pattern: bounded label values whatever the paths."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        route = match.route if match is not None and match.route else "unmatched"
        method = request.method if request.method in _METHODS else "other"
        REQUEST_SECONDS.labels(route=route, method=method, status=f"{response.status_code // 100}xx").observe(
            time.perf_counter() - started
        )
        return response
