"""What tests (and bench/) need beyond Django's test client: real processes — a private
PostgreSQL or Redis, gunicorn, Celery workers — and in-process HTTP
servers. No pytest in this package: it is imported outside the test runner too.

Fixtures live in tests/conftest.py and rows are made by tests/factories.py.
"""

from tests.support.loopback import FakeLLM, LoopbackServer
from tests.support.processes import (
    PrivatePostgres,
    PrivateRedis,
    Process,
    StartLine,
    TcpPostgres,
    base_env,
    beat_process,
    celery_worker,
    free_port,
    http_get,
    manage,
    redis_reachable,
    start_all,
    stop_all,
    test_database_url,
    use_broker,
    wait_for,
    web_process,
    web_server,
    worker_process,
)
from tests.support.project import APPS, ROOT

__all__ = [
    "APPS",
    "ROOT",
    "FakeLLM",
    "LoopbackServer",
    "PrivatePostgres",
    "PrivateRedis",
    "Process",
    "StartLine",
    "TcpPostgres",
    "base_env",
    "beat_process",
    "celery_worker",
    "free_port",
    "http_get",
    "manage",
    "redis_reachable",
    "start_all",
    "stop_all",
    "test_database_url",
    "use_broker",
    "wait_for",
    "web_process",
    "web_server",
    "worker_process",
]
