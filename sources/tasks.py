"""Celery tasks of the sources app: thin wrappers around sources.services.

``process_source`` is a hint queued after a submission commits; ``sweep`` (beat, every
minute) processes what a lost hint, a dead worker or a failure left unfinished. Both are
idempotent: chunks that are done are skipped, and a chunk commits whole or not at all.

This module imports only the services its tasks run. The services that make a source pending
send ``sources.signals.source_pending`` after their commit, and sources/receivers.py queues
the task through :func:`enqueue_processing`.
"""

from __future__ import annotations

import logging
import uuid

from celery import shared_task

from engram_site.jobs import runner
from engram_site.jobs.presets import HINT, SCHEDULED
from engram_site.scoping import scopes_disabled
from memories import hooks
from sources.selectors import source_tenant_ids
from sources.services.process import source_process
from sources.services.sweep import sources_sweep

logger = logging.getLogger(__name__)


@shared_task(name="sources.process_source", tenant_scope=source_tenant_ids, **HINT)
def process_source(source_id: str) -> dict:
    return source_process(source_id=source_id).as_dict()


@shared_task(name="sources.sweep", **SCHEDULED)
@scopes_disabled()  # cross-tenant: finishes the unfinished sources of every bucket
def sweep() -> dict:
    return runner.run_job("sources_sweep", sources_sweep, lock=True, keep_idle=False).as_dict()


def enqueue_processing(source_id: uuid.UUID) -> None:
    """Ask a worker to process the source. Never raises and never waits long on a broker that
    is down (memories.hooks backs off); the sweep picks the source up otherwise."""
    try:
        hooks.publish(lambda: process_source.si(str(source_id)), what="source processing", count=1)
    except Exception:  # a signature bug must not fail a committed request either
        logger.exception("could not queue processing of source %s", source_id)
