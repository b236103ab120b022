"""Celery option presets every app's tasks are declared with.

Tasks take ids, never objects, and are idempotent, so ``acks_late`` +
``reject_on_worker_lost`` (run again after a crash) and bounded retries are safe.
"""

from __future__ import annotations

from django.db import InterfaceError, OperationalError

# Connection trouble is worth a few retries with backoff; anything else is a bug or
# a bad row, recorded in the job run and left for the next scheduled run.
RETRYABLE = (OperationalError, InterfaceError)
# A hint: follow-up work queued after a write commits (a sweep finds what a lost one left).
HINT = {
    "acks_late": True,
    "reject_on_worker_lost": True,
    "autoretry_for": RETRYABLE,
    "retry_backoff": 5,
    "retry_backoff_max": 300,
    "retry_jitter": True,
    "max_retries": 5,
}
# A scheduled job (beat): fewer retries, the next run comes anyway.
SCHEDULED = {**HINT, "max_retries": 2}
