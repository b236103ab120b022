"""The Celery application. Broker configuration lives in settings (CELERY_*)."""

import os

from celery import Celery
from celery.signals import task_prerun, worker_init, worker_process_init
from django.conf import settings as django_settings

from engram_site import activity, db_priority, embedded_pg, tracing, warmup

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "engram_site.settings")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# Every task runs in a tenant scope of its own (engram_site/scoping.py).
app = Celery("engram", task_cls="engram_site.scoping:ScopedTask")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
def _hold_embedded_database(**kwargs):
    """On the embedded database, the worker's main process starts or joins the server before
    it forks its pool (and beat) and holds it until it exits (engram_site/embedded_pg.py). The
    forked processes inherit its address and are not holders of their own: they leave with
    os._exit, without the exit hook that would release them."""
    if django_settings.EMBEDDED_DATABASE:
        embedded_pg.join(django_settings.ENGRAM_HOME)


@worker_init.connect
def _background_process(**kwargs):
    """The worker's tasks give way to requests at their pause points (engram_site/activity.py);
    the pool processes inherit the mark."""
    activity.become_background()


@worker_init.connect
def _backends_at_worker_priority(**kwargs):
    """The PostgreSQL backends of the worker's connections run at the worker's lowered priority
    (engram_site/db_priority.py); the pool processes inherit the hook."""
    db_priority.follow_worker_priority()


@worker_process_init.connect
def _load_models_early(**kwargs):
    """Load the embedding model in each new pool process while it waits for work, so the
    first enrichment task does not pay for it (a task that arrives sooner waits on the
    provider's lock, it does not load a second copy)."""
    tracing.configure()
    if django_settings.ENGRAM_PRELOAD_MODELS:
        warmup.warm_up()


@task_prerun.connect
def _requests_first(task=None, **kwargs):
    """Before each task, wait for a pause in the requests of a web server on this machine (at
    most ENGRAM_WORKER_YIELD_SECONDS; engram_site/activity.py). A task run eagerly, inside a
    request or a test, does not wait for itself."""
    if task is not None and not task.request.is_eager:
        activity.wait_for_quiet()
