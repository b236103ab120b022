"""The Celery application. Broker configuration lives in settings (CELERY_*)."""

import os

from celery import Celery
from celery.signals import worker_process_init

from engram_site import warmup

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "engram_site.settings")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

app = Celery("engram")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_process_init.connect
def _load_models_early(**kwargs):
    """Load the embedding model in each new pool process while it waits for work, so the
    first enrichment task does not pay for it (a task that arrives sooner waits on the
    provider's lock, it does not load a second copy)."""
    from django.conf import settings  # not at the top: this module loads before Django's settings

    if settings.ENGRAM_PRELOAD_MODELS:
        warmup.warm_up()
