"""The worker's webhook task: each run dispatches new events, sends what is due, trims what is old.

Scheduled by beat (maintenance/schedules.py, "engram: webhook deliveries"). Runs may overlap
safely: subscriptions and deliveries are claimed with row locks (SKIP LOCKED).
"""

from __future__ import annotations

from celery import shared_task
from django.db import InterfaceError, OperationalError

from webhooks import services


@shared_task(
    name="webhooks.deliver",
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=(OperationalError, InterfaceError),
    retry_backoff=5,
    max_retries=2,
)
def deliver() -> dict:
    return services.webhooks_run()
