"""The Celery application. Broker configuration lives in settings (CELERY_*)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "engram_site.settings")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

app = Celery("engram")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
