"""The worker's webhook task: each run dispatches new events, sends what is due, trims what is old.

Scheduled by beat (maintenance/schedules.py, "engram: webhook deliveries"). Runs may overlap
safely: subscriptions and deliveries are claimed with row locks (SKIP LOCKED).
"""

from __future__ import annotations

from celery import shared_task

from engram_site.jobs.presets import SCHEDULED
from engram_site.scoping import scopes_disabled
from webhooks import services


@shared_task(name="webhooks.deliver", **SCHEDULED)
@scopes_disabled()  # cross-tenant: dispatches the events of every tenant's subscriptions
def deliver() -> dict:
    return services.webhooks_run()
