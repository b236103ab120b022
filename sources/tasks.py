"""Celery tasks of the sources app: thin wrappers around sources.services.

``process_source`` is a hint queued after a submission commits; ``sweep`` (beat, every
minute) processes what a lost hint, a dead worker or a failure left unfinished. Both are
idempotent: chunks that are done are skipped, and a chunk commits whole or not at all.
"""

from __future__ import annotations

from celery import shared_task

from engram_site.jobs import runner
from engram_site.jobs.presets import HINT, SCHEDULED
from sources.services.process import source_process
from sources.services.sweep import sources_sweep


@shared_task(name="sources.process_source", **HINT)
def process_source(source_id: str) -> dict:
    return source_process(source_id=source_id).as_dict()


@shared_task(name="sources.sweep", **SCHEDULED)
def sweep() -> dict:
    return runner.run_job("sources_sweep", sources_sweep, lock=True, keep_idle=False).as_dict()
