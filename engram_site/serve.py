"""``./engram serve``: migrate, make sure an operator account exists, then run the
web server (gunicorn) and the background worker with its beat scheduler,
supervising them until interrupted.

Environment: ENGRAM_HOST (127.0.0.1), ENGRAM_PORT (8000), ENGRAM_WEB_WORKERS (2),
ENGRAM_WEB_THREADS (4), ENGRAM_RUN_WORKER (1: also start the Celery worker + beat),
ENGRAM_WORKER_CONCURRENCY (2). ``--host`` and ``--port`` override the first two; any other
argument is refused rather than ignored. gunicorn settings shared with the tests' servers are in
engram_site/gunicorn_config.py.

SIGINT and SIGTERM stop it, from the first line on: a process started in the background by a
non-interactive shell (``setsid ./engram serve &``) inherits SIGINT ignored, so both are set
here before anything else, and the web server and the worker start with their default
handlers rather than the ignored one. A signal during the start-up (migrations, static files)
ends it there, with status 128 + the signal's number; once the children run, they are stopped
(SIGTERM, then SIGKILL after 30 s) and ``serve`` exits 0.

The start-up is stopped by raising from the signal handler, and Python swallows an exception
raised while it runs a finalizer (a ``weakref.finalize`` callback, a ``__del__``, a garbage
collector callback: it prints "Exception ignored in ..." and goes on). A signal that landed
there was lost: ``serve`` went on to start its children and ran on. So the handler records the
stop before it raises, and the start-up checks that record between its steps (each migration,
static files, the admin account, and once more before the children start): a stop is acted on
where it lands, or at the latest at the next step.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import django

from engram_site import activity


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="./engram serve", description="Migrate, then serve Engram.")
    parser.add_argument("--host", default=os.environ.get("ENGRAM_HOST", "127.0.0.1"), help="(ENGRAM_HOST)")
    parser.add_argument("--port", type=int, default=int(os.environ.get("ENGRAM_PORT", "8000")), help="(ENGRAM_PORT)")
    return parser.parse_args(argv)


class _Interrupted(BaseException):
    """A stop asked for during the start-up (a BaseException, like KeyboardInterrupt: no
    ``except Exception`` on the way swallows it)."""

    def __init__(self, signum: int):
        self.signum = signum


# The stops asked for during the start-up: kept, so that one whose exception was swallowed
# (see the module's docstring) still ends it.
_stops_asked: list[int] = []


def _interrupt(signum, frame):
    _stops_asked.append(signum)  # first: the raise below may be lost
    raise _Interrupted(signum)


def _go_on() -> None:
    """A step of the start-up is done: end it here if a stop was asked for meanwhile."""
    if _stops_asked:
        raise _Interrupted(_stops_asked[0])


def _migrate_command():
    """Django's ``migrate``, with :func:`_go_on` after each step it reports (each migration
    applied, the models rendered): a long list of migrations stops between two of them."""
    from django.core.management.commands import migrate

    class Migrate(migrate.Command):
        def migration_progress_callback(self, action, migration=None, fake=False):
            super().migration_progress_callback(action, migration, fake)
            _go_on()

    return Migrate()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # Until the children run, either signal ends the start-up where it is (a migration rolls
    # back); an inherited SIG_IGN is replaced, and is not passed on to the children.
    _stops_asked.clear()
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        return _serve(args)
    except _Interrupted as stop:
        print(f"[engram] stopped during start-up ({signal.Signals(stop.signum).name})", flush=True)
        return 128 + stop.signum


def _serve(args: argparse.Namespace) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "engram_site.settings")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    host, port = args.host, args.port
    workers = os.environ.get("ENGRAM_WEB_WORKERS", "2")
    threads = os.environ.get("ENGRAM_WEB_THREADS", "4")

    call_command(_migrate_command(), interactive=False, verbosity=1)
    _go_on()
    call_command("collectstatic", interactive=False, verbosity=0)
    _go_on()
    call_command("ensure_admin")
    _go_on()

    _metrics_directory(settings.ENGRAM_HOME / "metrics")
    activity.clear()  # markers of an earlier run's web processes (engram_site/activity.py)

    # From here a signal only asks the loop below to stop the children: raised while one of
    # them is being started, it would leave that one running.
    stopping = False

    def _stop(signum, frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    _go_on()  # a stop asked for before these handlers, whose exception was swallowed
    children: dict[str, subprocess.Popen] = {}
    web_cmd = [
        sys.executable, "-m", "gunicorn", "engram_site.wsgi:application",
        "--config", "python:engram_site.gunicorn_config",
        "--bind", f"{host}:{port}",
        "--workers", workers,
        "--threads", threads,
        "--timeout", "120",
        "--graceful-timeout", "20",
        "--access-logfile", "-",
        "--no-control-socket",
        "--forwarded-allow-ips", os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1"),
    ]  # fmt: skip
    children["web"] = subprocess.Popen(web_cmd)
    worker_cmd = _worker_command()
    if worker_cmd and os.environ.get("ENGRAM_RUN_WORKER", "1") == "1":
        # Below the web server's priority (ENGRAM_WORKER_NICE): requests first, enrichment
        # on what they leave. The pool processes the worker forks inherit it.
        children["worker"] = subprocess.Popen(worker_cmd, preexec_fn=_lower_priority)

    database = (
        "embedded PostgreSQL in " + str(settings.ENGRAM_HOME / "pgdata")
        if settings.EMBEDDED_DATABASE
        else "DATABASE_URL"
    )
    print(
        f"\nEngram is starting on http://{host}:{port}/  (database: {database})\n"
        f"  operator console: http://{host}:{port}/admin/\n"
        f"  API docs:         http://{host}:{port}/api/docs/\n"
        f'  get an API token: ./engram manage create_tenant "My team" --bucket default\n'
        f"  stop with Ctrl-C\n",
        flush=True,
    )

    exit_code = 0
    while not stopping:
        for name, proc in children.items():
            if proc.poll() is not None:
                print(f"[engram] {name} exited with status {proc.returncode}; shutting down", flush=True)
                exit_code = proc.returncode or 1
                stopping = True
                break
        time.sleep(0.5)
    for proc in children.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.time() + 30
    for proc in children.values():
        try:
            proc.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()  # reaped, so the embedded database's holder list sees it gone
    return exit_code


def _lower_priority() -> None:
    """In the worker's process before it starts (the pool processes it forks inherit it): nice
    by ENGRAM_WORKER_NICE, and the SCHED_IDLE class when it says ``idle`` (Linux)."""
    from django.conf import settings

    if settings.ENGRAM_WORKER_NICE:
        os.nice(settings.ENGRAM_WORKER_NICE)
    if settings.ENGRAM_WORKER_IDLE and hasattr(os, "SCHED_IDLE"):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def _metrics_directory(default: Path) -> None:
    """Where the web workers and the background worker write their metric samples for /metrics
    to add up (prometheus-client's multiprocess mode). Samples of an earlier run are removed:
    counters restart with the processes, as Prometheus expects."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return  # the operator's own directory, emptied by the operator
    default.mkdir(parents=True, exist_ok=True)
    for stale in default.glob("*.db"):
        stale.unlink()
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(default)


def _worker_command() -> list[str] | None:
    """The Celery worker with an embedded beat scheduler (django-celery-beat's
    DatabaseScheduler: the schedules live in the database, editable in the admin).

    Embedding beat in the worker suits one machine; with several workers, run
    beat once on its own instead (docs/MAINTENANCE.md). The worker imports the
    settings, so on the embedded database it registers as a holder like the web
    processes do.
    """
    from django.conf import settings

    return [
        sys.executable, "-m", "celery", "-A", "engram_site", "worker",
        "--beat", "--scheduler", settings.CELERY_BEAT_SCHEDULER,
        "--concurrency", str(settings.ENGRAM_WORKER_CONCURRENCY),
        "--queues", settings.CELERY_TASK_DEFAULT_QUEUE,
        "--hostname", "engram@%h",
        "--loglevel", "info",
        # One worker per machine by default: no peers to synchronise with at start-up
        # or to gossip with (both only add broker traffic and start-up delay).
        "--without-mingle", "--without-gossip",
    ]  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
